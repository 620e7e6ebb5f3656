/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_conn.h -- how the server's connections use the gRPC session (grpc_conn.c): preface
 * detection, feeding a connection's read buffer, pulling output into its write buffer,
 * deadlines, GOAWAY on drain; the HTTP /json and /healthcheck endpoints; gRPC metrics.
 * The session pointer lives with the connection (sl_h2 **); NULL until the preface.
 */
#ifndef SL_GRPC_CONN_H
#define SL_GRPC_CONN_H

#include <stddef.h>

#include "api/grpc/h2.h"
#include "proto/http1.h"
#include "proto/wbuf.h"

struct sl_conn;
struct sl_worker;
struct sl_server;

/* 1: buf starts with the HTTP/2 client preface; 0: it does not; -1: too short to tell. */
int sl_grpc_preface(const char *buf, size_t len);
/* Feeds every byte of c's read buffer (rlen becomes 0) to *hp, created on first use;
 * output goes to c's write buffer. Sets c->close_after when the session is over.
 * Returns 0, or -1 on a broken connection. */
int sl_grpc_conn_feed(struct sl_conn *c, sl_h2 **hp);
/* After the write buffer drained: more of the session's queued output. */
void sl_grpc_conn_output(struct sl_conn *c, sl_h2 *h);
/* From the worker's timer tick: expire grpc-timeout deadlines that passed. */
void sl_grpc_conn_tick(struct sl_conn *c, sl_h2 *h);
/* Server draining: starts the two-step GOAWAY (sl_grpc_conn_tick sends the final one a
 * grace later); calls in flight finish, then close_after. */
void sl_grpc_conn_drain(struct sl_conn *c, sl_h2 *h);
void sl_grpc_conn_free(sl_h2 *h);

/* POST /json (proto3 JSON RateLimitRequest -> RateLimitResponse, 200/429/400/500) and
 * GET /healthcheck ("OK", or 500 while draining), as envoyproxy/ratelimit serves them. */
void sl_grpc_http_json(struct sl_conn *c, const sl_http_req *req);
void sl_grpc_http_healthcheck(struct sl_conn *c, const sl_http_req *req);

/* gRPC calls by status code, per worker (single writer each), for /metrics. */
void sl_grpc_count_status(struct sl_worker *w, int status);
void sl_grpc_metrics_render(const struct sl_server *s, sl_wbuf *out);

#endif /* SL_GRPC_CONN_H */
