#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check_decision_cost.sh BIN BUDGET COMPILER [--update] -- the instruction-count guard of
# `make test` (issue 28): callgrind counts the instructions of bench/decision_cost.c's fixed
# workloads (BIN, built by CMake from the same sources as the server), per decision, and
# the test fails when a case costs more than its budget in BUDGET by more than the margin.
# Counts, unlike times on shared cores, repeat to a fraction of a per cent: the margin
# (DECISION_COST_MARGIN per cent, default 5) absorbs libc and valgrind differences, not
# noise. The figure is (count of 2N decisions - count of N) / N, so setup cancels out.
# Budgets are per compiler (COMPILER: gcc-12, clang-14, ...) for the RelWithDebInfo build;
# --update rewrites this compiler's lines from the counts just measured (a change that
# makes the decision path dearer on purpose says so in its commit, with the new figure).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: check_decision_cost.sh BIN BUDGET COMPILER [--update]" >&2; exit 2; }
bin=$1 budget=$2 cc=$3 update=${4:-}
n=${DECISION_COST_N:-5000}
margin=${DECISION_COST_MARGIN:-5}
command -v valgrind >/dev/null || { echo "valgrind not found: scripts/deps.sh --for test installs it" >&2; exit 1; }
count() {
  local out
  out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1) || { echo "$out" >&2; return 1; }
  echo "$out" | awk '/Collected/ {print $4}'
}
fail=0 measured=""
. "$(dirname "$0")/budget_lib.sh"
printf '%-14s %12s %12s %8s\n' case budget measured change
for c in "engine one" "engine three" "engine conc" "lib 1" "lib 2"; do
  set -- $c
  c1=$(count "$bin" "$1" "$2" "$n")
  c2=$(count "$bin" "$1" "$2" $((2 * n)))
  budget_case "$1" "$2" $(( (c2 - c1) / n ))
done
budget_end "$0" "$bin" "$budget" "$cc"
