#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_capacity.sh BUILD_DIR [OUT_TXT] [SVG_DIR] -- the capacity simulations (adaptive
# concurrency, priority shedding, borrowing, penalties): builds tests/sim/capacity_sim.c
# against BUILD_DIR/libsluice.a, prints the figures (and writes them to OUT_TXT when given)
# and draws docs/img/capacity-*.svg (or SVG_DIR). Fake clock and fixed seed: the figures
# are the same on every machine; SLUICE_SEED varies the traffic.
set -euo pipefail
build=$(cd "${1:?usage: bench/run_capacity.sh BUILD_DIR [OUT_TXT] [SVG_DIR]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${2:-}
svg=${3:-$root/docs/img}
lib="$build/libsluice.a"
[ -f "$lib" ] || { echo "run_capacity.sh: $lib not found (build the library first)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$svg"
"${CC:-gcc}" -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I "$root/include" -I "$root/src" \
  -I "$root/src/core" -I "$root/src/algo" -o "$work/capacity_sim" "$root/tests/sim/capacity_sim.c" "$lib" \
  -lyaml -ljansson -lpthread -lm
run() {
  echo "# $(date +%F): bash bench/run_capacity.sh BUILD_DIR [OUT_TXT] [SVG_DIR] (svg: docs/img/capacity-*.svg)"
  "$work/capacity_sim" -o "$svg"
}
if [ -n "$out" ]; then run | tee "$out"; else run; fi
