/* cli.h -- the subcommands of the `sluice` program; each returns the exit status. */
#ifndef SL_CLI_H
#define SL_CLI_H

int sl_cli_simulate(int argc, char **argv);

#endif
