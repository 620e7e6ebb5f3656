/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llm.h -- token accounting for LLM APIs as the providers write them (issue 24): the
 * request body (OpenAI chat completions, responses, embeddings; Anthropic messages) gives
 * model, user, max_tokens and an input estimate; a usage object (whole, inside a response,
 * or in streamed events) gives the counts. Parsing is a scan over the bytes that builds no
 * tree: memory is the caller's buffer plus a fixed stack (depth capped at SL_LLM_DEPTH).
 * Units: tokens, as unsigned 64-bit, each bounded by SL_LLM_TOKENS_MAX (hostile numbers,
 * negative ones, fractions and exponents are refused). Depends on core only.
 */
#ifndef SL_LLM_LLM_H
#define SL_LLM_LLM_H

#include <stddef.h>
#include <stdint.h>

#define SL_LLM_DEPTH 64                     /* deeper JSON is refused */
#define SL_LLM_TOKENS_MAX 1000000000000ull   /* 10^12: a usage beyond is refused */
#define SL_LLM_NAME_MAX 128                 /* model and user, bytes (longer: refused) */
#define SL_LLM_WEIGHT_ONE 1000u             /* cached_weight in thousandths */

typedef enum {
    SL_LLM_API_UNKNOWN = 0,
    SL_LLM_OPENAI_CHAT,
    SL_LLM_OPENAI_RESPONSES,
    SL_LLM_OPENAI_EMBEDDINGS,
    SL_LLM_ANTHROPIC_MESSAGES,
} sl_llm_api;

typedef enum { SL_LLM_PROVIDER_ANY = 0, SL_LLM_PROVIDER_OPENAI, SL_LLM_PROVIDER_ANTHROPIC } sl_llm_provider;

/* Counting parameters (per policy). */
typedef struct {
    uint32_t bytes_per_token;    /* input estimate and output-delta estimate; default 4 */
    uint32_t cached_weight;      /* cached input read, thousandths (0..1000+); default 0 */
    uint64_t default_max_tokens; /* output reservation when the request names none */
} sl_llm_params;

void sl_llm_params_default(sl_llm_params *p);

/* What a request body says. Slices point into the caller's body. */
typedef struct {
    sl_llm_api api;
    char model[SL_LLM_NAME_MAX + 1];
    char user[SL_LLM_NAME_MAX + 1];
    size_t model_len, user_len;
    int has_max_tokens;
    uint64_t max_tokens;
    size_t max_tokens_off, max_tokens_len; /* the number's bytes in the body (clamping) */
    const char *max_tokens_field;          /* "max_tokens", "max_completion_tokens", ... */
    int stream, include_usage;
    uint64_t body_bytes;
} sl_llm_request;

/* The pools a window may count (config `counts:`). */
typedef enum {
    SL_LLM_COUNT_NONE = 0, /* the policy's own cost (not an LLM window) */
    SL_LLM_COUNT_REQUESTS,
    SL_LLM_COUNT_INPUT,
    SL_LLM_COUNT_OUTPUT,
    SL_LLM_COUNT_TOTAL,
    SL_LLM_COUNT_CACHED_INPUT,
} sl_llm_count;

const char *sl_llm_count_name(sl_llm_count c);
int sl_llm_count_parse(const char *s, sl_llm_count *out); /* 0, or -1 unknown */

/* Counts as the rules of issue 24 count them. */
typedef struct {
    uint64_t requests, input, output, total, cached_input;
} sl_llm_counts;

uint64_t sl_llm_counts_get(const sl_llm_counts *c, sl_llm_count which);

