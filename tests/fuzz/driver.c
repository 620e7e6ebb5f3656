/* SPDX-License-Identifier: Apache-2.0 */
/*
 * driver.c -- runs a libFuzzer target without libFuzzer (gcc builds, ctest): every file
 * of the corpus directory given as argv[1], then a bounded number of mutations of them
 * (byte flips, truncations, splices, insertions) from a fixed seed, so `make test`
 * exercises every parser's error paths under ASan+UBSan. `make fuzz` runs the real
 * coverage-guided fuzzer instead.
 *   FUZZ_ITERATIONS (env, default 20000) bounds the mutations.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT 65536
#define FUZZ_MAX_SEEDS 512

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

int main(int argc, char **argv) {
    static uint8_t *seeds[FUZZ_MAX_SEEDS];
    static size_t seed_len[FUZZ_MAX_SEEDS];
    size_t nseeds = 0;
    if (argc > 1) {
        DIR *d = opendir(argv[1]);
        if (d == NULL) {
            fprintf(stderr, "driver: cannot open corpus %s\n", argv[1]);
            return 1;
        }
        struct dirent *de;
        while ((de = readdir(d)) != NULL && nseeds < FUZZ_MAX_SEEDS) {
            if (de->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[1], de->d_name);
            FILE *f = fopen(path, "rb");
            if (f == NULL) continue;
            uint8_t *buf = malloc(FUZZ_MAX_INPUT);
            size_t n = fread(buf, 1, FUZZ_MAX_INPUT, f);
            fclose(f);
            seeds[nseeds] = buf;
            seed_len[nseeds++] = n;
        }
        closedir(d);
    }
    for (size_t i = 0; i < nseeds; i++) LLVMFuzzerTestOneInput(seeds[i], seed_len[i]);

    const char *it = getenv("FUZZ_ITERATIONS");
    long iterations = it ? strtol(it, NULL, 10) : 20000;
    uint8_t *buf = malloc(FUZZ_MAX_INPUT);
    for (long i = 0; i < iterations; i++) {
        size_t n = 0;
        if (nseeds > 0) {
            size_t s = next() % nseeds;
            n = seed_len[s];
            memcpy(buf, seeds[s], n);
        }
        int muts = 1 + (int)(next() % 8);
        for (int m = 0; m < muts; m++) {
            switch (next() % 6) {
            case 0: if (n) buf[next() % n] ^= (uint8_t)(1u << (next() % 8)); break;
            case 1: if (n) buf[next() % n] = (uint8_t)next(); break;
            case 2: if (n) n = next() % n; break;
            case 3: /* insert a random byte */
                if (n < FUZZ_MAX_INPUT) {
                    size_t p = n ? next() % (n + 1) : 0;
                    memmove(buf + p + 1, buf + p, n - p);
                    buf[p] = (uint8_t)next();
                    n++;
                }
                break;
            case 4: /* splice from another seed */
                if (nseeds > 0) {
                    size_t s = next() % nseeds;
                    if (seed_len[s]) {
                        size_t from = next() % seed_len[s];
                        size_t len = next() % (seed_len[s] - from + 1);
                        size_t at = n ? next() % (n + 1) : 0;
                        if (at + len > FUZZ_MAX_INPUT) len = FUZZ_MAX_INPUT - at;
                        memcpy(buf + at, seeds[s] + from, len);
                        if (at + len > n) n = at + len;
                    }
                }
                break;
            case 5: /* duplicate a chunk */
                if (n && n < FUZZ_MAX_INPUT / 2) {
                    size_t from = next() % n, len = next() % (n - from + 1);
                    memmove(buf + n, buf + from, len);
                    n += len;
                }
                break;
            }
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    free(buf);
    for (size_t i = 0; i < nseeds; i++) free(seeds[i]);
    printf("%zu seeds, %ld mutations: 0 crashes\n", nseeds, iterations);
    return 0;
}
