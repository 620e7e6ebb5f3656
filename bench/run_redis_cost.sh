#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_redis_cost.sh BUILD_DIR -- what one decision costs Redis itself (INFO commandstats
# usec_per_call: the time Redis spends inside the command, nested calls included), beside
# the shared peers' token-bucket script (bench/peers: /work/shared/peers/tb.lua, 2 keys, as
# written) and INCR, all on one redis-server in the same run:
#   - sluice's decision as a Redis 7 function (FCALL, what the client sends when FUNCTION
#     LOAD works) and as the EVALSHA fallback (the same code as one script: Redis 6, or
#     FUNCTION renamed away), per algorithm with one window, and per window count (1-4
#     token-bucket windows of one key);
#   - the over-limit cache: `sluice serve` on this Redis, one key over its limit, SL.CHECK
#     hammered: how many FCALL/EVALSHA Redis counted per rejected decision (~0).
# Each case runs -c 50 -P 32 over 100k random keys (admitted: the write path), after a
# CONFIG RESETSTAT; ROUNDS interleaved rounds (every case once per round, in turn), and
# each sluice figure is quoted as a ratio to tb.lua measured in the same round
# (min/median/max over rounds). The machine's cores are shared: only ratios mean anything.
# Env: REDIS_COST_ROUNDS (3), REDIS_COST_N (requests per case, 100000), REDIS_COST_SERVER
# (1: the over-limit cache part; needs BUILD_DIR/sluice).
set -euo pipefail
build=$(cd "${1:?usage: bench/run_redis_cost.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
rounds=${REDIS_COST_ROUNDS:-3}
n=${REDIS_COST_N:-100000}
peers=${PEERS_DIR:-/work/shared/peers}
[ -f "$peers/tb.lua" ] || peers="$here/peers"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cc=${CC:-gcc}
# (the policy library is its own archive in some trees, inside the server's in others)
libs=""
for a in libsluice_srv.a libsluice_policy.a libsluice.a; do [ -f "$build/$a" ] && libs="$libs $build/$a"; done
"$cc" -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -I "$root/include" -I "$root/src" -I "$root/src/core" \
  -I "$root/src/algo" -o "$work/redis_bench" "$here/redis_bench.c" $libs $(pkg-config --libs hiredis openssl) $(pkg-config --libs libnghttp2 libprotobuf-c 2>/dev/null) \
  -lyaml -ljansson -lpthread -lm
port=$(fp)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >/dev/null &
pids+=($!)
R="redis-cli -p $port"
for _ in $(seq 100); do $R ping >/dev/null 2>&1 && break; sleep 0.05; done
echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), $rounds interleaved rounds of $n requests per case (-c 50 -P 32 -r 100000)"
"$work/redis_bench" script >"$work/script.lua"
"$work/redis_bench" library >"$work/lib.txt"
fname=$(head -1 "$work/lib.txt")
tail -n +2 "$work/lib.txt" >"$work/lib.lua"
sha=$($R -x script load <"$work/script.lua")
$R -x function load replace <"$work/lib.lua" >/dev/null
tbsha=$($R -x script load <"$peers/tb.lua")
echo "script: $(wc -c <"$work/script.lua") bytes (EVALSHA $sha); library $fname: $(wc -c <"$work/lib.lua") bytes"

