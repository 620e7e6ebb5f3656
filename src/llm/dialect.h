/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dialect.h -- rate-limit headers as the LLM providers write them (issue 24), so an SDK's
 * own retry logic reads a sluice answer unchanged: OpenAI's x-ratelimit-{limit,remaining,
 * reset}-{requests,tokens} (resets as Go-style durations: "6m0s", "1s", "20ms") and
 * Anthropic's anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
 * remaining,reset} (resets in RFC 3339, UTC). `tokens` is the most restrictive token
 * window (the least remaining). Formatting only: the windows come from the caller.
 */
#ifndef SL_LLM_DIALECT_H
#define SL_LLM_DIALECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_LLM_DIALECT_OPENAI 1
#define SL_LLM_DIALECT_ANTHROPIC 2

typedef struct {
    unsigned counts;    /* sl_llm_count of the window */
    uint64_t limit, remaining;
    int64_t reset_ns;   /* from now: the retry when refused, else until fresh */
} sl_llm_dwin;

typedef bool (*sl_llm_add_fn)(void *ctx, const char *name, size_t nl, const char *value, size_t vl);

/* The dialect's pairs for windows w[0..n), added through add (stops at the first refusal);
 * now_wall_ns anchors Anthropic's absolute resets. */
void sl_llm_dialect_pairs(int dialect, const sl_llm_dwin *w, size_t n, int64_t now_wall_ns,
                          sl_llm_add_fn add, void *ctx);

/* Go's time.Duration text at millisecond precision, rounded up ("0s", "20ms", "1s",
 * "1.5s", "6m0s", "1h2m3s"); returns its length. cap >= 32. */
size_t sl_llm_go_duration(int64_t ns, char *out, size_t cap);
/* RFC 3339 UTC at second precision ("2026-12-04T01:00:00Z"); returns its length. cap >= 32. */
size_t sl_llm_rfc3339(int64_t wall_ns, char *out, size_t cap);

#endif /* SL_LLM_DIALECT_H */
