#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_rejections.sh BUILD_DIR -- what the rejection summary (log.rejections) costs a refused
# decision: `sluice serve` (1 worker, memory store) refusing pipelined RESP SL.CHECK of one
# key under callgrind, with the summary on and off: Ir of N2 refusals minus N1, over N2 - N1
# (start-up and shutdown cancel out; deterministic on shared cores).
# Env: N1 (20000), N2 (60000), PORT (18790).
set -uo pipefail
build=${1:?usage: bench/run_rejections.sh BUILD_DIR}
bin="$(cd "$build" && pwd)/sluice"
N1=${N1:-20000}
N2=${N2:-60000}
PORT=${PORT:-18790}
command -v valgrind >/dev/null || { echo "run_rejections: valgrind missing" >&2; exit 1; }
command -v redis-benchmark >/dev/null || { echo "run_rejections: redis-benchmark missing (redis-tools)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ir_of() { # mode n -> total Ir
  cat > "$dir/c.yaml" <<Y
workers: 1
log: { rejections: $1 }
policies:
  - { name: tiny, objective: protection, key: [], algorithm: fixed_window, limits: [ { rate: 1/h } ] }
Y
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$bin" serve -c "$dir/c.yaml" --http - \
    --resp "127.0.0.1:$PORT" --admin - --grpc - --workers 1 >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
  redis-benchmark -p "$PORT" -c 4 -P 16 -n "$2" -q SL.CHECK tiny k >/dev/null 2>&1
  kill -TERM "$pid"
  wait "$pid"
  grep -E "^(summary|totals):" "$dir/cg.out" | head -1 | awk '{print $2}'
}
for mode in "{ every: 10s }" off; do
  a=$(ir_of "$mode" "$N1")
  b=$(ir_of "$mode" "$N2")
  echo "log.rejections: $mode -> $(( (b - a) / (N2 - N1) )) Ir per refused decision"
done
