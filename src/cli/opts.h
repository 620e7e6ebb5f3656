/* SPDX-License-Identifier: Apache-2.0 */
/*
 * opts.h -- the one option parser of every `sluice` subcommand: getopt_long, so each takes
 * --opt value, --opt=value, -c value and -cvalue alike, and every usage error reads the
 * same (exit status 2): "sluice CMD: unknown option '--x' (sluice CMD --help)",
 * "missing value after '--x'", "option '--x' takes no value", "unexpected argument 'x'".
 */
#ifndef SL_CLI_OPTS_H
#define SL_CLI_OPTS_H

#include <getopt.h>
#include <stdbool.h>

#define SL_OPT_END (-1)
#define SL_OPT_ERR (-2)

typedef struct sl_opts {
    const char *cmd;         /* "explain", "config check": in messages */
    const struct option *lo; /* long options, {0} last */
    char shorts[64];         /* getopt's short options, ':' first (missing values told apart) */
    char from[80];           /* the current option as spelt: "--cost", "-c" (for messages) */
} sl_opts;

/* Starts parsing argv[1..] of subcommand `cmd`. `shorts` as getopt's ("c:h"); with
 * `in_order` options end at the first argument (serve: nothing is permuted), else
 * arguments may come anywhere and are left, in order, at argv[optind..argc). */
void sl_opts_init(sl_opts *p, const char *cmd, const struct option *lo, const char *shorts,
                  bool in_order);
/* The next option's value (struct option's val), its argument in *arg (NULL when it takes
 * none); SL_OPT_END after the last; SL_OPT_ERR after printing the usage error. */
int sl_opts_next(sl_opts *p, int argc, char **argv, const char **arg);
/* Prints "sluice CMD: WHAT 'WORD'" (with the --help hint) on stderr; returns 2. */
int sl_opts_usage_error(const sl_opts *p, const char *what, const char *word);

/* An IPv4 or IPv6 address in text form (what --ip takes). */
bool sl_cli_is_ip(const char *s);

#endif
