/* SPDX-License-Identifier: Apache-2.0 */
/*
 * h2.h -- a gRPC server session over cleartext HTTP/2 (prior knowledge), built on
 * libnghttp2 with no I/O: feed it the bytes a connection read, take the bytes it wants
 * written. Many concurrent unary calls per connection; each call's one length-prefixed
 * message is buffered (bounded by max_message) and, when the request ends, handed to the
 * call layer: answered then, or parked until its answer comes (sl_h2_complete) while the
 * connection's other calls go on. Normal responses, or Trailers-Only for errors.
 * Times: env->mono_ns (monotonic ns) for grpc-timeout deadlines; env->now for decisions.
 */
#ifndef SL_GRPC_H2_H
#define SL_GRPC_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* gRPC status codes (SPECS §3.6) */
enum {
    SL_GRPC_OK = 0,
    SL_GRPC_CANCELLED = 1,
    SL_GRPC_UNKNOWN = 2,
    SL_GRPC_INVALID_ARGUMENT = 3,
    SL_GRPC_DEADLINE_EXCEEDED = 4,
    SL_GRPC_NOT_FOUND = 5,
    SL_GRPC_RESOURCE_EXHAUSTED = 8,
    SL_GRPC_UNIMPLEMENTED = 12,
    SL_GRPC_INTERNAL = 13,
    SL_GRPC_UNAVAILABLE = 14
};

struct sl_rls_req;
struct sl_grpc_reply;

/* What a call is decided with; set by the caller before every feed/tick (borrowed). */
typedef struct sl_grpc_env {
    const sl_engine *engine;       /* NULL: ShouldRateLimit answers UNAVAILABLE */
    int64_t mono_ns;               /* deadlines */
    bool draining;                 /* health answers NOT_SERVING */
    /* Decides a validated ShouldRateLimit request for `call`: 0 when *out holds the answer
     * now, 1 when the call waits for it (delivered with sl_h2_complete; the answer is
     * packed into out->buf, which stays the call's until then). */
    int (*decide)(void *ud, void *call, const struct sl_rls_req *rq, struct sl_grpc_reply *out);
    /* every call the session answers, with its grpc-status; may be NULL */
    void (*on_status)(void *ud, int grpc_status);
    void *ud;
} sl_grpc_env;

typedef struct sl_h2_opts {
    uint32_t max_streams;      /* SETTINGS_MAX_CONCURRENT_STREAMS; 0 = 1024 */
    uint32_t max_header_list;  /* request header list bytes (RFC 7541 sizes); 0 = 8192 */
    uint32_t max_message;      /* request message bytes; 0 = 64 KiB */
    /* a parked call went away (reset, deadline, session closed): its answer must not be
     * delivered; may be NULL */
    void (*forget)(void *owner, void *call);
    void *owner;               /* passed to forget (the connection) */
    /* streaming methods (ext_proc): the server's hooks, opaque here (ext_proc.h) */
    const void *xp;
} sl_h2_opts;

typedef struct sl_h2 sl_h2;

/* A new session; its SETTINGS are the first output. NULL when out of memory. */
sl_h2 *sl_h2_create(const sl_h2_opts *opts);
void sl_h2_destroy(sl_h2 *h);

/* Processes input bytes (all are consumed). Returns 0, or -1 when the connection is
 * beyond repair (bad preface, protocol error): write what sl_h2_send still gives (a
 * GOAWAY), then close. */
int sl_h2_feed(sl_h2 *h, const uint8_t *in, size_t len, const sl_grpc_env *env);
/* Copies up to `cap` pending output bytes into dst; returns how many (0: nothing now). */
size_t sl_h2_send(sl_h2 *h, uint8_t *dst, size_t cap);
/* Answers calls whose grpc-timeout passed with DEADLINE_EXCEEDED; sends the final
 * GOAWAY of a drain when its grace has passed. */
void sl_h2_tick(sl_h2 *h, const sl_grpc_env *env);
/* Graceful drain in two steps: a GOAWAY announcing the shutdown (last stream 2^31-1),
 * then, SL_H2_GOAWAY_GRACE_NS later (sl_h2_tick or a later call), the GOAWAY naming the
 * last stream taken; calls in flight finish. Idempotent. */
