#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh BUILD_DIR -- `make bench`: every benchmark, each printing sluice beside the peers
# measured in the same run (the machine's cores are shared, so only same-run ratios
# mean anything). Output is also kept in bench/run/results-<timestamp>.txt.
#   BENCH_ONLY="lib server"   run a subset
#   BEFORE_BIN=path/sluice    an older binary measured in the same run (server, protocol)
set -uo pipefail
build=${1:?usage: bench/run.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/run"
out="$here/run/results-$(date -u +%Y%m%dT%H%M%SZ).txt"
only=${BENCH_ONLY:-"lib server protocol grpc redis redis_cost tail replay observe capacity overrides series"}
{
  echo "# sluice $(git -C "$here/.." describe --always --dirty 2>/dev/null) on $(nproc) cores," \
       "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(date -u)"
  status=0
  for part in $only; do
    script="$here/run_$part.sh"
    if [ ! -x "$script" ]; then
      echo "== $part: $script is missing"; status=1; continue
    fi
    echo "== $part"
    "$script" "$build" || status=1
  done
  exit $status
} 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
echo "(kept in $out)"
exit "$rc"
