#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_series.sh BUILD_DIR -- what the console's per-second ring (observe.series, /v1/series)
# costs a decision: `sluice serve` (1 worker, memory store) answering RESP SL.CHECK over
# 100 000 keys with the ring off (observe.series.seconds: 0: one pointer test remains) and
# on (the default, 900 s x 64 series), instructions per decision under callgrind: Ir of a
# run of N2 decisions minus a run of N1, over N2 - N1 (start-up and shutdown cancel out).
# Also, with the decision log on and every decision a rejection, what keeping the recent
# rejections adds. Env: N1 (20000), N2 (60000), BASE_PORT (18790).
set -uo pipefail
build=${1:?usage: bench/run_series.sh BUILD_DIR}
bin="$(cd "$build" && pwd)/sluice"
N1=${N1:-20000}
N2=${N2:-60000}
BASE=${BASE_PORT:-18790}
H=127.0.0.1
here=$(cd "$(dirname "$0")" && pwd)
run="$here/run/series"
mkdir -p "$run"
command -v valgrind >/dev/null || { echo "run_series: valgrind missing" >&2; exit 1; }
command -v redis-benchmark >/dev/null || { echo "run_series: redis-benchmark missing (redis-tools)" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/$H/$1") 2>/dev/null; }
await_port() { for _ in $(seq 600); do port_open "$1" && return 0; sleep 0.1; done; return 1; }
stop() {
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
conf() {  # conf NAME SECONDS DECISIONS
  cat > "$run/$1.yaml" <<CONF
workers: 1
store: { type: memory, max_keys: 2000000 }
log: { file: $1.log, decisions: { enabled: $3, max_per_s: 1 } }
observe: { hot_keys: off, series: { seconds: $2 } }
policies:
  - name: bench
    objective: protection
    key: []
    algorithm: token_bucket
    limits: [ { rate: 100000000/s, burst: 1000000000 } ]
  - name: tiny
    objective: protection
    key: []
    algorithm: fixed_window
    limits: [ { rate: 1/h } ]
CONF
}
conf off 0 false
conf on 900 false
conf rej_off 0 true
conf rej_on 900 true
measure() {  # measure MODE POLICY -> instructions per decision
  local mode=$1 pol=$2 n out pid a b
  for n in $N1 $N2; do
    out="$run/cg.$mode.$n"
    rm -f "$out"
    (cd "$run" && exec valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve -c "$run/$mode.yaml" \
       --resp $H:$BASE --http off --grpc off --admin off --workers 1 >/dev/null 2>"$run/$mode.err") &
    pid=$!
    await_port $BASE || { echo "server did not start" >&2; exit 1; }
    redis-benchmark -h $H -p $BASE -c 1 -P 32 -r 100000 -n "$n" -q SL.CHECK "$pol" 'k:__rand_int__' >/dev/null 2>&1
    stop "$pid"
    if [ "$n" = "$N1" ]; then a=$(awk '/^summary:|^totals:/ {print $2; exit}' "$out"); else b=$(awk '/^summary:|^totals:/ {print $2; exit}' "$out"); fi
  done
  awk -v a="$a" -v b="$b" -v n1=$N1 -v n2=$N2 'BEGIN{printf "%.0f", (b - a) / (n2 - n1)}'
}
off=$(measure off bench); on=$(measure on bench)
echo "RESULT | admitted, ring off | $off instructions per decision (parse, decide, count, reply)"
echo "RESULT | admitted, ring on  | $on instructions per decision: $((on - off)) more ($(awk -v a=$on -v b=$off 'BEGIN{printf "%.2f", 100*(a-b)/b}') %)"
roff=$(measure rej_off tiny); ron=$(measure rej_on tiny)
echo "RESULT | rejected, decision log on, ring off | $roff instructions per decision"
echo "RESULT | rejected, decision log on, ring on  | $ron: $((ron - roff)) more ($(awk -v a=$ron -v b=$roff 'BEGIN{printf "%.2f", 100*(a-b)/b}') %)"
