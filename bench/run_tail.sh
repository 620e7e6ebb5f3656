#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_tail.sh BUILD_DIR -- tail latency under paced load (bench/openloop.c: open loop, each
# latency counted from the request's intended send time, so a stall is charged for every
# request queued behind it). For each pair -- sluice /v1/auth and nginx limit_req (HTTP/1.1
# keep-alive), sluice SL.CHECK and Redis INCR (RESP), sluice gRPC ShouldRateLimit and nginx
# again (no gRPC peer is in Debian) -- the peak first (closed loop, same connections),
# then 25 %, 50 % and 75 % of each one's own peak, sluice and its peer back to back at each
# fraction. Reported: p50/p99/p999 (us) and the ratio of sluice's p99 at 50 % to the peer's
# (target <= 2x). The generator's own lateness is printed with each open-loop run: on a
# loaded machine it is part of every figure, sluice's and the peer's alike.
# Env: TAIL_SECONDS (3 per run, + 1 s warm-up), TAIL_KEYS (100000), BASE_PORT (18850).
set -uo pipefail
build=$(cd "${1:?usage: bench/run_tail.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
bin="$build/sluice"
SECS=${TAIL_SECONDS:-3}
KEYS=${TAIL_KEYS:-100000}
BASE=${BASE_PORT:-18850}
H=127.0.0.1
run=$(mktemp -d)
chmod 755 "$run" # nginx workers (user nobody when started as root) read its www/
pids=()
stop() { kill -TERM "$1" 2>/dev/null || return 0; for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done; kill -KILL "$1" 2>/dev/null; }
cleanup() { local p; for p in "${pids[@]}"; do stop "$p"; done; rm -rf "$run"; }
trap cleanup EXIT
port_open() { (exec 3<>"/dev/tcp/$H/$1") 2>/dev/null; }
await_port() { for _ in $(seq 100); do port_open "$1" && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
[ -x "$bin" ] || { echo "run_tail: $bin not built" >&2; exit 1; }
SL_HTTP=$BASE SL_RESP=$((BASE + 1)) SL_ADMIN=$((BASE + 2)) SL_GRPC=$((BASE + 3)) NG=$((BASE + 4)) RD=$((BASE + 5))
for p in $SL_HTTP $SL_RESP $SL_ADMIN $SL_GRPC $NG $RD; do
  port_open $p && { echo "run_tail: port $p is in use (set BASE_PORT)" >&2; exit 1; }
done
"${CC:-gcc}" -O2 -std=c11 -Wall -Wextra -o "$run/openloop" "$here/openloop.c" || exit 1
OL="$run/openloop"

# sluice: the memory store, one worker; /v1/auth and SL.CHECK on a token bucket no request
# reaches, gRPC on an envoyproxy/ratelimit domain (keys k=v<6 digits>)
cat >"$run/sluice.yaml" <<CONF
workers: 1
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
cat >"$run/ratelimit.yaml" <<CONF
domain: bench
descriptors:
  - key: k
    rate_limit: { unit: second, requests_per_unit: 4000000000 }
CONF
(cd "$run" && exec "$bin" serve -c "$run/sluice.yaml" --http $H:$SL_HTTP --resp $H:$SL_RESP \
  --admin $H:$SL_ADMIN --grpc off --workers 1 2>"$run/sluice.log") &
pids+=($!)
(cd "$run" && exec "$bin" serve -c "$run/ratelimit.yaml" --http $H:$((BASE + 6)) --resp $H:$((BASE + 7)) \
  --admin $H:$((BASE + 8)) --grpc $H:$SL_GRPC --workers 1 2>"$run/sluice-grpc.log") &
pids+=($!)
mkdir -p "$run/nginx/tmp" "$run/nginx/www"
printf ok >"$run/nginx/www/ok.txt"
cat >"$run/nginx/nginx.conf" <<CONF
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
pids+=($!)
redis-server --bind $H --port $RD --save '' --appendonly no --daemonize no --dir "$run" --logfile "$run/redis.log" &
pids+=($!)
for p in $SL_HTTP $SL_RESP $SL_GRPC $NG $RD; do await_port $p || exit 1; done
echo "== tail latency: openloop (bench/openloop.c), ${SECS}s per run after a 1 s warm-up, $KEYS keys;" \
     "1 sluice worker, nginx 1 worker, redis-server; load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"

# peak LABEL PROTO PORT CONNS TARGET -> closed-loop requests/s
peak() { "$OL" "$2" $H "$3" peak "$SECS" "$4" "$KEYS" "$5" | tee -a "$run/log" | grep -o 'achieved [0-9]*' | cut -d' ' -f2; }
# paced LABEL PROTO PORT CONNS TARGET RATE -> the result line
paced() { "$OL" "$2" $H "$3" "$6" "$SECS" "$4" "$KEYS" "$5" 2>&1 | tr '\n' ' '; }
p99_of() { grep -o 'p99 [0-9.]*' <<<"$1" | cut -d' ' -f2; }
pair() { # TITLE  A-LABEL A-PROTO A-PORT A-CONNS A-TARGET  B-LABEL B-PROTO B-PORT B-CONNS B-TARGET
  local title=$1 al=$2 ap=$3 aport=$4 ac=$5 at=$6 bl=$7 bp=$8 bport=$9 bc=${10} bt=${11}
  local pa pb
  pa=$(peak "$al" "$ap" "$aport" "$ac" "$at")
  pb=$(peak "$bl" "$bp" "$bport" "$bc" "$bt")
  echo "-- $title: peak (closed loop) $al ${pa:-?}/s, $bl ${pb:-?}/s"
  [ -n "$pa" ] && [ -n "$pb" ] && [ "$pa" -gt 0 ] && [ "$pb" -gt 0 ] || { echo "   no peak measured"; return; }
  local f ra rb la lb a50 b50
  for f in 25 50 75; do
    ra=$((pa * f / 100)) rb=$((pb * f / 100))
    la=$(paced "$al" "$ap" "$aport" "$ac" "$at" "$ra")
    lb=$(paced "$bl" "$bp" "$bport" "$bc" "$bt" "$rb")
    printf "   %3s%% %-26s %s\n" "$f" "$al" "$la"
    printf "   %3s%% %-26s %s\n" "$f" "$bl" "$lb"
    [ "$f" = 50 ] && a50=$(p99_of "$la") b50=$(p99_of "$lb")
  done
  python3 -c "a=float('${a50:-0}'); b=float('${b50:-0}'); print(f'RATIO | {\"$title\"}: p99 at 50 % of peak, sluice {a:.0f} us / peer {b:.0f} us = {a/b if b else 0:.2f}x (target <= 2x)')"
}
pair "HTTP /v1/auth vs nginx limit_req" "sluice /v1/auth" http $SL_HTTP 16 /v1/auth "nginx limit_req" http $NG 16 /hi
pair "RESP SL.CHECK vs redis INCR" "sluice SL.CHECK" resp $SL_RESP 4 "SL.CHECK,bench,k:KKKKKK" "redis INCR" resp $RD 4 "INCR,fw:KKKKKK"
pair "gRPC ShouldRateLimit vs nginx limit_req" "sluice ShouldRateLimit" grpc $SL_GRPC 4 bench "nginx limit_req" http $NG 16 /hi
