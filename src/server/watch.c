/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.c -- the config directory's watcher: one thread, one inotify descriptor watching
 * the directory (through its symlinks: the watch lands on today's target), its parent (the
 * directory replaced by a rename), and the parent of every symlink on its path (a swap of
 * that link: RUNTIME_ROOT). Any event starts a quiet period (SL_WATCH_DEBOUNCE_MS), then one
 * reload through sl_server_reload_from (atomic: a broken file keeps the previous config,
 * reported on stderr and counted in sluice_config_load_error_total), then the watches are
 * placed again, since the links may now lead elsewhere.
 * Never on the decision path; the thread sleeps in poll(2) between events.
 */
#include "server/watch.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/audit.h"
#include "clock.h"
#include "server/server.h"

#define MAX_WATCHES 32

static pthread_t g_th;
static bool g_running;
static int g_ifd = -1, g_efd = -1;
static int g_wd[MAX_WATCHES];
static char g_name[MAX_WATCHES][NAME_MAX + 1]; /* events of interest there: this name ("" = any) */
static int g_nwd;
static sl_server *g_srv;

/* Watches `path`; `name`: only events about that entry of it matter ("" = every event). */
static void add_watch(const char *path, uint32_t mask, const char *name) {
    if (g_nwd >= MAX_WATCHES) return;
    int wd = inotify_add_watch(g_ifd, path, mask);
    if (wd < 0) return;
    for (int i = 0; i < g_nwd; i++)
        if (g_wd[i] == wd) {
            if (name[0] == '\0') g_name[i][0] = '\0'; /* the same directory: widest interest */
            return;
        }
    g_wd[g_nwd] = wd;
    snprintf(g_name[g_nwd], sizeof(g_name[0]), "%s", name);
    g_nwd++;
}

static const char *base_of(const char *path) {
    size_t l = strlen(path);
    while (l > 1 && path[l - 1] == '/') l--;
    const char *b = path + l;
    while (b > path && b[-1] != '/') b--;
    static _Thread_local char out[NAME_MAX + 1];
    size_t n = (size_t)(path + l - b);
    if (n > NAME_MAX) n = NAME_MAX;
    memcpy(out, b, n);
    out[n] = '\0';
    return out;
}

/* Whether one event is about what we watch (a parent's other entries are not). */
static bool relevant(const struct inotify_event *ev) {
    if (ev->mask & IN_IGNORED) return false;
    for (int i = 0; i < g_nwd; i++)
        if (g_wd[i] == ev->wd)
            return g_name[i][0] == '\0' || (ev->len > 0 && strcmp(ev->name, g_name[i]) == 0);
    return false;
}

static void parent_of(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s", path);
    size_t l = strlen(out);
    while (l > 1 && out[l - 1] == '/') out[--l] = '\0';
    char *slash = strrchr(out, '/');
    if (slash == NULL) snprintf(out, cap, ".");
    else if (slash == out) out[1] = '\0';
    else *slash = '\0';
}

/* (Re)places every watch: the directory's contents, its parent, and the parent of each
 * symlink on its path. */
static void place_watches(const char *dir) {
    for (int i = 0; i < g_nwd; i++) inotify_rm_watch(g_ifd, g_wd[i]);
    g_nwd = 0;
    const uint32_t contents = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE |
                              IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;
    const uint32_t names = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB;
    add_watch(dir, contents, "");
    char p[PATH_MAX], cur[PATH_MAX], nm[NAME_MAX + 1];
    parent_of(dir, p, sizeof(p));
    snprintf(nm, sizeof(nm), "%s", base_of(dir));
    add_watch(p, names, nm);
    /* every symlink on the path: watch the directory holding it (its swap is a rename there) */
    snprintf(cur, sizeof(cur), "%s", dir);
    for (int depth = 0; depth < 16 && strcmp(cur, "/") != 0 && strcmp(cur, ".") != 0; depth++) {
        struct stat st;
        if (lstat(cur, &st) == 0 && S_ISLNK(st.st_mode)) {
            parent_of(cur, p, sizeof(p));
            snprintf(nm, sizeof(nm), "%s", base_of(cur));
            add_watch(p, names | IN_DONT_FOLLOW, nm);
        }
        parent_of(cur, p, sizeof(p));
        snprintf(cur, sizeof(cur), "%s", p);
    }
}

static void reload_now(void) {
    char err[4096];
    /* logged and audited as a file change (source file-change), like any reload */
    sl_server_reload_from(g_srv, SL_AUDIT_FILE_CHANGE, NULL, err, sizeof(err), NULL, 0);
}

static void *watcher(void *arg) {
    (void)arg;
    const char *dir = g_srv->opt.config_path;
    int64_t due = 0; /* monotonic ns of the pending reload, 0 = none */
    _Alignas(struct inotify_event) char buf[8192];
    for (;;) {
        int timeout = -1;
        if (due != 0) {
            int64_t left = due - sl_clock_mono_ns();
            timeout = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
        }
        struct pollfd pf[2] = {{g_ifd, POLLIN, 0}, {g_efd, POLLIN, 0}};
        int r = poll(pf, 2, timeout);
        if (r < 0 && errno != EINTR) break;
        if (pf[1].revents & POLLIN) break; /* stop */
        if (r > 0 && (pf[0].revents & POLLIN)) {
            ssize_t n;
            bool any = false;
            while ((n = read(g_ifd, buf, sizeof(buf))) > 0)
                for (char *q = buf; q + sizeof(struct inotify_event) <= buf + n;) {
                    const struct inotify_event *ev = (const struct inotify_event *)(void *)q;
                    any |= relevant(ev);
                    q += sizeof(struct inotify_event) + ev->len;
                }
            if (any) due = sl_clock_mono_ns() + (int64_t)SL_WATCH_DEBOUNCE_MS * 1000000;
        }
        if (due != 0 && sl_clock_mono_ns() >= due) {
            due = 0;
            place_watches(dir); /* before reading: a change from now on is seen again */
            reload_now();
        }
    }
    return NULL;
}

int sl_watch_start(sl_server *s, char *err, size_t errlen) {
    struct stat st;
    if (g_running || stat(s->opt.config_path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    g_ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    g_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g_ifd < 0 || g_efd < 0) {
        snprintf(err, errlen, "config directory %s is not watched (inotify: %s); SIGHUP reloads it",
                 s->opt.config_path, strerror(errno));
        if (g_ifd >= 0) close(g_ifd);
        if (g_efd >= 0) close(g_efd);
        g_ifd = g_efd = -1;
        return -1;
    }
    g_srv = s;
    g_nwd = 0;
    place_watches(s->opt.config_path);
    if (pthread_create(&g_th, NULL, watcher, NULL) != 0) {
        snprintf(err, errlen, "cannot start the config watcher");
        close(g_ifd);
        close(g_efd);
        g_ifd = g_efd = -1;
        return -1;
    }
    g_running = true;
    return 0;
}

void sl_watch_stop(void) {
    if (!g_running) return;
    uint64_t one = 1;
    ssize_t w = write(g_efd, &one, sizeof(one));
    (void)w;
    pthread_join(g_th, NULL);
    close(g_ifd);
    close(g_efd);
    g_ifd = g_efd = -1;
    g_running = false;
}