#define SL_H2_GOAWAY_GRACE_NS (100 * SLUICE_NS_PER_MS)
void sl_h2_goaway(sl_h2 *h, int64_t now_ns);
/* The answer of a parked call (`call` as given to env->decide; one that went away was
 * forgotten and is never completed): r->status, and for OK r->len bytes packed in r->buf
 * (the call's own buffer). */
void sl_h2_complete(sl_h2 *h, void *call, const struct sl_grpc_reply *r);
/* Calls waiting for the store. */
size_t sl_h2_waiting(const sl_h2 *h);
/* false once the session neither reads nor writes any more: close the connection. */
bool sl_h2_alive(const sl_h2 *h);
size_t sl_h2_open_calls(const sl_h2 *h);
/* Earliest pending deadline or drain step (monotonic ns), 0 when none. */
int64_t sl_h2_next_deadline(const sl_h2 *h);

/* ---- streaming calls (bidirectional: ext_proc), for their handler ----
 * A streaming call's request messages are handed to sl_grpc_stream_message one at a time
 * as each completes, in order; its responses are queued with reserve/commit and sent as
 * DATA without END_STREAM; sl_h2_stream_close ends it with trailers. Memory: at most
 * SL_H2_XP_WINDOW unhandled request bytes per stream (its flow-control window), the
 * connection window per connection, SL_H2_XP_OUT_MAX queued response bytes per stream. */
#define SL_H2_XP_MAX_MESSAGE (1u << 20)                  /* a larger message is refused */
#define SL_H2_XP_WINDOW (SL_H2_XP_MAX_MESSAGE + 4096u)
#define SL_H2_XP_OUT_MAX (4u << 20)

/* Room for one response message of at most max bytes (NULL: the call is over, or too much
 * is queued); then commit its length. */
uint8_t *sl_h2_stream_reserve(sl_h2 *h, void *call, size_t max);
void sl_h2_stream_commit(sl_h2 *h, void *call, size_t len);
/* Ends the call with trailers (grpc-status, grpc-message); later messages are dropped. */
void sl_h2_stream_close(sl_h2 *h, void *call, int status, const char *msg);
/* A handler that answered 1 (busy) is done with its message: the next ones follow. */
void sl_h2_stream_resume(sl_h2 *h, void *call);
/* The message a busy handler holds (it stays in place until resume). */
const uint8_t *sl_h2_stream_current(sl_h2 *h, void *call, size_t *len);
const sl_h2_opts *sl_h2_options(const sl_h2 *h);

/* The streaming method's handler (ext_proc.c). message: 0 handled, 1 busy (waits: it
 * calls sl_h2_stream_resume later). oversize: a message above SL_H2_XP_MAX_MESSAGE was
 * announced (the handler answers and closes). halfclose: the client ended its side.
 * gone: the stream is over (reset, closed, session destroyed): free *app; the session
 * must not be used from it. */
bool sl_grpc_streaming_method(const char *path, size_t len);
int sl_grpc_stream_message(sl_h2 *h, void *call, void **app, const uint8_t *msg, size_t len);
void sl_grpc_stream_oversize(sl_h2 *h, void *call, void **app, uint32_t declared);
void sl_grpc_stream_halfclose(sl_h2 *h, void *call, void **app);
void sl_grpc_stream_gone(sl_h2 *h, void *call, void *app);

/* ---- the call layer (grpc.c), used by the session ---- */

/* One reply: status, optional message (text, percent-encoded on the wire) and, when
 * status is OK, the serialized response message in buf[0..len). */
typedef struct sl_grpc_reply {
    int status;
    char message[160];
    uint8_t *buf;
    size_t cap, len;
} sl_grpc_reply;

/* true when `path` names a method this server offers (others: UNIMPLEMENTED at once). */
bool sl_grpc_known_method(const char *path, size_t len);
/* Handles one call: method `path`, request message msg[0..len). Returns 0 with the answer
 * in *out (errors are a status), or 1 when the call is parked (env->decide). */
int sl_grpc_call(const sl_grpc_env *env, void *call, const char *path, size_t path_len,
                 const uint8_t *msg, size_t len, sl_grpc_reply *out);

/* grpc-timeout value ("20m", "1S") in ns; -1 when malformed. */
int64_t sl_grpc_parse_timeout(const char *v, size_t len);
/* grpc-message percent-encoding; returns bytes written (NUL-terminated, truncated). */
size_t sl_grpc_pct_encode(const char *in, char *out, size_t cap);

#endif /* SL_GRPC_H2_H */
