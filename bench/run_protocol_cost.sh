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
work=$(mktemp -d)
spid=
trap '[ -n "$spid" ] && kill -TERM $spid 2>/dev/null; rm -rf "$work"' EXIT
. "$here/protocol_cost_lib.sh"

printf '| path (server instructions per request, callgrind) | before | after | after/before |\n|---|---:|---:|---:|\n'
for kind in auth check resp compact grpc; do
  b=$(per "$1" $kind); a=$(per "$2" $kind)
  if [ "$kind" = compact ] && ! grep -q COMPACT <(strings "$1"); then b="-"; fi
  r=$(awk -v a="$a" -v b="$b" 'BEGIN{ if (b + 0 > 0 && a + 0 > 0) printf "%.2f", a / b; else print "-" }')
  printf '| %s | %s | %s | %s |\n' "$kind" "$b" "$a" "$r"
done
