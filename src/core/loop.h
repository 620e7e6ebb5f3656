/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop.h -- the per-worker event loop: an epoll set (level-triggered) whose entries carry
 * a callback, and deadline lists for timeouts. Each list holds nodes whose timeout has one
 * fixed duration, so appending at the tail keeps it sorted by deadline: arming, disarming
 * and expiring are O(1) per connection, with no heap. Times are monotonic nanoseconds.
 */
#ifndef SL_LOOP_H
#define SL_LOOP_H

#include <stddef.h>
#include <stdint.h>

typedef void (*sl_io_cb)(void *ud, uint32_t events);

typedef struct sl_io {
    int fd;
    sl_io_cb cb;
    void *ud;
} sl_io;

typedef struct sl_loop {
    int epfd;
    /* called after every wait, before the ready entries' callbacks (may be NULL) */
    void (*on_wake)(void *ud);
    void *wake_ud;
} sl_loop;

int sl_loop_init(sl_loop *l);
void sl_loop_deinit(sl_loop *l);
/* events: EPOLLIN/EPOLLOUT/EPOLLEXCLUSIVE...; returns 0 or -errno */
int sl_loop_add(sl_loop *l, sl_io *io, uint32_t events);
int sl_loop_mod(sl_loop *l, sl_io *io, uint32_t events);
void sl_loop_del(sl_loop *l, sl_io *io);
/* Waits up to timeout_ms and runs the callbacks of ready entries; returns how many. */
int sl_loop_poll(sl_loop *l, int timeout_ms);

/* ---- deadline lists ---- */

typedef struct sl_dnode {
    struct sl_dnode *prev, *next;
    int64_t deadline_ns;
    int list; /* which list holds it, -1 none */
} sl_dnode;

typedef struct sl_dlist {
    sl_dnode head; /* sentinel */
    int64_t duration_ns;
    int id;
} sl_dlist;

void sl_dlist_init(sl_dlist *d, int id, int64_t duration_ns);
void sl_dnode_init(sl_dnode *n);
/* Moves n (from whatever list) to the tail of d with deadline now + d->duration. */
void sl_dlist_arm(sl_dlist *d, sl_dnode *n, int64_t now_ns);
void sl_dnode_disarm(sl_dnode *n);
/* The first node whose deadline has passed, or NULL. */
sl_dnode *sl_dlist_expired(sl_dlist *d, int64_t now_ns);

#endif /* SL_LOOP_H */
