/* SPDX-License-Identifier: Apache-2.0 */
/*
 * opts.c -- getopt_long behind one interface for every subcommand (opts.h): the same
 * spellings accepted and the same usage errors everywhere. getopt's own messages are off
 * (opterr = 0); ours name the option as the user wrote it.
 */
#include "opts.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

void sl_opts_init(sl_opts *p, const char *cmd, const struct option *lo, const char *shorts,
                  bool in_order) {
    memset(p, 0, sizeof(*p));
    p->cmd = cmd;
    p->lo = lo;
    snprintf(p->shorts, sizeof(p->shorts), "%s:%s", in_order ? "+" : "", shorts);
    opterr = 0;
    optind = 0; /* 0: glibc starts over, permutation state included */
}

int sl_opts_usage_error(const sl_opts *p, const char *what, const char *word) {
    fprintf(stderr, "sluice %s: %s '%s' (sluice %s --help)\n", p->cmd, what, word, p->cmd);
    return 2;
}

int sl_opts_next(sl_opts *p, int argc, char **argv, const char **arg) {
    int li = -1;
    int ch = getopt_long(argc, argv, p->shorts, p->lo, &li);
    *arg = optarg;
    if (ch == -1) return SL_OPT_END;
    const char *word = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    if (ch == '?' || ch == ':') {
        char s[3] = {'-', (char)optopt, '\0'};
        /* a short option inside a cluster (-xv): name the letter, not the cluster */
        if (optopt != 0 && strncmp(word, "--", 2) != 0) word = s;
        if (ch == ':') sl_opts_usage_error(p, "missing value after", word);
        else if (optopt != 0 && strncmp(word, "--", 2) == 0 && strchr(word, '=') != NULL) {
            char name[80];
            snprintf(name, sizeof(name), "%.*s", (int)(strchr(word, '=') - word), word);
            sl_opts_usage_error(p, "unexpected value for", name);
        } else {
            sl_opts_usage_error(p, "unknown option", word);
        }
        return SL_OPT_ERR;
    }
    if (li >= 0) snprintf(p->from, sizeof(p->from), "--%s", p->lo[li].name);
    else snprintf(p->from, sizeof(p->from), "-%c", ch);
    return ch;
}

bool sl_cli_is_ip(const char *s) {
    unsigned char b[16];
    return s != NULL && (inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1);
}
