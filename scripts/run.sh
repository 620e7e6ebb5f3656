#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh SLUICE_BIN [CONFIG] -- what `make run` starts: sluice serve on a config
# (default examples/sluice.yaml: memory store, loopback ports), after one banner saying
# how to try it. HTTP, RESP, GRPC, ADMIN (ADDR:PORT or off), STORE and WORKERS in the
# environment become the matching `sluice serve` flags; empty means the config's value.
set -euo pipefail
bin=$1
config=${2:-examples/sluice.yaml}
cd "$(dirname "$0")/.."

args=(serve -c "$config")
[ -n "${HTTP:-}" ] && args+=(--http "$HTTP")
[ -n "${RESP:-}" ] && args+=(--resp "$RESP")
[ -n "${GRPC:-}" ] && args+=(--grpc "$GRPC")
[ -n "${ADMIN:-}" ] && args+=(--admin "$ADMIN")
[ -n "${STORE:-}" ] && args+=(--store "$STORE")
[ -n "${WORKERS:-}" ] && args+=(--workers "$WORKERS")

# The addresses the banner shows: the flag, else the config's listen section, else the
# server's default (the same order sluice applies).
from_config() { # KEY DEFAULT
  local v
  v=$(sed -n "/^listen:/,/^[^ #]/s/^  $1: *\([^ #]*\).*/\1/p" "$config" 2>/dev/null | head -1)
  echo "${v:-$2}"
}
http=${HTTP:-$(from_config http 127.0.0.1:8080)}
resp=${RESP:-$(from_config resp 127.0.0.1:6380)}
grpc=${GRPC:-$(from_config grpc 127.0.0.1:8081)}
admin=${ADMIN:-$(from_config admin 127.0.0.1:8082)}

# A port already taken (often: another `make run`) is named before sluice says
# "address in use", with the way around it.
busy=""
for pair in "HTTP=$http" "RESP=$resp" "GRPC=$grpc" "ADMIN=$admin"; do
  addr=${pair#*=}
  case "$addr" in off|none|unix:*|"") continue ;; esac
  host=${addr%:*}; port=${addr##*:}; host=${host#[}; host=${host%]}
  if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then busy="$busy ${pair%%=*}"; fi
done
if [ -n "$busy" ]; then
  echo "make run: something already listens on the address of:$busy" >&2
  echo "  pick others, e.g. make run HTTP=127.0.0.1:18080 RESP=127.0.0.1:16380 GRPC=127.0.0.1:18081 ADMIN=127.0.0.1:18082" >&2
  echo "  (or 'off' to disable a listener)" >&2
  exit 1
fi

shown=$bin; case $bin in /*|./*) ;; *) shown=./$bin ;; esac
rhost=${resp%:*}; rhost=${rhost#[}; rhost=${rhost%]}
rcli="redis-cli -p ${resp##*:}"
[ "$rhost" != 127.0.0.1 ] && rcli="redis-cli -h $rhost -p ${resp##*:}"
cat <<MSG
sluice serve -c $config: http $http, resp $resp, grpc $grpc, admin $admin
(Ctrl-C stops it; the memory store is snapshotted to sluice.state)

Try it from another terminal:
  # the policy "api": token bucket 10/s, burst 20, per X-Api-Key
  curl -s -o /dev/null -w '%{http_code} ' -H 'X-Api-Key: alice' \\
      'http://$http/v1/auth?[1-30]'; echo    # 20 x 200, then 429s
  curl -si -H 'X-Api-Key: alice' http://$http/v1/auth   # Retry-After, RateLimit
  curl -s -d '{"policy":"api","key":"bob","cost":5}' http://$http/v1/check
  $rcli SL.CHECK api carol   # any Redis client
  $rcli CL.THROTTLE user123 15 30 60   # redis-cell compatible
  curl -s http://$admin/metrics | grep sluice_decisions
  $shown simulate all   # the algorithms side by side

MSG
exec "$bin" "${args[@]}"
