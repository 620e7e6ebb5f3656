#!/usr/bin/env bash
# deps.sh -- the one place that installs what sluice needs to build, test and
# benchmark on Debian. Idempotent and quiet when everything is present.
#   scripts/deps.sh           build + test dependencies
#   scripts/deps.sh --bench   also the peers measured by `make bench`
#   scripts/deps.sh --check   exit 1 if something is missing, install nothing
set -euo pipefail

BUILD_PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev tzdata
  libyaml-dev libjansson-dev libhiredis-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
  libssl-dev"
TEST_PKGS="curl redis-server redis-tools nginx-light nghttp2-client
  python3-pytest python3-redis python3-requests python3-grpcio python3-grpc-tools
  prometheus python3-prometheus-client valgrind"
BENCH_PKGS="wrk haproxy"

want="$BUILD_PKGS $TEST_PKGS"
check_only=0
for arg in "$@"; do
  case "$arg" in
    --bench) want="$want $BENCH_PKGS" ;;
    --check) check_only=1 ;;
    *) echo "deps.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

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

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "deps.sh: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# nginx-light must not start a daemon on port 80 at install time.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
