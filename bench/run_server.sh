#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_server.sh BUILD_DIR -- `sluice serve` against its peers, in one run, same tools:
#   RESP: redis-benchmark -c 50 -r 100000 at -P 1 and -P 32: SL.CHECK and CL.THROTTLE on
#         sluice vs INCR and the Lua token bucket (peers/tb.lua, EVALSHA) on redis-server;
#         and SL.CHECK ... COMPACT (the opt-in five-integer reply);
#   HTTP: wrk -t2 -c64 --latency against sluice /v1/auth and /v1/check vs nginx limit_req
#         and HAProxy stick tables (100k keys in X-Api-Key), with the server's CPU per
#         request taken from /proc/PID/stat (utime+stime of all threads) over the run.
#   Before/after: with BEFORE_BIN=path/to/an/older/sluice, that binary is started too
#         (same config, its own ports) and measured in the same run on every sluice case
#         (RESP -P 32 SL.CHECK, /v1/auth, /v1/check): "BEFORE" lines and before/after ratios.
# Each case runs once for SECS (default 5) seconds; the 2 cores are shared with the load
# generator (and possibly other work), so every figure is noisy: compare ratios of one run.
# Env: SECS, SLUICE_WORKERS (default 1, like the peers' 1 worker/thread rows), BASE_PORT,
#      BEFORE_BIN.
set -uo pipefail
build=${1:?usage: bench/run_server.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
bin="$(cd "$build" && pwd)/sluice"
SECS=${SECS:-5}
SW=${SLUICE_WORKERS:-1}
BASE=${BASE_PORT:-18700}
H=127.0.0.1
run="$here/run/server"
mkdir -p "$run"
pids=()
cleanup() { local p; for p in "${pids[@]}"; do stop "$p"; done; }
trap cleanup EXIT

# stop PID: TERM, bounded wait, then KILL (only processes this script started)
stop() {
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
port_open() { (exec 3<>"/dev/tcp/$H/$1") 2>/dev/null; }
await_port() { for _ in $(seq 100); do port_open "$1" && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
# ticks PID: utime+stime of PID and its direct children (nginx's workers), all threads
ticks() {
  local t=0 p v
  for p in "$1" $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) && t=$((t + v))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)

[ -x "$bin" ] || { echo "run_server: $bin not built" >&2; exit 1; }
BEFORE_BIN=${BEFORE_BIN:-}
for p in $(seq $BASE $((BASE + 8))); do
  port_open $p && { echo "run_server: port $p is in use (set BASE_PORT)" >&2; exit 1; }
done
SL_HTTP=$BASE SL_RESP=$((BASE + 1)) SL_ADMIN=$((BASE + 2)) RD=$((BASE + 3)) NG=$((BASE + 4)) HA=$((BASE + 5))
B_HTTP=$((BASE + 6)) B_RESP=$((BASE + 7)) B_ADMIN=$((BASE + 8))

# ---- servers ----
cat > "$run/sluice.yaml" <<CONF
workers: $SW
store: { type: memory, max_keys: 2000000 }
policies:
  - name: bench
    objective: protection
    key: [header.x-api-key]
    on_missing_key: { use: [client_ip] }
    algorithm: token_bucket
    limits:
      - { rate: 100000/s, burst: 1000000 }
CONF
(cd "$run" && exec "$bin" serve -c "$run/sluice.yaml" --http $H:$SL_HTTP --resp $H:$SL_RESP \
  --admin $H:$SL_ADMIN --grpc off --workers "$SW" 2> "$run/sluice.log") &
SPID=$!; pids+=($SPID)
BPID=
if [ -n "$BEFORE_BIN" ]; then
  [ -x "$BEFORE_BIN" ] || { echo "run_server: BEFORE_BIN=$BEFORE_BIN is not an executable" >&2; exit 1; }
  mkdir -p "$run/before"
  (cd "$run/before" && exec "$BEFORE_BIN" serve -c "$run/sluice.yaml" --http $H:$B_HTTP --resp $H:$B_RESP \
    --admin $H:$B_ADMIN --grpc off --workers "$SW" 2> "$run/before/sluice.log") &
  BPID=$!; pids+=($BPID)
  await_port $B_RESP && await_port $B_HTTP || exit 1
fi
redis-server --bind $H --port $RD --save '' --appendonly no --daemonize no --dir "$run" \
  --logfile "$run/redis.log" &
RPID=$!; pids+=($RPID)
await_port $SL_RESP && await_port $SL_HTTP && await_port $RD || exit 1
SHA=$(redis-cli -h $H -p $RD SCRIPT LOAD "$(cat "$here/peers/tb.lua")")
echo "== sluice $("$bin" version | cut -d' ' -f2) ($SW worker(s)), $(redis-server --version | cut -d' ' -f1-3)," \
     "nproc $(nproc), ${SECS}s per case, one run: noisy"

declare -A RPS P99 US
# resp_case LABEL PID PORT P CMD... -- calibrate (~0.5 s), then run ~SECS seconds
resp_case() {
  local label=$1 pid=$2 port=$3 P=$4; shift 4
  local cal n t0 t1 w0 w1 line
  cal=$(redis-benchmark -h $H -p "$port" -c 50 -r 100000 -P "$P" -n $((P == 1 ? 40000 : 200000)) --csv "$@" 2>/dev/null \
        | tail -1 | cut -d, -f2 | tr -d '"' | cut -d. -f1)
  [ -n "$cal" ] && [ "$cal" -gt 0 ] 2>/dev/null || cal=50000
  n=$((cal * SECS))
  t0=$(ticks "$pid"); w0=$(date +%s.%N)
  line=$(redis-benchmark -h $H -p "$port" -c 50 -r 100000 -P "$P" -n "$n" --csv "$@" 2>"$run/rb.err" | tail -1)
  t1=$(ticks "$pid"); w1=$(date +%s.%N)
  local rps p50 p99
  rps=$(echo "$line" | cut -d, -f2 | tr -d '"'); p50=$(echo "$line" | cut -d, -f5 | tr -d '"')
  p99=$(echo "$line" | cut -d, -f7 | tr -d '"')
  local us cpu
  us=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$n" 'BEGIN{printf "%.2f", 1e6 * t / hz / n}')
  cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v a="$w0" -v b="$w1" 'BEGIN{printf "%.0f", 100 * t / hz / (b - a)}')
  printf "RESULT | %-34s -P %-2s | %12s ops/s | p50 %6s ms | p99 %6s ms | srv cpu %3s%% (%s us/op)\n" \
    "$label" "$P" "$rps" "$p50" "$p99" "$cpu" "$us"
  RPS["$label/$P"]=${rps%.*}; P99["$label/$P"]=$p99; US["$label/$P"]=$us
  grep -q "Error" "$run/rb.err" && echo "   (errors: $(head -1 "$run/rb.err"))"
}

for P in 1 32; do
  resp_case "sluice SL.CHECK" $SPID $SL_RESP $P SL.CHECK bench 'k:__rand_int__'
  resp_case "sluice SL.CHECK COMPACT" $SPID $SL_RESP $P SL.CHECK bench 'k:__rand_int__' COMPACT
  [ -n "$BPID" ] && [ "$P" = 32 ] && resp_case "BEFORE sluice SL.CHECK" $BPID $B_RESP $P SL.CHECK bench 'k:__rand_int__'
  resp_case "sluice CL.THROTTLE" $SPID $SL_RESP $P CL.THROTTLE 'k:__rand_int__' 1000000 100000 1
  resp_case "redis INCR" $RPID $RD $P INCR 'fw:__rand_int__'
  resp_case "redis EVALSHA tb.lua" $RPID $RD $P EVALSHA "$SHA" 2 'rl:__rand_int__:t' 'rl:__rand_int__:ts' 100 1000000000 1700000000
  redis-cli -h $H -p $RD FLUSHALL >/dev/null
done
stop $RPID

# ---- HTTP: nginx limit_req and haproxy stick table beside sluice /v1/auth ----
mkdir -p "$run/nginx/tmp" "$run/nginx/www"
printf ok > "$run/nginx/www/ok.txt"
cat > "$run/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $run/nginx/nginx.pid;
error_log $run/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 10000000;
  open_file_cache max=64 inactive=60s;
  client_body_temp_path $run/nginx/tmp/body;
  proxy_temp_path $run/nginx/tmp/proxy;
  fastcgi_temp_path $run/nginx/tmp/fastcgi;
  uwsgi_temp_path $run/nginx/tmp/uwsgi;
  scgi_temp_path $run/nginx/tmp/scgi;
  limit_req_zone \$http_x_api_key zone=hi:64m rate=100000r/s;
  limit_req_status 429;
  server {
    listen $H:$NG;
    root $run/nginx/www;
    location = /hi { limit_req zone=hi; try_files /ok.txt =404; }
  }
}
CONF
nginx -p "$run/nginx" -c "$run/nginx/nginx.conf" &
NPID=$!; pids+=($NPID)
cat > "$run/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
backend st_hi
  stick-table type string len 32 size 1m expire 60s store http_req_rate(10s)
