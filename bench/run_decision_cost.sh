#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_decision_cost.sh BASE_SRC BASE_BUILD NEW_SRC NEW_BUILD -- instructions per decision of
# plain policies (bench/decision_cost.c) before and after a change, counted by callgrind
# (valgrind): unlike times on shared cores, counts repeat. Each build directory needs
# libsluice.a (which holds the engine since issue 25; older builds: and libsluice_policy.a;
# cmake --build DIR --target sluice_static,
# Release). The figure is (count of 2N decisions - count of N) / N: setup cancels out.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: bench/run_decision_cost.sh BASE_SRC BASE_BUILD NEW_SRC NEW_BUILD"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=${DECISION_COST_N:-20000}
build() { # SRC BUILD OUT
  gcc -O2 -std=c11 -D_GNU_SOURCE -I "$1/include" -I "$1/src" -I "$1/src/core" -I "$1/src/algo" \
    -o "$3" "$here/decision_cost.c" $( [ -f "$2/libsluice_policy.a" ] && echo "$2/libsluice_policy.a" ) \
    "$2/libsluice.a" -lyaml -lcrypto -lpthread -lm
}
build "$1" "$2" "$work/base"
build "$3" "$4" "$work/new"
count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 | awk '/Collected/ {print $4}'; }
printf '| case | before (instructions/decision) | after | change |\n|---|---:|---:|---:|\n'
for c in "engine one" "engine three" "engine conc" "lib 1" "lib 2"; do
  set -- $c
  b1=$(count "$work/base" "$1" "$2" "$n"); b2=$(count "$work/base" "$1" "$2" $((2 * n)))
  a1=$(count "$work/new" "$1" "$2" "$n"); a2=$(count "$work/new" "$1" "$2" $((2 * n)))
  b=$(( (b2 - b1) / n )); a=$(( (a2 - a1) / n ))
  printf '| %s %s | %d | %d | %+.1f %% |\n' "$1" "$2" "$b" "$a" "$(echo "($a - $b) * 100 / $b" | bc -l)"
done
