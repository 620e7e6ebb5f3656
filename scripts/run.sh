#!/usr/bin/env bash
# run.sh SLUICE_BIN -- what `make run` starts. Until the server exists this runs the
# simulator on the validation plan's traffic so a user sees the algorithms side by side.
set -euo pipefail
bin=$1
echo "sluice $("$bin" version | cut -d' ' -f2): simulating the validation plan (sluice simulate --help for more)"
exec "$bin" simulate validation