frontend fe
  bind $H:$HA
  http-request track-sc0 req.hdr(x-api-key) table st_hi
  http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000 }
  http-request return status 200 content-type text/plain string ok
CONF
haproxy -f "$run/haproxy.cfg" -db > "$run/haproxy.log" 2>&1 &
HPID=$!; pids+=($HPID)
await_port $NG && await_port $HA || exit 1

declare -A HUS
http_case() {  # LABEL PID URL [WRK_SCRIPT]
  local label=$1 pid=$2 url=$3 script=${4:-keys.lua} t0 t1 w0 w1
  t0=$(ticks "$pid"); w0=$(date +%s.%N)
  wrk -t2 -c64 -d"${SECS}s" --latency -s "$here/peers/$script" "$url" -- 100000 > "$run/wrk.txt" 2>&1
  t1=$(ticks "$pid"); w1=$(date +%s.%N)
  local total rps p50 p99 non2xx
  total=$(awk '/requests in/ {print $1}' "$run/wrk.txt")
  rps=$(awk '/Requests\/sec:/ {print $2}' "$run/wrk.txt")
  p50=$(awk '/^ +50%/ {print $2}' "$run/wrk.txt"); p99=$(awk '/^ +99%/ {print $2}' "$run/wrk.txt")
  non2xx=$(awk '/Non-2xx/ {print $5}' "$run/wrk.txt")
  local us cpu
  us=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="${total:-0}" 'BEGIN{printf "%.2f", (n > 0 ? 1e6 * t / hz / n : 0)}')
  cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v a="$w0" -v b="$w1" 'BEGIN{printf "%.0f", 100 * t / hz / (b - a)}')
  printf "RESULT | %-40s | %12s req/s | p50 %8s | p99 %8s | non-2xx %s | srv cpu %3s%% (%s us/req)\n" \
    "$label" "$rps" "$p50" "$p99" "${non2xx:-0}" "$cpu" "$us"
  HUS["$label"]=$us
}
echo "== HTTP: wrk -t2 -c64 -d${SECS}s, 100k keys; $(nginx -v 2>&1 | cut -d' ' -f3), $(haproxy -v | head -1 | cut -d' ' -f1-3)"
http_case "sluice /v1/auth ($SW worker)" $SPID "http://$H:$SL_HTTP/v1/auth"
http_case "sluice /v1/check ($SW worker)" $SPID "http://$H:$SL_HTTP/v1/check" check_keys.lua
if [ -n "$BPID" ]; then
  http_case "BEFORE sluice /v1/auth" $BPID "http://$H:$B_HTTP/v1/auth"
  http_case "BEFORE sluice /v1/check" $BPID "http://$H:$B_HTTP/v1/check" check_keys.lua
