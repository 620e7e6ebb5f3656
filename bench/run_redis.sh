#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_redis.sh BUILD_DIR -- the Redis backend: decisions/s of sluice's client (one
# connection, the way one server worker drives it) against, on the same redis-server and
# with the same script and arguments, redis-benchmark sending EVALSHA on one connection
# at the same pipeline depth (the ceiling), and a naive client sending one EVAL with the
# script body per request (32 connections, no pipelining); then rejected traffic on an
# over-limit key (EVALSHA per decision: ~0). The same redis-server also listens with TLS
# (certificates made here with openssl): the client over TLS against the client over
# plain TCP, same depths, back to back, as a ratio.
# Depths 32, 64 and 128 in flight; each pair runs back to back, REPS times (medians), so
# both sides see the same machine. Both are closed loops: a batch returns before the
# next one leaves, so the client's own CPU per batch shows up as Redis idle time.
# Env: REDIS_BENCH_SECONDS (default 3), REDIS_BENCH_REPS (default 3), REDIS_BENCH_DEPTHS.
# Needs BUILD_DIR/libsluice_srv.a and libsluice.a.
set -euo pipefail
build=$(cd "${1:?usage: bench/run_redis.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
secs=${REDIS_BENCH_SECONDS:-3}
reps=${REDIS_BENCH_REPS:-3}
depths=${REDIS_BENCH_DEPTHS:-"32 64 128"}
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
[ -f "$build/libsluice_srv.a" ] || { echo "run_redis.sh: $build/libsluice_srv.a not found"; exit 1; }
cc=${CC:-gcc}
"$cc" -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -I "$root/include" -I "$root/src" -I "$root/src/core" \
  -I "$root/src/algo" -o "$work/redis_bench" "$here/redis_bench.c" "$build/libsluice_srv.a" \
  "$build/libsluice.a" $(pkg-config --libs hiredis openssl) $(pkg-config --libs libnghttp2 libprotobuf-c 2>/dev/null) \
  -lyaml -ljansson -lpthread -lm
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(cd "$work" && set -e
 k() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
 k ca.key; openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj /CN=bench-ca 2>/dev/null
 k server.key; openssl req -new -key server.key -out server.csr -subj /CN=localhost 2>/dev/null
 printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
 openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 \
   -extfile server.ext 2>/dev/null)
(cd "$work" && exec redis-server --port "$port" --tls-port "$tport" --tls-cert-file server.crt \
   --tls-key-file server.key --tls-ca-cert-file ca.crt --tls-auth-clients no --bind 127.0.0.1 --save '' \
   --appendonly no >/dev/null) &
pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), $reps reps of ${secs}s per case"
# the composed script, exactly as the client sends it (src/store/redis/codec.c composes it)
"$work/redis_bench" script >"$work/script.lua"
body=$(cat "$work/script.lua")
sha=$(redis-cli -p "$port" -x script load <"$work/script.lua")
# one GCRA item with a huge limit (always admitted), server time, the client's arguments
# (src/store/redis/redis.h: 1 key; head: op, time mode, mono s/ns, wall s/ns, slack ms, flags;
# the item: algorithm (5 = gcra), cost, group, flags, p1..p4 (T = 1 ns, B = 1e9), x = "")
args=(1 "sl:{bench__rand_int__}:0.5" d r 0 0 0 0 1000 0 5 1 0 0 1 1000000000 0 0 "")
rb_rate() { tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
n=$(python3 -c "print(int(60000*$secs/3))")
best_ours=0 best_rb=0
for d in $depths; do
  ours="" rbs="" cpus=""
  for _ in $(seq "$reps"); do
    line=$("$work/redis_bench" "$port" "$secs" "$d" admit)
    ours="$ours $(echo "$line" | grep -o '[0-9]* decisions/s' | cut -d' ' -f1)"
    cpus="$cpus $(echo "$line" | grep -o '[0-9.]* us client CPU' | cut -d' ' -f1)"
    rbs="$rbs $(redis-benchmark -p "$port" -c 1 -P "$d" -n "$((n * d / 32))" -r 10000 -q EVALSHA "$sha" "${args[@]}" | rb_rate)"
  done
  mo=$(echo "$ours" | median) mr=$(echo "$rbs" | median) mc=$(echo "$cpus" | median)
  python3 -c "o=float('$mo'); r=float('$mr'); print(f'depth {$d:>3}: sluice {o:8.0f} decisions/s ({float(\"$mc\"):.2f} us client CPU each)   redis-benchmark EVALSHA {r:8.0f} req/s   ratio {o/r:.2f}x   (runs: sluice$ours; redis-benchmark$rbs)')"
  best_ours=$(python3 -c "print(max(float('$best_ours'), float('$mo')))")
  best_rb=$(python3 -c "print(max(float('$best_rb'), float('$mr')))")
done
# TLS: the same client, the same server and depths, over TLS (verification on)
tls_url="rediss://127.0.0.1:$tport?tls_ca_file=$work/ca.crt"
for d in $depths; do
  plain="" tls="" pcpu="" tcpu=""
  for _ in $(seq "$reps"); do
    line=$("$work/redis_bench" "$port" "$secs" "$d" admit)
    plain="$plain $(echo "$line" | grep -o '[0-9]* decisions/s' | cut -d' ' -f1)"
    pcpu="$pcpu $(echo "$line" | grep -o '[0-9.]* us client CPU' | cut -d' ' -f1)"
    line=$("$work/redis_bench" "$tls_url" "$secs" "$d" admit)
    tls="$tls $(echo "$line" | grep -o '[0-9]* decisions/s' | cut -d' ' -f1)"
    tcpu="$tcpu $(echo "$line" | grep -o '[0-9.]* us client CPU' | cut -d' ' -f1)"
  done
  mp=$(echo "$plain" | median) mt=$(echo "$tls" | median) cp=$(echo "$pcpu" | median) ct=$(echo "$tcpu" | median)
  python3 -c "p=float('$mp'); t=float('$mt'); cp=float('$cp'); ct=float('$ct'); print(f'depth {$d:>3}: sluice over TLS {t:8.0f} decisions/s ({ct:.2f} us client CPU each), plain TCP {p:8.0f} ({cp:.2f} us)   TLS/plain {t/p:.2f}x   (runs: TLS$tls; plain$plain)')"
done
naive=$(redis-benchmark -p "$port" -c 32 -P 1 -n "$((n / 2))" -r 10000 -q EVAL "$body" "${args[@]}" | rb_rate)
echo "naive: one EVAL with the script body per request (32 conns, no pipelining): $naive req/s"
python3 -c "o=float('$best_ours'); c=float('$best_rb'); v=float('$naive'); print(f'best of each: sluice {o:.0f} / redis-benchmark {c:.0f} = {o/c:.2f}x the EVALSHA ceiling; sluice / naive EVAL = {o/v:.2f}x')"
# ---- the server end to end: `sluice serve` (1 worker) on the same Redis, redis-benchmark
# sending SL.CHECK to it (50 connections, pipeline 32, 100k keys): decisions/s, and the
# EVALSHA calls Redis counted per decision. Three processes share the 2 cores here.
sbin="$build/sluice"
if [ -x "$sbin" ]; then
  fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
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
    limits: [{ rate: 1000000000/s }]
CONF
  "$sbin" serve -c "$work/sluice.yaml" >"$work/sluice.log" 2>&1 &
  spid=$!
  for _ in $(seq 100); do redis-cli -p "$sresp" ping >/dev/null 2>&1 && break; sleep 0.05; done
  sn=$(python3 -c "print(int(150000*$secs/3))")
  redis-benchmark -p "$sresp" -c 50 -P 32 -n 20000 -r 100000 -q SL.CHECK bench k:__rand_int__ >/dev/null  # warm-up
  redis-cli -p "$port" config resetstat >/dev/null
  srate=$(redis-benchmark -p "$sresp" -c 50 -P 32 -n "$sn" -r 100000 -q SL.CHECK bench k:__rand_int__ | rb_rate)
  # decision calls: FCALL (the function library, Redis 7) plus EVALSHA (the fallback)
  calls=$(redis-cli -p "$port" info commandstats | tr -d '\r' | grep -E '^cmdstat_(evalsha|fcall):' |
          sed 's/^cmdstat_[a-z]*:calls=\([0-9]*\),.*/\1/' | awk '{s += $1} END {print s + 0}')
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  python3 -c "r=float('$srate'); c=float('${calls:-0}'); n=float('$sn'); b=float('$best_rb'); print(f'server: sluice serve SL.CHECK on the Redis store: {r:.0f} decisions/s ({r/b:.2f}x the EVALSHA ceiling, 3 processes on the cores), {c/n:.3f} script calls (FCALL + EVALSHA) per decision')"
fi
redis-cli -p "$port" config resetstat >/dev/null
"$work/redis_bench" "$port" 1 32 reject
echo "redis commands seen during the reject run: $(redis-cli -p "$port" info commandstats | grep -c evalsha || true) evalsha lines; $(redis-cli -p "$port" info stats | grep total_commands_processed | tr -d '\r')"
