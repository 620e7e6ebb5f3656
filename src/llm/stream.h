/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stream.h -- a streamed LLM response (server-sent events, OpenAI or Anthropic) as it
 * flows: whole events are forwarded, a partial one is held until its end arrives (at most
 * SL_LLM_EVENT_MAX bytes; a longer one passes through unparsed and its bytes count as
 * output); output is counted from usage events, else estimated from the bytes of content
 * deltas; when the output budget is spent the stream is cut before the event that would
 * cross it, one final event says why, and every later byte is cleared (still read for the
 * provider's usage). Memory per stream: this struct + the held event.
 */
#ifndef SL_LLM_STREAM_H
#define SL_LLM_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "llm/llm.h"

#define SL_LLM_EVENT_MAX 65536u
#define SL_LLM_NO_BUDGET UINT64_MAX

typedef struct {
    char *p;
    size_t len, cap;
} sl_llm_buf;

int sl_llm_buf_put(sl_llm_buf *b, const void *s, size_t n); /* 0, or -1 out of memory */
void sl_llm_buf_free(sl_llm_buf *b);

typedef enum {
    SL_LLM_SETTLE_USAGE = 0,   /* the provider's usage */
    SL_LLM_SETTLE_ESTIMATE,    /* from what streamed (a client gone mid-stream) */
    SL_LLM_SETTLE_RESERVATION, /* complete without usage: the reservation stands */
} sl_llm_settle_src;

typedef struct {
    sl_llm_api api;
    sl_llm_params params;
    uint64_t budget;         /* output tokens the stream may carry */
    sl_llm_counts reserved;  /* what was reserved (input estimate, output) */
    char policy[96];
    sl_llm_usage usage;
    int usage_seen;          /* a usage with an output count */
    int usage_errors;        /* events whose usage was refused (hostile numbers) */
    uint64_t delta_bytes;    /* content-delta bytes forwarded */
    uint64_t output;         /* output tokens forwarded: max(usage, estimate) */
    uint64_t events, bytes_in, bytes_out;
    int ended;               /* cut at the budget: later chunks cleared */
    int done;                /* the provider's end ([DONE], message_stop, response.completed) */
    int eos;                 /* the body's end was seen */
    int block_open;          /* Anthropic: a content block is open */
    uint64_t block_index;
    int skipping;            /* inside an oversized event: passed through unparsed */
    sl_llm_buf pend;         /* the partial event held */
} sl_llm_stream;

void sl_llm_stream_init(sl_llm_stream *st, sl_llm_api api, const sl_llm_params *p, uint64_t budget,
                        const sl_llm_counts *reserved, const char *policy);
void sl_llm_stream_free(sl_llm_stream *st);

/* One chunk of the response body; what to send on is appended to out (possibly nothing).
 * eos: the last chunk. Returns 0, or -1 out of memory. */
int sl_llm_stream_feed(sl_llm_stream *st, const char *in, size_t n, int eos, sl_llm_buf *out);

/* What to settle to: complete = the body's end was seen (else the client went away). */
sl_llm_settle_src sl_llm_stream_settle(const sl_llm_stream *st, int complete, sl_llm_counts *out);
const char *sl_llm_settle_src_name(sl_llm_settle_src s);

#endif /* SL_LLM_STREAM_H */
