#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh BUILD_DIR SECONDS -- runs every libFuzzer target for SECONDS each, seeded from
# its corpus; new inputs go to a scratch copy, crashes to tests/fuzz/artifacts/.
set -euo pipefail
build=$1 secs=${2:-60}
root=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$root/artifacts"
for bin in "$build"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  work=$(mktemp -d)
  cp -r "$root/corpus/$name/." "$work/" 2>/dev/null || true
  echo "== $name ($secs s)"
  "$bin" -max_total_time="$secs" -artifact_prefix="$root/artifacts/$name-" "$work"
  rm -rf "$work"
done
