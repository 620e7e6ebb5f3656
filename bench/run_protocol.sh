#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_protocol.sh BUILD_DIR -- `make bench`'s part "protocol": the server's instructions per
# request on each protocol path (callgrind; see run_protocol_cost.sh), BUILD_DIR's binary
# against BEFORE_BIN (default: itself, so the "before" column is only a repeat).
set -uo pipefail
build=${1:?usage: bench/run_protocol.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
bin="$(cd "$build" && pwd)/sluice"
command -v valgrind >/dev/null && command -v h2load >/dev/null || { echo "run_protocol: needs valgrind and h2load"; exit 0; }
echo "== server instructions per request (callgrind), before=${BEFORE_BIN:-$bin} after=$bin"
exec "$here/run_protocol_cost.sh" "${BEFORE_BIN:-$bin}" "$bin"
