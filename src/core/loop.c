/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop.c -- epoll and deadline lists (see loop.h). Level-triggered on purpose: a callback
 * that stops early (output backpressure, a batch limit) is simply called again, so no
 * readiness is ever lost; the cost is one extra epoll_ctl when interest changes.
 */
#include "core/loop.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

int sl_loop_init(sl_loop *l) {
    l->on_wake = NULL;
    l->wake_ud = NULL;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    return l->epfd < 0 ? -errno : 0;
}

void sl_loop_deinit(sl_loop *l) {
    if (l->epfd >= 0) close(l->epfd);
    l->epfd = -1;
}

int sl_loop_add(sl_loop *l, sl_io *io, uint32_t events) {
    struct epoll_event ev = {.events = events, .data.ptr = io};
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, io->fd, &ev) < 0 ? -errno : 0;
}

int sl_loop_mod(sl_loop *l, sl_io *io, uint32_t events) {
    struct epoll_event ev = {.events = events, .data.ptr = io};
    return epoll_ctl(l->epfd, EPOLL_CTL_MOD, io->fd, &ev) < 0 ? -errno : 0;
}

void sl_loop_del(sl_loop *l, sl_io *io) {
    struct epoll_event ev = {0};
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, io->fd, &ev);
}

int sl_loop_poll(sl_loop *l, int timeout_ms) {
    struct epoll_event evs[64];
    int n = epoll_wait(l->epfd, evs, 64, timeout_ms);
    if (n < 0) return errno == EINTR ? 0 : -errno;
    if (l->on_wake != NULL && n > 0) l->on_wake(l->wake_ud);
    for (int i = 0; i < n; i++) {
        sl_io *io = evs[i].data.ptr;
        io->cb(io->ud, evs[i].events);
    }
    return n;
}

void sl_dlist_init(sl_dlist *d, int id, int64_t duration_ns) {
    d->head.prev = d->head.next = &d->head;
    d->head.list = id;
    d->duration_ns = duration_ns;
    d->id = id;
}

void sl_dnode_init(sl_dnode *n) {
    n->prev = n->next = NULL;
    n->deadline_ns = 0;
    n->list = -1;
}

void sl_dnode_disarm(sl_dnode *n) {
    if (n->list < 0) return;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = NULL;
    n->list = -1;
}

void sl_dlist_arm(sl_dlist *d, sl_dnode *n, int64_t now_ns) {
    sl_dnode_disarm(n);
    n->deadline_ns = now_ns + d->duration_ns;
    n->prev = d->head.prev;
    n->next = &d->head;
    d->head.prev->next = n;
    d->head.prev = n;
    n->list = d->id;
}

sl_dnode *sl_dlist_expired(sl_dlist *d, int64_t now_ns) {
    sl_dnode *n = d->head.next;
    if (n == &d->head || n->deadline_ns > now_ns) return NULL;
    return n;
}
