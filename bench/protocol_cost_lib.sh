# SPDX-License-Identifier: Apache-2.0
# protocol_cost_lib.sh -- sourced by bench/run_protocol_cost.sh and
# tests/perf/check_protocol_cost.sh: count BIN KIND N runs `sluice serve` under callgrind
# (1 worker, memory store) on ports BASE..BASE+3 of 127.0.0.1, sends it N requests of KIND
# (auth, check, resp, compact, grpc) and prints the instructions of the whole run; per
# BIN KIND prints (count(2N) - count(N)) / N, start-up and shutdown cancelled out.
# The caller sets `work` (a scratch folder), may set N (default 2000) and BASE (default
# 18960), and kills $spid on exit. A load that failed leaves $work/load_failed.
N=${N:-2000}
BASE=${BASE_PORT:-18960}
H=127.0.0.1
spid=
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
  grep -q "$n succeeded\|$n requests completed\|requests per second" "$work/load.log" || { echo "protocol cost: $kind: load failed: $(tail -2 "$work/load.log")" >&2; touch "$work/load_failed"; }
  kill -TERM $spid; wait $spid 2>/dev/null; spid=
  awk '/^summary:|^totals:/ {print $2; exit}' "$out"
}

per() { # BIN KIND
  local a b
  a=$(count "$1" "$2" "$N"); b=$(count "$1" "$2" $((2 * N)))
  [ -n "$a" ] && [ -n "$b" ] && echo $(( (b - a) / N )) || echo "?"
}
