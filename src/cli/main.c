/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c -- the `sluice` command: dispatches to its subcommands.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sluice.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice <command> [options]\n"
            "  serve [options]      run the decision server (sluice serve --help)\n"
            "  config check FILE    validate a config file; errors as file:line:col\n"
            "  simulate [PATTERN]   run a traffic pattern against every algorithm on a fake clock\n"
            "                       (sluice simulate --help lists the patterns)\n"
            "  explain -c FILE ...  why a request would get its answer (sluice explain --help)\n"
            "  replay -c CONFIG TRACE...  run CONFIG over recorded traffic (access logs, CSV)\n"
            "  reload               ask the running server to reload its config (admin API)\n"
            "  status               the running server's readiness and policies (admin API)\n"
            "  override COMMAND     per-key overrides: set, get, rm, ls, import, export (admin API)\n"
            "  version              print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0) return sl_cli_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "config") == 0) return sl_cli_config(argc - 1, argv + 1);
    if (strcmp(cmd, "simulate") == 0) return sl_cli_simulate(argc - 1, argv + 1);
    if (strcmp(cmd, "replay") == 0) return sl_cli_replay(argc - 1, argv + 1);
    if (strcmp(cmd, "explain") == 0) return sl_cli_explain(argc - 1, argv + 1);
    if (strcmp(cmd, "reload") == 0) return sl_cli_reload(argc - 1, argv + 1);
    if (strcmp(cmd, "status") == 0) return sl_cli_status(argc - 1, argv + 1);
    if (strcmp(cmd, "override") == 0) return sl_cli_override(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("sluice %s\n", sluice_version());
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        if (argc >= 3 && strcmp(cmd, "help") == 0) { /* sluice help TOPIC = sluice TOPIC --help */
            char *sub[] = {argv[2], "--help", NULL};
            if (strcmp(argv[2], "config") == 0) {
                char *cs[] = {"config", "--help", NULL};
                return sl_cli_config(2, cs);
            }
            if (strcmp(argv[2], "override") == 0) {
                char *os[] = {"override", "--help", NULL};
                return sl_cli_override(2, os);
            }
            static const char *const topics[] = {"serve", "simulate", "replay", "explain", "reload", "status", NULL};
            for (size_t i = 0; topics[i]; i++)
                if (strcmp(argv[2], topics[i]) == 0) {
                    char *a[] = {(char *)topics[i], "--help", NULL};
                    return i == 0 ? sl_cli_serve(2, a) : i == 1 ? sl_cli_simulate(2, a)
                           : i == 2 ? sl_cli_replay(2, a) : i == 3 ? sl_cli_explain(2, a)
                           : i == 4 ? sl_cli_reload(2, a) : sl_cli_status(2, a);
                }
            (void)sub;
            fprintf(stderr, "sluice: no help on '%s' (topics: serve, config, simulate, replay, explain, "
                            "reload, status, override; man sluice, man sluice.yaml)\n", argv[2]);
            return 2;
        }
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "sluice: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
