#!/usr/bin/env bash
# run_redis.sh BUILD_DIR -- the Redis backend: decisions/s of sluice's client (one
# connection, 32 decisions in flight, as one worker) against, on the same redis-server,
# redis-benchmark sending the same EVALSHA (1 connection, pipeline 32: the ceiling) and a
# naive client sending one EVAL with the script body per request (32 connections, no
# pipelining); then rejected traffic on an over-limit key (EVALSHA per decision, ~0).
# Needs BUILD_DIR/libsluice_srv.a and libsluice.a. REDIS_BENCH_SECONDS (default 3).
set -euo pipefail
build=$(cd "${1:?usage: bench/run_redis.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
secs=${REDIS_BENCH_SECONDS:-3}
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
[ -f "$build/libsluice_srv.a" ] || { echo "run_redis.sh: $build/libsluice_srv.a not found"; exit 1; }
cc=${CC:-gcc}
"$cc" -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -I "$root/include" -I "$root/src" -I "$root/src/core" \
  -I "$root/src/algo" -o "$work/redis_bench" "$here/redis_bench.c" "$build/libsluice_srv.a" \
  "$build/libsluice.a" $(pkg-config --libs hiredis) $(pkg-config --libs libnghttp2 libprotobuf-c 2>/dev/null) \
  -lyaml -ljansson -lpthread -lm
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(cd "$work" && exec redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null) &
pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
# the composed script, as the client sends it (common + algorithms + main)
lua="$root/src/redis/lua"
for f in common gcra token_bucket fixed_window sliding_window concurrency quota leaky_bucket sliding_log main; do
  cat "$lua/$f.lua"; echo
done >"$work/script.lua"
body=$(cat "$work/script.lua")
sha=$(redis-cli -p "$port" -x script load <"$work/script.lua")
n=$(python3 -c "print(int(200000*$secs/3))")
# one GCRA item with a huge limit (always admitted), server time, the client's exact arguments
args=(1 "sl:{bench__rand_int__}:0.5" d r 0 0 0 0 1000 5 1 1 1000000000 0 0)
"$work/redis_bench" "$port" "$secs" 32 admit | tee "$work/ours.txt"
ceiling=$(redis-benchmark -p "$port" -c 1 -P 32 -n "$n" -r 10000 -q EVALSHA "$sha" "${args[@]}" | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
naive=$(redis-benchmark -p "$port" -c 32 -P 1 -n "$((n / 4))" -r 10000 -q EVAL "$body" "${args[@]}" | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
ours=$(grep -o '[0-9]* decisions/s' "$work/ours.txt" | cut -d' ' -f1)
echo "redis-benchmark EVALSHA (1 conn, pipeline 32, the ceiling): $ceiling req/s"
echo "naive: one EVAL with the script body per request (32 conns):  $naive req/s"
python3 -c "c=float('$ceiling'); v=float('$naive'); o=float('$ours'); print(f'sluice / ceiling = {o/c:.2f}x, sluice / naive EVAL = {o/v:.2f}x')"
redis-cli -p "$port" config resetstat >/dev/null
"$work/redis_bench" "$port" 1 32 reject
echo "redis commands seen during the reject run: $(redis-cli -p "$port" info commandstats | grep -c evalsha || true) evalsha lines; $(redis-cli -p "$port" info stats | grep total_commands_processed | tr -d '\r')"
