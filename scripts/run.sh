#!/usr/bin/env bash
# run.sh SLUICE_BIN -- what `make run` starts: sluice serve on the embedded default
# (memory store, examples/sluice.yaml, loopback ports), after saying how to try it.
set -euo pipefail
bin=$1
cd "$(dirname "$0")/.."
cat <<'MSG'
sluice serve -c examples/sluice.yaml   (Ctrl-C stops it; the state is snapshotted to sluice.state)

Try it from another terminal:
  # the validation plan's policy "api": token bucket 10/s, burst 20, per X-Api-Key
  curl -s -o /dev/null -w '%{http_code} ' -H 'X-Api-Key: alice' \
      'http://127.0.0.1:8080/v1/auth?[1-30]'; echo    # 20 x 200, then 429s
  curl -si -H 'X-Api-Key: alice' http://127.0.0.1:8080/v1/auth   # Retry-After, RateLimit
  curl -s -d '{"policy":"api","key":"bob","cost":5}' http://127.0.0.1:8080/v1/check
  redis-cli -p 6380 SL.CHECK api carol                          # any Redis client
  redis-cli -p 6380 CL.THROTTLE user123 15 30 60                # redis-cell compatible
  curl -s http://127.0.0.1:9090/metrics | grep sluice_decisions
  ./build/sluice simulate all                                   # the algorithms side by side

MSG
exec "$bin" serve -c examples/sluice.yaml
