/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llm_http.h -- the application API's LLM forms (issue 24, docs/ai-gateway.md): /v1/check
 * with the LLM request body (`request.body` RAW as a string or object, with
 * `request.content_type`; or `llm: {...}`), /v1/settle with the provider's usage object as
 * is (`usage`, or a whole response). JSON in through jansson, then src/llm's scan.
 */
#ifndef SL_API_HTTP_LLM_HTTP_H
#define SL_API_HTTP_LLM_HTTP_H

#include <jansson.h>
#include <stddef.h>

#include "llm/llm.h"

/* 0: no LLM body in j; 1: parsed into *out; -1: refused (reason in err). */
int sl_http_llm_request(const json_t *j, sl_llm_request *out, char *err, size_t errcap);

/* 0: no usage in j; 1: parsed into *out; -1: refused (reason in err). */
int sl_http_llm_usage(const json_t *j, sl_llm_usage *out, char *err, size_t errcap);

#endif /* SL_API_HTTP_LLM_HTTP_H */
