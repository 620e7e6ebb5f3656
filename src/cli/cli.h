/* SPDX-License-Identifier: Apache-2.0 */
/* cli.h -- the subcommands of the `sluice` program; each returns the exit status. */
#ifndef SL_CLI_H
#define SL_CLI_H

int sl_cli_simulate(int argc, char **argv);  /* simulate.c */
int sl_cli_replay(int argc, char **argv);    /* replay.c: "replay -c CONFIG TRACE..." */
/* argv[0] is "serve" / "config". */
int sl_cli_serve(int argc, char **argv);  /* serve.c */
int sl_cli_config(int argc, char **argv); /* config_cmd.c: "config check FILE" */
int sl_cli_reload(int argc, char **argv); /* admin_cmd.c: POST /v1/reload */
int sl_cli_status(int argc, char **argv); /* admin_cmd.c: GET /readyz, /v1/policies */
int sl_cli_override(int argc, char **argv); /* override_cmd.c: /v1/overrides */
int sl_cli_explain(int argc, char **argv); /* explain.c */
/* compat.c: `--compat envoy-ratelimit`: envoyproxy/ratelimit's environment into the
 * server options and the process-wide envoy settings (before any config is loaded). 0, or
 * -1 after an error line on stderr. */
struct sl_server_opts;
int sl_cli_compat_envoy(struct sl_server_opts *o);

/* simulate_cap.c: the capacity protection patterns of `sluice simulate` (adaptive, shed,
 * borrow, penalty; "all" runs each), on the engine with built-in configs. */
#include <stdbool.h>
#include <stdio.h>
struct sl_buf;
void sl_sim_cap_usage(FILE *f);
bool sl_sim_cap_known(const char *name);
int sl_sim_cap_run(const char *name, const char *svg_dir, struct sl_buf *html, int *ran);

#endif
