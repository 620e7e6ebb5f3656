/* simulate.c -- placeholder until the algorithms land (replaced in this session). */
#include <stdio.h>
#include "cli.h"
int sl_cli_simulate(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "sluice simulate: not built yet\n");
    return 1;
}
