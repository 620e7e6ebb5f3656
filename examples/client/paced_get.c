/* SPDX-License-Identifier: Apache-2.0 */
/*
 * paced_get.c -- a well-behaved client of an API behind sluice, with libcurl: it reads the
 * RateLimit-Policy / RateLimit / Retry-After fields of every answer, waits as long as the
 * pacer says before each request (so it is not refused in the first place), and retries
 * refused or failed requests with jittered backoff within a budget, only when repeating
 * them is safe. docs/clients.md walks through it.
 *
 *   sluice-client-example [-s SECONDS] [-r WANTED_PER_S] [-X METHOD] [-k IDEMPOTENCY_KEY]
 *                         [-H 'Name: value']... [-P] [-R] URL
 *
 * -P turns the pacer off, -R the retry helper (a refused request is dropped and the next
 * one goes at the wanted rate): to see what a client without them gets.
 *
 * Prints one line per answer ("<ms since start> <status> <what the client did>") and a
 * summary line: "summary sent=N ok=N refused=N refused_after_first=N gave_up=N".
 */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice_client.h"

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
    if (ns <= 0) return;
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* libcurl hands over each header line of the answer; the client helpers read them. */
static size_t on_header(char *line, size_t size, size_t n, void *ctx) {
    size_t len = size * n;
    sluice_ratelimit_info *info = ctx;
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        sluice_client_info_init(info); /* a new answer (after a 100 Continue too) */
        return len;
    }
    char *colon = memchr(line, ':', len);
    if (colon == NULL) return len;
    size_t vlen = len - (size_t)(colon + 1 - line);
    const char *v = colon + 1;
    while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n')) vlen--;
    sluice_client_info_header(info, line, (size_t)(colon - line), v, vlen, wall_ns());
    return len;
}

static size_t discard(char *p, size_t size, size_t n, void *ctx) {
    (void)p;
    (void)ctx;
    return size * n;
}

int main(int argc, char **argv) {
    double seconds = 10, wanted = 50;
    const char *method = "GET", *idem_key = NULL, *url = NULL;
    int pace = 1, retry_on = 1;
    struct curl_slist *hdrs = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) wanted = atof(argv[++i]);
        else if (strcmp(argv[i], "-X") == 0 && i + 1 < argc) method = argv[++i];
        else if (strcmp(argv[i], "-k") == 0 && i + 1 < argc) idem_key = argv[++i];
        else if (strcmp(argv[i], "-H") == 0 && i + 1 < argc) hdrs = curl_slist_append(hdrs, argv[++i]);
        else if (strcmp(argv[i], "-P") == 0) pace = 0;
        else if (strcmp(argv[i], "-R") == 0) retry_on = 0;
        else if (argv[i][0] != '-' && url == NULL) url = argv[i];
        else {
            fprintf(stderr, "usage: %s [-s SECONDS] [-r WANTED_PER_S] [-X METHOD] "
                            "[-k IDEMPOTENCY_KEY] [-H 'Name: value']... [-P] [-R] URL\n", argv[0]);
            return 2;
        }
    }
    if (url == NULL || wanted <= 0) {
        fprintf(stderr, "%s: a URL (and a positive -r) is needed\n", argv[0]);
        return 2;
    }
    if (idem_key != NULL) {
        char h[256];
        snprintf(h, sizeof(h), "Idempotency-Key: %s", idem_key);
        hdrs = curl_slist_append(hdrs, h);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *c = curl_easy_init();
    sluice_ratelimit_info info;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &info);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);

    /* The three helpers: the pacer (how long to wait before sending), the retry helper
     * (whether and when to send a failed request again) and the header reader above. */
    sluice_client_pacer *pacer = sluice_client_pacer_create(NULL);
    sluice_client_retry_options ro = {.base_ns = 200 * 1000000LL, .cap_ns = 5 * 1000000000LL,
                                      .max_attempts = 4, .budget_ns = 10 * 1000000000LL};
    sluice_client_retry *retry = sluice_client_retry_create(&ro, NULL);
    int idempotent = sluice_client_is_idempotent(method) || idem_key != NULL;

    int64_t start = mono_ns(), end = start + (int64_t)(seconds * 1e9);
    int64_t gap = (int64_t)(1e9 / wanted), next_wanted = start;
    long sent = 0, ok = 0, refused = 0, refused_after_first = 0, gave_up = 0;
    int answered = 0;
    while (mono_ns() < end) {
        /* the application wants one request every `gap`; the pacer may make it wait longer */
        sleep_ns(next_wanted - mono_ns());
        next_wanted += gap;
        sluice_client_retry_start(retry, idempotent, mono_ns());
        for (;;) {
            int64_t wait = pace ? sluice_client_pacer_wait(pacer, 1, mono_ns()) : 0;
            if (mono_ns() + wait >= end) goto done;
            sleep_ns(wait);
            sluice_client_info_init(&info);
            sluice_client_pacer_sent(pacer, 1, mono_ns());
            sent++;
            long status = 0;
            if (curl_easy_perform(c) == CURLE_OK)
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
            int64_t now = mono_ns();
            sluice_client_info_finish(&info);
            sluice_client_pacer_update(pacer, (int)status, &info, now);
            if (status == 429) {
                refused++;
                if (answered) refused_after_first++;
            } else if (status >= 200 && status < 300) {
                ok++;
            }
            if (status != 0) answered = 1;
            int64_t delay;
            sluice_client_retry_verdict v = sluice_client_retry_next(
                retry, (int)status, info.has_retry_after ? info.retry_after_ns : -1, now, &delay);
            printf("%lld %ld r=%lld %s\n", (long long)((now - start) / 1000000), status,
                   info.n_items ? (long long)info.items[0].remaining : -1LL,
                   sluice_client_retry_verdict_name(v));
            if (!retry_on && v == SLUICE_CLIENT_RETRY) v = SLUICE_CLIENT_DONE;
            if (v != SLUICE_CLIENT_RETRY) {
                if (v != SLUICE_CLIENT_DONE) gave_up++;
                break;
            }
            sleep_ns(delay);
        }
    }
done:
    printf("summary sent=%ld ok=%ld refused=%ld refused_after_first=%ld gave_up=%ld\n", sent, ok,
           refused, refused_after_first, gave_up);
    sluice_client_retry_destroy(retry);
    sluice_client_pacer_destroy(pacer);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    curl_global_cleanup();
    return 0;
}