fi
http_case "nginx limit_req /hi (1 worker)" $NPID "http://$H:$NG/hi"
http_case "haproxy stick table (nbthread 1)" $HPID "http://$H:$HA/hi"

echo "== ratios (this run; noisy: shared cores)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "?" }'; }
for P in 1 32; do
  echo "RATIO | SL.CHECK / redis INCR      -P $P: $(ratio "${RPS["sluice SL.CHECK/$P"]:-0}" "${RPS["redis INCR/$P"]:-0}") (target >= 1)"
  echo "RATIO | CL.THROTTLE / redis INCR   -P $P: $(ratio "${RPS["sluice CL.THROTTLE/$P"]:-0}" "${RPS["redis INCR/$P"]:-0}")"
  echo "RATIO | SL.CHECK / redis tb.lua    -P $P: $(ratio "${RPS["sluice SL.CHECK/$P"]:-0}" "${RPS["redis EVALSHA tb.lua/$P"]:-0}")"
  echo "RATIO | server CPU per op, SL.CHECK / INCR -P $P: $(ratio "${US["sluice SL.CHECK/$P"]:-0}" "${US["redis INCR/$P"]:-0}") (<= 1: cheaper than INCR; fairer than ops/s when the cores are contended)"
done
NGX=${HUS["nginx limit_req /hi (1 worker)"]:-0}
echo "RATIO | server CPU per op, SL.CHECK / INCR -P 32: $(ratio "${US["sluice SL.CHECK/32"]:-0}" "${US["redis INCR/32"]:-0}") (issue 28 target <= 0.5)"
echo "RATIO | ops/s, SL.CHECK COMPACT / INCR -P 32:    $(ratio "${RPS["sluice SL.CHECK COMPACT/32"]:-0}" "${RPS["redis INCR/32"]:-0}") (issue 28 target >= 1)"
echo "RATIO | ops/s, SL.CHECK COMPACT / INCR -P 1:     $(ratio "${RPS["sluice SL.CHECK COMPACT/1"]:-0}" "${RPS["redis INCR/1"]:-0}")"
echo "RATIO | server CPU per request, /v1/check / nginx limit_req: $(ratio "${HUS["sluice /v1/check ($SW worker)"]:-0}" "$NGX") (issue 28 target <= 0.75)"
echo "RATIO | server CPU per request, /v1/auth / nginx limit_req:  $(ratio "${HUS["sluice /v1/auth ($SW worker)"]:-0}" "$NGX") (issue 28 target <= 0.5)"
if [ -n "$BPID" ]; then
  echo "RATIO | after/before server CPU per op, SL.CHECK -P 32: $(ratio "${US["sluice SL.CHECK/32"]:-0}" "${US["BEFORE sluice SL.CHECK/32"]:-0}") (< 1: cheaper)"
  echo "RATIO | after/before server CPU per request, /v1/auth:  $(ratio "${HUS["sluice /v1/auth ($SW worker)"]:-0}" "${HUS["BEFORE sluice /v1/auth"]:-0}")"
  echo "RATIO | after/before server CPU per request, /v1/check: $(ratio "${HUS["sluice /v1/check ($SW worker)"]:-0}" "${HUS["BEFORE sluice /v1/check"]:-0}")"
fi
echo "RATIO | sluice us/req / nginx limit_req us/req: $(ratio "${HUS["sluice /v1/auth ($SW worker)"]}" "${HUS["nginx limit_req /hi (1 worker)"]}") (target <= 0.6)"
echo "RATIO | sluice us/req / haproxy us/req:         $(ratio "${HUS["sluice /v1/auth ($SW worker)"]}" "${HUS["haproxy stick table (nbthread 1)"]}")"
