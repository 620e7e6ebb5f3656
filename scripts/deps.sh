#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deps.sh -- the one place that installs what sluice needs, by purpose, on Debian 12
# (apt-get). Idempotent and quiet when everything is present.
#   scripts/deps.sh [--for PURPOSE ...] [--check] [--list]
#     run     build the `sluice` program and run it (make run)
#     build   everything `make` and `make install` build (man pages included)
#     test    build + the servers, gateways and Python modules the tests drive (make test)
#     bench   run + the peers and load tools `make bench` measures against
#     fuzz    build + clang and libFuzzer (make fuzz)
#   Without --for: build and test (what CI needs). --bench is the old spelling of
#   --for bench. --check exits 1 naming what is missing; --list prints the packages.
# Off Debian (no apt-get, no dpkg-query), it prints what to install by hand and exits 1.
set -euo pipefail

# What compiling the program needs (CMake stops early naming any of these when absent).
LIB_PKGS="build-essential cmake pkg-config libyaml-dev libjansson-dev libhiredis-dev
  libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libssl-dev zlib1g-dev"
RUN_PKGS="$LIB_PKGS tzdata"
# Everything `make` builds: also the man pages and the libcurl client example.
BUILD_PKGS="$RUN_PKGS scdoc libcurl4-openssl-dev"
TEST_PKGS="$BUILD_PKGS curl openssl redis-server redis-tools redis-sentinel nginx-light
  haproxy caddy prometheus librsvg2-bin debhelper dpkg-dev fakeroot systemd man-db
  python3-pytest python3-redis python3-requests python3-grpcio python3-grpc-tools
  python3-prometheus-client python3-yaml valgrind nghttp2-client lintian
  chromium python3-websockets"
BENCH_PKGS="$RUN_PKGS python3 curl openssl redis-server redis-tools nginx-light haproxy wrk nghttp2-client"
FUZZ_PKGS="$BUILD_PKGS clang libclang-rt-14-dev"

# What the same purposes need in words, for systems without apt (the names are Debian's;
# other distributions name the same software differently).
manual_hint() {
  local line
  while IFS= read -r line; do printf '%s\n' "$line" >&2; done <<'MSG'
deps.sh: this system has no apt-get/dpkg-query, so nothing was installed. Install by hand:
  to build and run: a C11 compiler (gcc >= 12 or clang >= 14), make, cmake >= 3.25,
    pkg-config, and the development files of libyaml, jansson, hiredis, nghttp2,
    protobuf-c (with protoc-c), openssl and zlib; the IANA time zone database
  for the man pages and the client example: scdoc, libcurl's development files
  for the tests: curl, openssl, redis-server and redis-cli (with redis-sentinel), nginx
    with the auth_request module, haproxy >= 2.6 with Lua, caddy 2, prometheus
    (promtool), rsvg-convert, man, systemd-analyze, dpkg-buildpackage with debhelper,
    fakeroot, lintian, valgrind; for /usr/bin/python3: pytest, redis, requests, grpcio,
    grpcio-tools, prometheus_client, PyYAML, websockets; chromium (the console's
    browser tests drive it headless through the DevTools protocol)
  for the benchmarks: wrk, h2load (nghttp2), haproxy, nginx, redis-benchmark
  for fuzzing: clang with libFuzzer
Then run make again; CMake names any library it still cannot find.
MSG
}

purposes=""
check_only=0
list_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --for) [ $# -ge 2 ] || { echo "deps.sh: --for needs run|build|test|bench|fuzz" >&2; exit 2; }
           purposes="$purposes $2"; shift ;;
    --for=*) purposes="$purposes ${1#--for=}" ;;
    --bench) purposes="$purposes bench" ;;
    --check) check_only=1 ;;
    --list) list_only=1 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "deps.sh: unknown argument '$1' (scripts/deps.sh --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -z "$purposes" ] && purposes="build test"

want=""
for p in $purposes; do
  case "$p" in
    run) want="$want $RUN_PKGS" ;;
    build) want="$want $BUILD_PKGS" ;;
    test) want="$want $TEST_PKGS" ;;
    bench) want="$want $BENCH_PKGS" ;;
    fuzz) want="$want $FUZZ_PKGS" ;;
    *) echo "deps.sh: unknown purpose '$p' (expected run, build, test, bench or fuzz)" >&2; exit 2 ;;
  esac
done
declare -A seen=()
uniq=""
for p in $want; do
  [ -n "${seen[$p]:-}" ] && continue
  seen[$p]=1
  uniq="$uniq $p"
done
want=${uniq# }
if [ "$list_only" = 1 ]; then
  echo "$want"
  exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  manual_hint
  exit 1
fi
missing=""
for p in $want; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0
if [ "$check_only" = 1 ]; then
  echo "deps.sh: missing:$missing" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps.sh: missing Debian packages:$missing" >&2
  manual_hint
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "deps.sh: missing:$missing" >&2
    echo "deps.sh: not root and no sudo: run as root: apt-get install$missing" >&2
    exit 1
  fi
fi
echo "deps.sh: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Packages with daemons (nginx, redis, haproxy, caddy, prometheus) must not start them on
# the default ports at install time: a policy-rc.d refuses while we install.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