/* Usage as a provider wrote it (fields present are flagged in `have`). */
#define SL_LLM_U_PROMPT 1u       /* OpenAI prompt_tokens / input_tokens (includes cached) */
#define SL_LLM_U_COMPLETION 2u   /* completion_tokens / output_tokens */
#define SL_LLM_U_CACHED 4u       /* OpenAI cached_tokens; Anthropic cache_read_input_tokens */
#define SL_LLM_U_CREATION 8u     /* Anthropic cache_creation_input_tokens */
#define SL_LLM_U_REASONING 16u   /* reasoning_tokens (part of completion: never added) */
#define SL_LLM_U_ANTHROPIC 32u   /* Anthropic shape: input_tokens excludes the cache */
typedef struct {
    unsigned have;
    uint64_t prompt, completion, cached, creation, reasoning;
} sl_llm_usage;

/* Parses a request body. api_hint from the path (sl_llm_api_from_path) or UNKNOWN (then
 * guessed from the fields). Returns 0, or -1 with a reason in err (broken JSON, not an
 * object, a hostile max_tokens, a model or user too long). */
int sl_llm_parse_request(const char *body, size_t n, sl_llm_api api_hint, sl_llm_request *rq,
                         char *err, size_t errcap);
sl_llm_api sl_llm_api_from_path(const char *path, size_t n);
const char *sl_llm_api_name(sl_llm_api a);

/* The reservation a request asks for: requests 1, input the estimate, output max_tokens
 * (else the default; 0 for embeddings), total their sum, cached 0. */
void sl_llm_reserve(const sl_llm_request *rq, const sl_llm_params *p, sl_llm_counts *out);

/* Parses a usage: the usage object itself, a response holding one ("usage",
 * "response.usage", "message.usage"), or one streamed event's data. Fields found are
 * merged into *u (a later value replaces an earlier one: Anthropic's message_delta output
 * is cumulative). Returns 1 when a usage field was found, 0 when none, -1 on broken JSON or a
 * hostile number (then *u is unchanged). */
int sl_llm_parse_usage(const char *json, size_t n, sl_llm_usage *u, char *err, size_t errcap);

/* The counting rules: input = prompt - cached + cached x weight (+ Anthropic cache
 * creation at weight 1), output = completion, total = input + output, requests = 1,
 * cached_input = cached reads. Weighted parts round up. */
void sl_llm_count_usage(const sl_llm_usage *u, const sl_llm_params *p, sl_llm_counts *out);

/* ceil(bytes / bytes_per_token) */
uint64_t sl_llm_estimate(uint64_t bytes, const sl_llm_params *p);

/* ---- the JSON scan (shared with the stream code) ---- */
typedef struct {
    const char *k; /* key bytes (escaped form as in the input), NULL for an array element */
    size_t kl;
} sl_llm_jseg;

typedef enum { SL_LLM_J_STR, SL_LLM_J_NUM, SL_LLM_J_TRUE, SL_LLM_J_FALSE, SL_LLM_J_NULL, SL_LLM_J_OBJ, SL_LLM_J_ARR } sl_llm_jtype;

/* Called for each value (containers at their start) with the path of keys leading to it
 * (depth 0 = the root value). v/vl: the raw value (strings without their quotes; for
 * containers only the start). Return nonzero to stop the scan (sl_llm_json_scan returns it). */
typedef int (*sl_llm_jcb)(void *ctx, const sl_llm_jseg *path, int depth, sl_llm_jtype t,
                          const char *v, size_t vl, size_t off);

/* Validates s[0..n) as one JSON value (RFC 8259; whitespace around allowed; strings must be
 * valid UTF-8) and calls cb on the way. Returns 0, a callback's nonzero, or -1 (malformed;
 * *at = the offset of the error). */
int sl_llm_json_scan(const char *s, size_t n, sl_llm_jcb cb, void *ctx, size_t *at);

/* A JSON number as a token count: digits only (no sign, fraction or exponent), at most
 * SL_LLM_TOKENS_MAX. 0, or -1. */
int sl_llm_num_tokens(const char *v, size_t vl, uint64_t *out);

int sl_llm_key_is(const sl_llm_jseg *s, const char *lit);

#endif /* SL_LLM_LLM_H */
