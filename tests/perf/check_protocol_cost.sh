#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check_protocol_cost.sh BIN BUDGET COMPILER [--update] -- the per-protocol instruction
# guard of `make test` (issue 28): the server's instructions per request on each protocol
# path (/v1/auth, /v1/check, SL.CHECK at -P 32, SL.CHECK COMPACT, gRPC ShouldRateLimit),
# counted by callgrind as bench/run_protocol_cost.sh counts them (bench/protocol_cost_lib.sh:
# `sluice serve` under callgrind, N then 2N requests, the difference over N). The test fails
# when a path costs more than its line in BUDGET by more than PROTOCOL_COST_MARGIN per cent
# (default 5). User space only: the kernel's share of a request is not counted. Budgets are
# per compiler for the RelWithDebInfo build; --update rewrites this compiler's lines (say
# why in the commit). Ports: four free ones on 127.0.0.1, found here.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: check_protocol_cost.sh BIN BUDGET COMPILER [--update]" >&2; exit 2; }
bin=$1 budget=$2 cc=$3 update=${4:-}
margin=${PROTOCOL_COST_MARGIN:-5}
here=$(cd "$(dirname "$0")" && pwd)
for t in valgrind h2load redis-benchmark; do
  command -v $t >/dev/null || { echo "$t not found: scripts/deps.sh --for test installs it" >&2; exit 1; }
done
work=$(mktemp -d)
spid=
trap '[ -n "$spid" ] && kill -TERM $spid 2>/dev/null; rm -rf "$work"' EXIT
# four consecutive free ports (the library listens on BASE..BASE+3)
BASE_PORT=$(/usr/bin/python3 - <<'PY'
import random, socket
for _ in range(200):
    b = random.randint(20000, 60000)
    socks = []
    try:
        for p in range(b, b + 4):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            socks.append(s)
        print(b)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
PY
)
[ -n "$BASE_PORT" ] || { echo "no four free ports on 127.0.0.1" >&2; exit 1; }
N=${PROTOCOL_COST_N:-1000}
. "$here/../../bench/protocol_cost_lib.sh"
fail=0 measured=""
. "$here/budget_lib.sh"
printf '%-14s %12s %12s %8s\n' path budget measured change
for kind in auth check resp compact grpc; do
  per=$(per "$bin" $kind)
  if [ -e "$work/load_failed" ] || ! [[ $per =~ ^[0-9]+$ ]]; then
    echo "  $kind: not measured (the load failed, or callgrind gave no count: '$per')" >&2
    fail=1
    rm -f "$work/load_failed"
    continue
  fi
  budget_case "$kind" "$per"
done
budget_end "$0" "$bin" "$budget" "$cc"
