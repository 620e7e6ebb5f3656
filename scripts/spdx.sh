#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# spdx.sh [--check|--list] [DIR] -- puts `SPDX-License-Identifier: Apache-2.0` at the top of
# every C, header, Python, shell and Lua file under DIR (default: the repository), in that
# language's comment syntax, after a #! line when there is one. Idempotent: a file that
# names an SPDX identifier in its first 5 lines is left alone.
#   --check  change nothing; list the files without the line and exit 1 if there are any
#   --list   print the files this script covers
# Files: git's tracked and untracked-but-not-ignored files when DIR is a git work tree
# (else every file outside build trees), minus fuzz corpora. Which files: *.c *.h *.py *.sh *.lua, and files
# without one of those names whose first line is a #! for sh, bash or python.
set -euo pipefail
mode=apply
case "${1:-}" in
  --check) mode=check; shift ;;
  --list) mode=list; shift ;;
  -h|--help) sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$dir"
ID="SPDX-License-Identifier: Apache-2.0"

files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -z
  else
    # no git: every file but build trees (build*/, Debian's obj-*/, debian/tmp)
    find . \( -path './.git' -o -path './build*' -o -path './obj-*' -o -path './debian/tmp' \) \
      -prune -o -type f -print0 | sed -z 's#^\./##'
  fi
}

# The comment style for a file, or nothing when the script does not cover it.
kind() {
  case "$1" in
    tests/fuzz/corpus/*) return ;;
    *.c|*.h) echo c; return ;;
    *.py) echo hash; return ;;
    *.sh) echo hash; return ;;
    *.lua) echo lua; return ;;
  esac
  local first
  first=$(head -c 128 "$1" 2>/dev/null | head -n 1 | tr -d '\0') || true
  case "$first" in
    '#!'*python*|'#!'*/sh|'#!'*/sh\ *|'#!'*bash*) echo hash ;;
  esac
}

missing=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  k=$(kind "$f")
  [ -n "$k" ] || continue
  if [ "$mode" = list ]; then echo "$f"; continue; fi
  if head -n 5 "$f" | grep -q 'SPDX-License-Identifier:'; then continue; fi
  if [ "$mode" = check ]; then
    echo "no SPDX line: $f"
    missing=1
    continue
  fi
  case "$k" in
    c) line="/* $ID */" ;;
    hash) line="# $ID" ;;
    lua) line="-- $ID" ;;
  esac
  tmp=$(mktemp "$f.spdx.XXXXXX")
  if head -n 1 "$f" | grep -q '^#!'; then
    { head -n 1 "$f"; echo "$line"; tail -n +2 "$f"; } >"$tmp"
  else
    { echo "$line"; cat "$f"; } >"$tmp"
  fi
  chmod --reference="$f" "$tmp"
  mv "$tmp" "$f"
  echo "added: $f"
done < <(files)
[ "$mode" = check ] && [ "$missing" = 1 ] && exit 1
exit 0
