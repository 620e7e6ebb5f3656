/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.h -- reloads a config directory when it changes (watch.c, inotify): files written,
 * added, removed or renamed in it, the directory itself replaced, and a symlink on its path
 * swapped (a Kubernetes ConfigMap's `..data`, envoyproxy/ratelimit's RUNTIME_ROOT).
 */
#ifndef SL_SERVER_WATCH_H
#define SL_SERVER_WATCH_H

#include <stddef.h>

struct sl_server;

#define SL_WATCH_DEBOUNCE_MS 200 /* quiet time after the last change before the reload */

/* Starts the watcher thread when the server's config is a directory (nothing for a file:
 * SIGHUP and POST /v1/reload reload it). 0, or -1 with err (inotify unavailable). */
int sl_watch_start(struct sl_server *s, char *err, size_t errlen);
void sl_watch_stop(void);

#endif /* SL_SERVER_WATCH_H */
