#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deb.sh OUTDIR -- builds the Debian packages (sluice, libsluice0, libsluice-dev) with
# `dpkg-buildpackage -us -uc -b` in a copy of the source tree under OUTDIR/src, so the
# packages (and dpkg-buildpackage's other output, which goes to the parent directory)
# land in OUTDIR and the work tree stays clean. DEB_BUILD_OPTIONS is passed on
# (default: parallel=2; add nocheck to skip the unit tests). Then lintian --pedantic on
# them: its findings are printed, an error fails (OUTDIR/lintian.log keeps them).
set -euo pipefail
out=${1:?usage: deb.sh OUTDIR}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/src" "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
mkdir -p "$out/src"
cd "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$out/src"
else
  tar --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C "$out/src"
fi
cd "$out/src"
export DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS:-parallel=2}
dpkg-buildpackage -us -uc -b >"$out/build.log" 2>&1 || { tail -60 "$out/build.log" >&2; exit 1; }
ls "$out"/*.deb
# lintian (scripts/deps.sh --for test installs it): pedantic, and an error fails the build
if command -v lintian >/dev/null 2>&1; then
  lintian --pedantic "$out"/*.changes >"$out/lintian.log" 2>&1 || true
  grep -v '^running with root privileges' "$out/lintian.log" >&2 || true
  if grep -q '^E: ' "$out/lintian.log"; then
    echo "deb.sh: lintian found errors (above)" >&2
    exit 1
  fi
fi
