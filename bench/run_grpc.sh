#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_grpc.sh BUILD_DIR -- Envoy RLS (gRPC ShouldRateLimit) decisions/s and server CPU per
# decision with h2load (C connections x M concurrent streams, one 16-byte request repeated),
# beside nginx limit_req's CPU per request (wrk -t2 -c64, 100k keys) in the same run.
# CPU = utime+stime of the server process (all threads; nginx master + workers) from
# /proc/PID/stat over the load run, divided by the requests completed. The 2 cores are
# shared with the load generators: compare the ratio, not the absolute figures.
# Caveat: h2load sends one body, so every decision is on one descriptor (one hot key);
# nginx's keys cycle through 100k. Env: SECS (5), SLUICE_WORKERS (1), CONNS (4),
# STREAMS (100), BASE_PORT (18750).
set -uo pipefail
build=${1:?usage: bench/run_grpc.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
bin="$(cd "$build" && pwd)/sluice"
SECS=${SECS:-5}
SW=${SLUICE_WORKERS:-1}
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-100}
BASE=${BASE_PORT:-18750}
H=127.0.0.1
run="$here/run/grpc"
mkdir -p "$run/nginx/tmp" "$run/nginx/www"
pids=()
stop() {  # TERM, bounded wait, then KILL (only processes this script started)
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
cleanup() { local p; for p in "${pids[@]}"; do stop "$p"; done; }
trap cleanup EXIT
port_open() { (exec 3<>"/dev/tcp/$H/$1") 2>/dev/null; }
await_port() { for _ in $(seq 100); do port_open "$1" && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
ticks() {  # utime+stime of PID and its direct children, all threads
  local t=0 p v
  for p in "$1" $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) && t=$((t + v))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
[ -x "$bin" ] || { echo "run_grpc: $bin not built" >&2; exit 1; }
command -v h2load >/dev/null || { echo "run_grpc: h2load missing (apt-get install nghttp2-client)" >&2; exit 1; }
SL_HTTP=$BASE SL_RESP=$((BASE + 1)) SL_ADMIN=$((BASE + 2)) SL_GRPC=$((BASE + 3)) NG=$((BASE + 4))
for p in $SL_HTTP $SL_RESP $SL_ADMIN $SL_GRPC $NG; do
  port_open $p && { echo "run_grpc: port $p is in use (set BASE_PORT)" >&2; exit 1; }
done

# ---- sluice: an envoyproxy/ratelimit config, a limit no request reaches ----
cat > "$run/ratelimit.yaml" <<CONF
domain: bench
descriptors:
  - key: k
    rate_limit: { unit: second, requests_per_unit: 4000000000 }
CONF
(cd "$run" && exec "$bin" serve -c "$run/ratelimit.yaml" --http $H:$SL_HTTP --resp $H:$SL_RESP \
  --admin $H:$SL_ADMIN --grpc $H:$SL_GRPC --workers "$SW" 2> "$run/sluice.log") &
SPID=$!; pids+=($SPID)
# RateLimitRequest{domain:"bench", descriptors:[{entries:[{key:"k", value:"v"}]}]}: 17 bytes,
# behind the 5-byte gRPC prefix (flag 0, length 0x11)
printf '\x00\x00\x00\x00\x11\x0a\x05bench\x12\x08\x0a\x06\x0a\x01k\x12\x01v' > "$run/request.bin"

# ---- nginx limit_req (bench/peers/nginx_limit_req.conf.in) ----
printf ok > "$run/nginx/www/ok.txt"
sed -e "s|@RUN@|$run/nginx|g" -e "s|@HOST@|$H|g" -e "s|@PORT@|$NG|g" \
  "$here/peers/nginx_limit_req.conf.in" > "$run/nginx/nginx.conf"
nginx -p "$run/nginx" -c "$run/nginx/nginx.conf" &
NPID=$!; pids+=($NPID)
await_port $SL_GRPC && await_port $NG || exit 1

echo "== gRPC ShouldRateLimit: h2load -c$CONNS -m$STREAMS -D${SECS}s, sluice $SW worker(s);" \
     "nginx $(nginx -v 2>&1 | cut -d/ -f2) limit_req, 1 worker, wrk -t2 -c64 -d${SECS}s; one run: noisy"
t0=$(ticks $SPID); w0=$(date +%s.%N)
h2load -c "$CONNS" -m "$STREAMS" -t 1 -D "$SECS" -d "$run/request.bin" \
  -H 'content-type: application/grpc' -H 'te: trailers' \
  "http://$H:$SL_GRPC/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" > "$run/h2load.txt" 2>&1
t1=$(ticks $SPID); w1=$(date +%s.%N)
done_n=$(awk '/^requests:/ {print $6}' "$run/h2load.txt")
rps=$(awk '/^finished in/ {print $4}' "$run/h2load.txt")
# every call must have been a decision answered with grpc-status 0
ok_n=$(curl -s "http://$H:$SL_ADMIN/metrics" | awk -F'} ' '/^sluice_grpc_calls_total\{code="0"\}/ {print $2}')
g_us=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="${done_n:-0}" 'BEGIN{printf "%.2f", (n > 0 ? 1e6 * t / hz / n : 0)}')
g_cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v a="$w0" -v b="$w1" 'BEGIN{printf "%.0f", 100 * t / hz / (b - a)}')
printf "RESULT | %-40s | %12s dec/s | done %s, grpc-status 0: %s | srv cpu %3s%% (%s us/decision)\n" \
  "sluice gRPC ShouldRateLimit ($SW worker)" "$rps" "${done_n:-?}" "${ok_n:-?}" "$g_cpu" "$g_us"

t0=$(ticks $NPID); w0=$(date +%s.%N)
wrk -t2 -c64 -d"${SECS}s" -s "$here/peers/keys.lua" "http://$H:$NG/hi" -- 100000 > "$run/wrk.txt" 2>&1
t1=$(ticks $NPID); w1=$(date +%s.%N)
total=$(awk '/requests in/ {print $1}' "$run/wrk.txt")
nrps=$(awk '/Requests\/sec:/ {print $2}' "$run/wrk.txt")
n_us=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="${total:-0}" 'BEGIN{printf "%.2f", (n > 0 ? 1e6 * t / hz / n : 0)}')
n_cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v a="$w0" -v b="$w1" 'BEGIN{printf "%.0f", 100 * t / hz / (b - a)}')
printf "RESULT | %-40s | %12s req/s | done %s | srv cpu %3s%% (%s us/req)\n" \
  "nginx limit_req /hi (1 worker)" "$nrps" "${total:-?}" "$n_cpu" "$n_us"
echo "RATIO | sluice gRPC us/decision / nginx limit_req us/req: $(awk -v a="$g_us" -v b="$n_us" \
  'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "?" }') (target <= 0.6)"
