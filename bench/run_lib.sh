#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_lib.sh BUILD_DIR -- libsluice's memory store against the naive unlocked C table
# (bench/naive_tb.c, a copy of ../shared/peers/bench_c_tb.c), both built here and run one
# after the other in the same run, then a table of ns/decision with ratios sluice/naive.
# Needs BUILD_DIR/libsluice.a (make bench builds it in Release).
#   LIB_BENCH_SECONDS (default 1.5) per timed case; LIB_BENCH_KEYS (default "1000 100000
#   10000000"; the 10M case needs ~1 GiB between the two programs); LIB_BENCH_REPS
#   (default 1) runs of the whole sequence, the table then shows medians over them.
# Each key count also runs lib_bench -mem: the 2T/1T scaling this host gives work that
# shares no line at all (the ceiling the store's CPU-time scaling is read against).
# Then lib_bench -flood: LIB_BENCH_FLOOD (default 10000000, 0 skips it) rotating attacker
# keys at full speed against max_keys 100,000, victims compared with an unflooded store
# (resets of active and exhausted keys must be 0; ~20 s).
set -euo pipefail
build=$(cd "${1:?usage: bench/run_lib.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
secs=${LIB_BENCH_SECONDS:-1.5}
flood=${LIB_BENCH_FLOOD:-10000000}
keys=${LIB_BENCH_KEYS:-"1000 100000 10000000"}
reps=${LIB_BENCH_REPS:-1}
lib="$build/libsluice.a"
[ -f "$lib" ] || { echo "run_lib.sh: $lib not found (build the library first)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cc=${CC:-gcc}
"$cc" -O2 -o "$work/naive_tb" "$here/naive_tb.c"
"$cc" -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -I "$root/include" -I "$root/src" \
  -I "$root/src/core" -I "$root/src/algo" -o "$work/lib_bench" "$here/lib_bench.c" "$lib" \
  -lyaml -ljansson -lpthread -lm

# One key count at a time, naive then sluice, so both see the same machine state (the
# cores are shared with other work).
: >"$work/naive.txt"
: >"$work/lib.txt"
"$work/lib_bench" -hash -s 0.5 | tee -a "$work/lib.txt"
"$cc" -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -I "$root/include" -I "$root/src" -I "$root/src/core" -o "$work/topk_bench" "$here/topk_bench.c" "$root/src/core/topk.c" "$lib" -lpthread -lm && "$work/topk_bench"
for r in $(seq "$reps"); do
  for n in $keys; do
    echo "-- $n keys: naive unlocked table (one thread, no expiry, no eviction)"
    "$work/naive_tb" -s "$secs" "$n" | tee -a "$work/naive.txt"
    echo "-- $n keys: sluice memory store (thread-safe, bounded, expiring)"
    "$work/lib_bench" -s "$secs" "$n" | tee -a "$work/lib.txt"
    echo "-- $n keys: the host's 2-thread ceiling (private memory, nothing shared)"
    "$work/lib_bench" -mem "$n" | tee -a "$work/lib.txt"
  done
done

if [ "$flood" != 0 ]; then
  echo "-- key flood: $flood rotating keys, max_keys 100000"
  "$work/lib_bench" -flood "$flood" | tee "$work/flood.txt"
fi

/usr/bin/python3 - "$work/naive.txt" "$work/lib.txt" "$reps" <<'EOF'
import re, sys, statistics
from collections import defaultdict
naive, lib, ceil = defaultdict(list), {}, defaultdict(list)
for line in open(sys.argv[1]):
    m = re.search(r'C naive token bucket (\S+)\s+keys=(\d+)\s*\|\s*([\d.]+) ns', line)
    if m and m.group(1) == 'str+hash':
        naive[int(m.group(2))].append(float(m.group(3)))
for line in open(sys.argv[2]):
    m = re.search(r'private memory walk\s+keys=(\d+)\s+threads=2 .*cpu scaling ([\d.]+)x', line)
    if m:
        ceil[int(m.group(1))].append(float(m.group(2)))
        continue
    m = re.search(r'sluice (\S+)\s+(\S+)\s+keys=(\d+)\s+threads=(\d)\s*\|\s*([\d.]+) ns', line)
    if not m:
        continue
    algo, case, n, t, ns = m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), float(m.group(5))
    d = lib.setdefault((algo, n), defaultdict(list))
    if case == 'insert':
        b = re.search(r'bytes/key ([\d.]+)', line)
        d['bytes'].append(float(b.group(1)))
    else:
        pre = 'b' if case.startswith('batch') else ''
        d[pre + 'ns%d' % t].append(ns)
        s = re.search(r'\| scaling ([\d.]+)x', line)
        c = re.search(r'cpu scaling ([\d.]+)x', line)
        if t == 2:
            d[pre + 'scale'].append(float(s.group(1)))
            d[pre + 'cscale'].append(float(c.group(1)) if c else 0)
print()
print('| keys | naive ns | algo | sluice ns (1 thread) | ratio sluice/naive | 2 threads ns/thread | 2T/1T throughput | 2T/1T (CPU time) | host ceiling 2T/1T (CPU time) | bytes/key | batch16 ns (1T) | batch16/naive | batch16 2T/1T | batch16 2T/1T (CPU time) |')
print('|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
med = lambda v: statistics.median(v) if v else 0
naive = {n: med(v) for n, v in naive.items()}
for (algo, n), d in sorted(lib.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    d = {k: med(v) for k, v in d.items()}
    nv = naive.get(n)
    ratio = '%.2fx' % (d.get('ns1', 0) / nv) if nv else 'n/a'
    bratio = '%.2fx' % (d.get('bns1', 0) / nv) if nv else 'n/a'
    print('| %d | %s | %s | %.1f | %s | %.1f | %.2fx | %.2fx | %s | %.1f | %.1f | %s | %.2fx | %.2fx |' % (
        n, '%.1f' % nv if nv else 'n/a', algo, d.get('ns1', 0), ratio, d.get('ns2', 0),
        d.get('scale', 0), d.get('cscale', 0),
        '%.2fx' % med(ceil[n]) if ceil.get(n) else 'n/a', d.get('bytes', 0), d.get('bns1', 0), bratio,
        d.get('bscale', 0), d.get('bcscale', 0)))
print()
print('targets: ratio <= 1.2x at 100k and 10M keys; 2T/1T >= 1.8x; <= 48 bytes/key.')
print('batch16: the same traffic 16 items per sluice_decide_batch call (pipelined callers);')
print('the per-decision columns are the comparison the targets refer to. "CPU time": the same')
print('scaling from per-thread CPU time (time descheduled by other work on the cores left out).')
print('"host ceiling": two threads walking private arrays of the table\'s size (no line shared),')
print('the scaling this host gives memory-bound work at all; read the store\'s CPU-time column against it.')
print('The cores are shared: figures are medians over %s run(s), noisy; compare only within this run.' % sys.argv[3])
EOF
if [ -s "$work/flood.txt" ]; then
  echo
  echo "key flood (victims: keys active at 1/s and exhausted keys; resets must be 0):"
  grep -E '^(RESULT|STATS)' "$work/flood.txt"
fi
