#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_observe.sh BUILD_DIR -- what observability costs a decision, end to end: `sluice serve`
# (1 worker, memory store) answering RESP SL.CHECK over 100 000 keys, with hot-key tracking
# on (observe.hot_keys: 64 counters) and off, per-policy counting always on:
#   1. instructions per decision under callgrind (deterministic; the shared cores do not
#      matter): Ir of a run of N2 decisions minus a run of N1, over N2 - N1, so start-up
#      and shutdown cancel out;
#   2. redis-benchmark -P 32 -c 50 throughput and the server's CPU time per decision
#      (noisy on shared cores: compare the two rows of one run only).
# Also the decision log on (rejections only, every rejection eligible) under rejections.
# Env: N1 (20000), N2 (60000), KEYSPACES ("100000 10": nearly every key new for the sketch, the
# worst case; a few keys, all tracked), SECS (4), BASE_PORT (18760).
set -uo pipefail
build=${1:?usage: bench/run_observe.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
bin="$(cd "$build" && pwd)/sluice"
N1=${N1:-20000}
KEYSPACES=${KEYSPACES:-"100000 10"}
N2=${N2:-60000}
SECS=${SECS:-4}
BASE=${BASE_PORT:-18760}
H=127.0.0.1
run="$here/run/observe"
mkdir -p "$run"
pids=()
stop() {
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
cleanup() { local p; for p in "${pids[@]}"; do stop "$p"; done; }
trap cleanup EXIT
port_open() { (exec 3<>"/dev/tcp/$H/$1") 2>/dev/null; }
await_port() { for _ in $(seq 600); do port_open "$1" && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
hz=$(getconf CLK_TCK)
[ -x "$bin" ] || { echo "run_observe: $bin not built" >&2; exit 1; }
command -v redis-benchmark >/dev/null || { echo "run_observe: redis-benchmark missing (redis-tools)" >&2; exit 1; }

conf() {  # conf NAME HOTKEYS DECISIONS
  cat > "$run/$1.yaml" <<CONF
workers: 1
store: { type: memory, max_keys: 2000000 }
log: { file: $1.log, decisions: { enabled: $3 } }
observe: { hot_keys: $2 }
policies:
  - name: bench
    objective: protection
    key: []
    algorithm: token_bucket
    limits: [ { rate: 100000000/s, burst: 1000000000 } ]
  - name: perkey
    objective: fairness
    match: { path: /never }
    key: [header.x-api-key]
    algorithm: token_bucket
    limits: [ { rate: 1000000/s, burst: 1000000 } ]
  - name: tiny
    objective: protection
    key: []
    algorithm: fixed_window
    limits: [ { rate: 1/h } ]
CONF
}
conf on "{ counters: 64, interval: 10s, top: 5 }" false
conf off off false
conf declog off true

# The decision that is measured: SL.CHECK on "bench" with 100k distinct keys (one policy,
# one window; named keys, so the key namespace is the explicit form's).
serve() {  # serve NAME PORT [wrapper...]: starts, prints the pid
  local name=$1 port=$2; shift 2
  (cd "$run" && exec "$@" "$bin" serve -c "$run/$name.yaml" --resp $H:$port --http off --grpc off \
     --admin off --workers 1 >/dev/null 2> "$run/$name.err") &
  echo $!
}

if command -v valgrind >/dev/null; then
  for ks in $KEYSPACES; do
    echo "== instructions per SL.CHECK under callgrind (1 worker, $ks keys, N2=$N2 minus N1=$N1 decisions)"
    declare -A IR
    for mode in off on; do
      for n in $N1 $N2; do
        out="$run/cg.$mode.$ks.$n"
        rm -f "$out"
        pid=$(serve $mode $BASE valgrind --tool=callgrind --callgrind-out-file="$out")
        pids+=("$pid")
        await_port $BASE || exit 1
        redis-benchmark -h $H -p $BASE -c 1 -P 32 -r "$ks" -n "$n" -q SL.CHECK bench 'k:__rand_int__' >/dev/null 2>&1
        stop "$pid"
        IR[$mode.$n]=$(awk '/^summary:|^totals:/ {print $2; exit}' "$out")
      done
      per=$(awk -v a="${IR[$mode.$N1]}" -v b="${IR[$mode.$N2]}" -v n1=$N1 -v n2=$N2 \
            'BEGIN{printf "%.0f", (b - a) / (n2 - n1)}')
      IR[$mode]=$per
      printf "RESULT | %6s keys, hot keys %-3s | %6s instructions per decision (parse, decide, count, reply)\n" \
        "$ks" "$mode" "$per"
    done
    echo "RESULT | $ks keys: hot-key tracking adds $((IR[on] - IR[off])) instructions per decision" \
         "($(awk -v a="${IR[on]}" -v b="${IR[off]}" 'BEGIN{printf "%.1f", 100 * (a - b) / b}') %)"
  done
else
  echo "== callgrind skipped: valgrind is not installed"
fi

echo "== redis-benchmark -c 50 -P 32 -r 100000, ${SECS}s-ish per case (noisy: shared cores)"
rb_case() {  # rb_case LABEL PID PORT CMD...
  local label=$1 pid=$2 port=$3; shift 3
  local n=$((300000 * SECS)) t0 t1 w0 w1 line rps us
  t0=$(ticks "$pid"); w0=$(date +%s.%N)
  line=$(redis-benchmark -h $H -p "$port" -c 50 -P 32 -r 100000 -n "$n" --csv "$@" 2>/dev/null | tail -1)
  t1=$(ticks "$pid"); w1=$(date +%s.%N)
  rps=$(echo "$line" | cut -d, -f2 | tr -d '"')
  us=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$n" 'BEGIN{printf "%.3f", 1e6 * t / hz / n}')
  printf "RESULT | %-44s | %12s ops/s | server CPU %s us/decision\n" "$label" "$rps" "$us"
}
port=$((BASE + 1))
for mode in off on; do
  pid=$(serve $mode $port); pids+=("$pid"); await_port $port || exit 1
  rb_case "SL.CHECK, hot keys $mode" "$pid" $port SL.CHECK bench 'k:__rand_int__'
  stop "$pid"; port=$((port + 1))
done
rm -f "$run/declog.log"
pid=$(serve declog $port); pids+=("$pid"); await_port $port || exit 1
redis-benchmark -h $H -p $port -n 1 -q SL.CHECK tiny x >/dev/null 2>&1
rb_case "SL.CHECK rejected, decision log on" "$pid" $port SL.CHECK tiny 'k:__rand_int__'
stop "$pid"
echo "   decision lines written: $(grep -c '"decision"\|info decision' "$run/declog.log" 2>/dev/null || echo 0)" \
     "(rate limit 100/s, burst 100; the rest counted in sluice_log_dropped_total)"
