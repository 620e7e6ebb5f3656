#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_protocol_cost.sh BEFORE_BIN AFTER_BIN -- the server's instructions per request on
# each protocol path, counted by callgrind (valgrind) so that, unlike times on shared
# cores, the counts repeat: `sluice serve` runs under callgrind (1 worker, memory store),
# gets N then 2N requests of one kind in two runs, and the figure is
# (count(2N) - count(N)) / N (start-up and shutdown cancel out). User-space only: the
# kernel's share of a request (syscalls, TCP) is not in it.
# Paths: /v1/auth (h2load --h1, keep-alive), /v1/check (JSON body), SL.CHECK at -P 32
# (redis-benchmark), SL.CHECK ... COMPACT (AFTER only when BEFORE does not know it), gRPC
# ShouldRateLimit (h2load over h2c, one descriptor, one stream at a time).
# Env: N (default 2000), BASE_PORT (default 18960).
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: bench/run_protocol_cost.sh BEFORE_BIN AFTER_BIN" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
N=${N:-2000}
BASE=${BASE_PORT:-18960}
H=127.0.0.1
work=$(mktemp -d)
spid=
trap '[ -n "$spid" ] && kill -TERM $spid 2>/dev/null; rm -rf "$work"' EXIT
cat > "$work/sluice.yaml" <<CONF
workers: 1
store: { type: memory, max_keys: 200000 }
policies:
  - name: bench
    key: [header.x-api-key]
    on_missing_key: { use: [client_ip] }
    algorithm: token_bucket
    limits:
      - { rate: 100000/s, burst: 1000000 }
  - name: g
    match: { domain: bench }
    key: [descriptor.k]
    algorithm: token_bucket
    limits:
      - { rate: 100000/s, burst: 1000000 }
CONF
# RateLimitRequest{domain "bench", descriptors [{entries [{k, v}]}]} in a gRPC frame
printf '\x00\x00\x00\x00\x11\x0a\x05bench\x12\x08\x0a\x06\x0a\x01k\x12\x01v' > "$work/rls.bin"
printf '{"policy":"bench","key":"user:1"}' > "$work/check.json"
port_open() { (exec 3<>"/dev/tcp/$H/$1") 2>/dev/null; }

# count BIN KIND N: instructions of a whole server run that answered N requests of KIND
count() {
  local bin=$1 kind=$2 n=$3 out="$work/cg.out"
  rm -f "$out"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve -c "$work/sluice.yaml" \
    --http $H:$BASE --resp $H:$((BASE + 1)) --admin $H:$((BASE + 2)) --grpc $H:$((BASE + 3)) --workers 1 \
    > "$work/srv.log" 2>&1 &
  spid=$!
  for _ in $(seq 300); do port_open $((BASE + 1)) && port_open $BASE && port_open $((BASE + 3)) && break; sleep 0.1; done
  case $kind in
    auth) h2load --h1 -n "$n" -c 1 -H 'X-Api-Key: user:1' "http://$H:$BASE/v1/auth" > "$work/load.log" 2>&1 ;;
    check) h2load --h1 -n "$n" -c 1 -d "$work/check.json" -H 'Content-Type: application/json' \
             "http://$H:$BASE/v1/check" > "$work/load.log" 2>&1 ;;
    resp) redis-benchmark -h $H -p $((BASE + 1)) -c 1 -P 32 -n "$n" SL.CHECK bench user:1 > "$work/load.log" 2>&1 ;;
    compact) redis-benchmark -h $H -p $((BASE + 1)) -c 1 -P 32 -n "$n" SL.CHECK bench user:1 COMPACT \
               > "$work/load.log" 2>&1 ;;
    grpc) h2load -n "$n" -c 1 -m 1 -d "$work/rls.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
            "http://$H:$((BASE + 3))/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" > "$work/load.log" 2>&1 ;;
  esac
  grep -q "$n succeeded\|$n requests completed\|requests per second" "$work/load.log" || echo "run_protocol_cost: $kind: load failed: $(tail -2 "$work/load.log")" >&2
  kill -TERM $spid; wait $spid 2>/dev/null; spid=
  awk '/^summary:|^totals:/ {print $2; exit}' "$out"
}

per() { # BIN KIND
  local a b
  a=$(count "$1" "$2" "$N"); b=$(count "$1" "$2" $((2 * N)))
  [ -n "$a" ] && [ -n "$b" ] && echo $(( (b - a) / N )) || echo "?"
}

printf '| path (server instructions per request, callgrind) | before | after | after/before |\n|---|---:|---:|---:|\n'
for kind in auth check resp compact grpc; do
  b=$(per "$1" $kind); a=$(per "$2" $kind)
  if [ "$kind" = compact ] && ! grep -q COMPACT <(strings "$1"); then b="-"; fi
  r=$(awk -v a="$a" -v b="$b" 'BEGIN{ if (b + 0 > 0 && a + 0 > 0) printf "%.2f", a / b; else print "-" }')
  printf '| %s | %s | %s | %s |\n' "$kind" "$b" "$a" "$r"
done
