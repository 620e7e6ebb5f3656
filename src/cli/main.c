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
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("sluice %s\n", sluice_version());
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "sluice: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
