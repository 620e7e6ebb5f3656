/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_http.c -- the CLI's HTTP/1.1 client for the admin listener (admin_http.h): dial
 * (TCP by name or address, or a unix socket), send the head and the body (from memory or
 * streamed from a file), read until the server closes, the deadline passes or the cap is
 * reached, then split status and body and undo a chunked encoding in place.
 */
#include "admin_http.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A connected socket to addr, or -1 with a message. */
static int dial(const char *addr, char *err, size_t errlen) {
    if (strncmp(addr, "unix:", 5) == 0) {
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        if (strlen(addr + 5) >= sizeof(un.sun_path)) {
            snprintf(err, errlen, "socket path too long");
            return -1;
        }
        snprintf(un.sun_path, sizeof(un.sun_path), "%s", addr + 5);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&un, sizeof(un)) == 0) return fd;
        snprintf(err, errlen, "%s", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr) {
        snprintf(err, errlen, "expected HOST:PORT");
        return -1;
    }
    size_t hl = (size_t)(colon - addr);
    if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']') addr++, hl -= 2;
    if (hl >= sizeof(host)) hl = sizeof(host) - 1;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, colon + 1, &hints, &res);
    if (g != 0) {
        snprintf(err, errlen, "%s", gai_strerror(g));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            snprintf(err, errlen, "%s", strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static bool send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

/* The chunks of a chunked body joined in place (what is not well formed ends it). */
static void unchunk(char *buf) {
    size_t in = 0, o = 0, n = strlen(buf);
    while (in < n) {
        char *end = NULL;
        unsigned long k = strtoul(buf + in, &end, 16);
        char *crlf = strstr(buf + in, "\r\n");
        if (crlf == NULL || end == buf + in || k == 0 || (size_t)(crlf + 2 - buf) + k > n) break;
        memmove(buf + o, crlf + 2, k);
        o += k;
        in = (size_t)(crlf + 2 - buf) + k + 2;
    }
    buf[o] = '\0';
}

int sl_cli_http(const sl_cli_request *r, char **out, char *err, size_t errlen) {
    *out = NULL;
    size_t body_len = r->body ? r->body_len : 0;
    if (r->body_file != NULL) {
        long flen;
        if (fseek(r->body_file, 0, SEEK_END) != 0 || (flen = ftell(r->body_file)) < 0 ||
            fseek(r->body_file, 0, SEEK_SET) != 0) {
            snprintf(err, errlen, "the file cannot be read from start to end (a pipe? give a file)");
            return -1;
        }
        body_len = (size_t)flen;
    }
    int fd = dial(r->addr, err, errlen);
    if (fd < 0) return -1;
    bool tok = r->token != NULL && r->token[0] != '\0';
    char head[1024];
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\nContent-Length: %zu\r\n"
                     "%s%s%s%s%s%s\r\n",
                     r->method, r->path, body_len, r->content_type ? "Content-Type: " : "",
                     r->content_type ? r->content_type : "", r->content_type ? "\r\n" : "",
                     tok ? "Authorization: Bearer " : "", tok ? r->token : "", tok ? "\r\n" : "");
    bool ok = n > 0 && (size_t)n < sizeof(head) && send_all(fd, head, (size_t)n);
    if (ok && r->body != NULL) ok = send_all(fd, r->body, body_len);
    if (ok && r->body_file != NULL) {
        char chunk[65536];
        size_t k;
        while (ok && (k = fread(chunk, 1, sizeof(chunk), r->body_file)) > 0) ok = send_all(fd, chunk, k);
    }
    if (!ok) {
        snprintf(err, errlen, "cannot send the request");
        close(fd);
        return -1;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    int64_t deadline = mono_ms() + r->timeout_ms;
    while (buf != NULL) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = deadline - mono_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
            snprintf(err, errlen, "no answer within %d s", r->timeout_ms / 1000);
            free(buf);
            close(fd);
            return -1;
        }
        if (len == cap) {
            if (cap >= r->max_answer) break;
            char *nb = realloc(buf, cap * 2 + 1);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t k = recv(fd, buf + len, cap - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    buf[len] = '\0';
    int status = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || sep == NULL) {
        snprintf(err, errlen, "not an HTTP answer");
        free(buf);
        return -1;
    }
    bool chunked = false;
    for (char *h = buf; h < sep; h++)
        if (strncasecmp(h, "\r\ntransfer-encoding: chunked", 28) == 0) chunked = true;
    memmove(buf, sep + 4, len - (size_t)(sep + 4 - buf) + 1);
    if (chunked) unchunk(buf);
    *out = buf;
    return status;
}