# one item's arguments: algorithm, cost, group, flags, p1..p4, x; head: op d, time r(edis),
# 4 unused clock numbers, slack 1000 ms, flags 0 (src/store/redis/redis.h)
item() {
  case $1 in
  fixed_window) echo "1 1 0 0 1000000000000 1000000000 0 0 ''" ;;
  sliding_window) echo "2 1 0 0 1000000000000 1000000000 0 0 ''" ;;
  sliding_log) echo "3 1 0 0 16 1000000000 0 0 ''" ;;
  token_bucket) echo "4 1 0 0 1000000000 1000000000 1000000000 0 ''" ;;
  gcra) echo "5 1 0 0 1 1000000000 0 0 ''" ;;
  leaky_bucket) echo "6 1 0 0 1000000000 1000000000 1000000000 0 ''" ;;
  concurrency) echo "7 1 0 0 1000000000 60000000000 12000000000 0 ''" ;;
  quota) echo "8 1 0 0 1000000000000 0 4000000000 0 ''" ;;
  esac
}
algo_id() { item "$1" | cut -d' ' -f1; }
# args for W windows of one algorithm and one key (keys sl:{tag}:i.algo, one tag)
sl_args() { # algo windows
  local a=$1 w=$2 id keys="" items=""
  id=$(algo_id "$a")
  for i in $(seq 0 $((w - 1))); do keys="$keys sl:{b__rand_int__}:$i.$id"; items="$items $(item "$a")"; done
  echo "$w$keys d r 0 0 0 0 1000 0$items"
}
# cmdstat line -> usec_per_call of one command
upc() { $R info commandstats | tr -d '\r' | grep "^cmdstat_$1:" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/' || true; }
calls() { $R info commandstats | tr -d '\r' | grep "^cmdstat_$1:" | sed 's/.*calls=\([0-9]*\),.*/\1/' || true; }
# Redis's main-thread CPU (s): unlike usec_per_call (wall time around the command), time
# the process spends preempted by the machine's other work is not in it; it includes the
# command's parsing and reply, the same for every case
cpu() { $R info cpu | tr -d '\r' | awk -F: '/used_cpu_(sys|user)_main_thread/ {s+=$2} END {printf "%.6f", s}'; }
run_case() { # label cmdstat-name redis-benchmark-args...
  local label=$1 cs=$2 c0 c1; shift 2
  $R flushall >/dev/null
  $R config resetstat >/dev/null
  c0=$(cpu)
  eval "redis-benchmark -p $port -c 50 -P 32 -r 100000 -n $n -q $*" >/dev/null
  c1=$(cpu)
  echo "$label $(upc "$cs") $(python3 -c "print(($c1 - $c0) * 1e6 / $n)")" >>"$work/round.$r"
}
cases=()
algos="fixed_window sliding_window sliding_log token_bucket gcra leaky_bucket concurrency quota"
for r in $(seq "$rounds"); do
  : >"$work/round.$r"
  run_case tb.lua evalsha EVALSHA "$tbsha" 2 'rl:__rand_int__:t' 'rl:__rand_int__:ts' 100 1000000000 1700000000
  run_case INCR incr INCR 'fw:__rand_int__'
  for a in $algos; do
    run_case "fcall:$a:1" fcall FCALL "$fname" $(sl_args "$a" 1)
    run_case "evalsha:$a:1" evalsha EVALSHA "$sha" $(sl_args "$a" 1)
  done
  for w in 2 3 4; do
    run_case "fcall:token_bucket:$w" fcall FCALL "$fname" $(sl_args token_bucket "$w")
    run_case "evalsha:token_bucket:$w" evalsha EVALSHA "$sha" $(sl_args token_bucket "$w")
  done
done
# every round's figures -> min/median/max of the us and of the ratio to that round's tb.lua
python3 - "$work" "$rounds" <<'PY'
import sys, statistics as st
work, rounds = sys.argv[1], int(sys.argv[2])
data, cpu = [], []
for r in range(1, rounds + 1):
    d, c = {}, {}
    for line in open(f"{work}/round.{r}"):
        k, v, u = line.split()
        d[k] = float(v)
        c[k] = float(u)
    data.append(d)
    cpu.append(c)
def mmm(xs): return f"{min(xs):6.2f} {st.median(xs):6.2f} {max(xs):6.2f}"
print("usec_per_call inside Redis (commandstats) and Redis main-thread CPU per call, min median max over")
print("rounds; ratios = case / tb.lua of the same round")
print(f"  {'case':26} {'us/call':>20}   {'x tb.lua':>20}   {'CPU us/call':>20}   {'CPU x tb.lua':>20}")
for k in data[0]:
    us = [d[k] for d in data]
    rat = [d[k] / d["tb.lua"] for d in data]
    cu = [c[k] for c in cpu]
    cr = [c[k] / c["tb.lua"] for c in cpu]
    print(f"  {k:26} {mmm(us):>20}   {mmm(rat):>20}   {mmm(cu):>20}   {mmm(cr):>20}")
print("per extra window (token bucket, FCALL), in tb.lua's cost: (us(w) - us(1)) / (w - 1) / tb.lua")
for w in (2, 3, 4):
    x = [(d[f"fcall:token_bucket:{w}"] - d["fcall:token_bucket:1"]) / (w - 1) / d["tb.lua"] for d in data]
    print(f"  {w} windows: {mmm(x)}")
worst = max(st.median([d[f"fcall:{a}:1"] / d["tb.lua"] for d in data]) for a in
            "fixed_window sliding_window token_bucket gcra leaky_bucket concurrency quota".split())
print(f"target: one window (FCALL) <= 1.2x tb.lua: worst median over the algorithms but the sliding log {worst:.2f}x (commandstats)")
worst = max(st.median([c[f"fcall:{a}:1"] / c["tb.lua"] for c in cpu]) for a in
            "fixed_window sliding_window token_bucket gcra leaky_bucket concurrency quota".split())
print(f"                                  ... {worst:.2f}x (Redis CPU per call)")
for w in (2, 3, 4):
    x = [(c[f"fcall:token_bucket:{w}"] - c["fcall:token_bucket:1"]) / (w - 1) / c["tb.lua"] for c in cpu]
    print(f"  per extra window, CPU, {w} windows: {mmm(x)} x tb.lua")
PY
# ---- the over-limit cache: rejected decisions that never reach Redis ---------------------
if [ "${REDIS_COST_SERVER:-1}" = 1 ] && [ -x "$build/sluice" ]; then
  sresp=$(fp) shttp=$(fp) sadmin=$(fp)
  cat >"$work/sluice.yaml" <<CONF
workers: 1
listen: { http: 127.0.0.1:$shttp, resp: 127.0.0.1:$sresp, grpc: off, admin: 127.0.0.1:$sadmin }
store: { type: redis, addr: 127.0.0.1:$port, key_secret: bench }
policies:
  - name: bench
    objective: protection
    key: []
    algorithm: gcra
    limits: [{ rate: 10/minute }]
CONF
  "$build/sluice" serve -c "$work/sluice.yaml" >"$work/sluice.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$sresp" ping >/dev/null 2>&1 && break; sleep 0.05; done
  $R flushall >/dev/null
  redis-benchmark -p "$sresp" -c 1 -n 20 -q SL.CHECK bench hot >/dev/null # the key goes over its limit
  $R config resetstat >/dev/null
  rn=200000
  rate=$(redis-benchmark -p "$sresp" -c 50 -P 32 -n $rn -q SL.CHECK bench hot | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 || true)
  f=$(calls fcall); e=$(calls evalsha)
  echo "over-limit cache: $rn rejected SL.CHECK of one key over its limit ($rate): Redis counted FCALL ${f:-0}, EVALSHA ${e:-0} (the cache trusts a refusal for min(retry-after, 1 s); then one call refreshes it)"
fi
