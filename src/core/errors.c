/* SPDX-License-Identifier: Apache-2.0 */
/*
 * errors.c -- messages for SLUICE_E* codes and the names of the algorithms.
 */
#include <string.h>

#include "sluice.h"

const char *sluice_strerror(int err) {
    switch (err) {
    case SLUICE_OK: return "success";
    case SLUICE_EINVAL: return "invalid argument";
    case SLUICE_ENOMEM: return "out of memory";
    case SLUICE_EFULL: return "store full: new keys refused";
    case SLUICE_ECORRUPT: return "corrupt or truncated data";
    case SLUICE_EIO: return "input/output error";
    case SLUICE_ENOTFOUND: return "not found";
    case SLUICE_ERANGE: return "value out of range";
    case SLUICE_ESTORE: return "state store unreachable";
    case SLUICE_ETOOMANY: return "too many limits in one decision";
    default: return "unknown error";
    }
}

static const struct {
    sluice_algo algo;
    const char *name;
} algo_names[] = {
    {SLUICE_FIXED_WINDOW, "fixed_window"},   {SLUICE_SLIDING_WINDOW, "sliding_window"},
    {SLUICE_SLIDING_LOG, "sliding_log"},     {SLUICE_TOKEN_BUCKET, "token_bucket"},
    {SLUICE_GCRA, "gcra"},                   {SLUICE_LEAKY_BUCKET, "leaky_bucket"},
    {SLUICE_CONCURRENCY, "concurrency"},     {SLUICE_QUOTA, "quota"},
    {SLUICE_ADAPTIVE_CONCURRENCY, "adaptive_concurrency"},
};

const char *sluice_algo_name(sluice_algo algo) {
    for (size_t i = 0; i < sizeof(algo_names) / sizeof(algo_names[0]); i++)
        if (algo_names[i].algo == algo) return algo_names[i].name;
    return NULL;
}

int sluice_algo_parse(const char *name, sluice_algo *out) {
    if (name == NULL) return SLUICE_EINVAL;
    for (size_t i = 0; i < sizeof(algo_names) / sizeof(algo_names[0]); i++) {
        if (strcmp(algo_names[i].name, name) == 0) {
            *out = algo_names[i].algo;
            return SLUICE_OK;
        }
    }
    return SLUICE_ENOTFOUND;
}
