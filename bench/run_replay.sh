#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_replay.sh BUILD_DIR -- `sluice replay` speed, measured beside the library benchmark in
# the same run: lines/s for each log format (read, parse, reorder) and the replay's
# decisions/s (engine + its per-window and per-key statistics) against lib_bench's
# single-thread decisions/s on the same key count and limit (GCRA, capacity 100, 100/s,
# keys drawn uniformly). `sluice replay --bench` reads the whole trace first, then times
# the decisions alone, so the two figures are separate.
#   REPLAY_BENCH_LINES (default 400000) lines per format; REPLAY_BENCH_KEYS (100000).
set -euo pipefail
build=$(cd "${1:?usage: bench/run_replay.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
lines=${REPLAY_BENCH_LINES:-400000}
keys=${REPLAY_BENCH_KEYS:-100000}
sluice="$build/sluice"
lib="$build/libsluice.a"
[ -x "$sluice" ] || { echo "run_replay.sh: $sluice not found (build first)"; exit 1; }
[ -f "$lib" ] || { echo "run_replay.sh: $lib not found (build the library first)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cc=${CC:-gcc}
"$cc" -O2 -std=c11 -D_GNU_SOURCE -I "$root/include" -I "$root/src" -I "$root/src/core" \
  -I "$root/src/algo" -o "$work/lib_bench" "$here/lib_bench.c" "$lib" -lyaml -ljansson -lpthread -lm

# one policy shaped like lib_bench's case: GCRA, capacity 100 at 100/s, a key per client,
# a store sized for the keys (lib_bench: max_keys = the key count)
cat >"$work/bench.yaml" <<EOF
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    on_missing_key: skip
    algorithm: gcra
    limits:
      - { rate: 100/s, burst: 100 }
store: { type: memory, max_keys: $keys }
EOF

# Traces: $lines requests within one second (so every key stays warm, as in lib_bench,
# whose keys are hit every few ms), keys uniform over $keys, in every format.
/usr/bin/python3 - "$work" "$lines" "$keys" <<'EOF'
import json, random, sys, time
out, n, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(42)
t0 = 1767225600.0
rows = []
for i in range(n):
    t = t0 + i * 1.0 / n
    k = rnd.randrange(keys)
    rows.append((t, k, "10.%d.%d.%d" % (k >> 16 & 255, k >> 8 & 255, k & 255), "/v1/items/%d" % (i % 997)))
def tl(t): return time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(t))
def iso(t): return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)
with open(out + "/trace.csv", "w") as f:
    f.write("time,method,path,host,client_ip,header.x-api-key\n")
    f.writelines("%.6f,GET,%s,api.example.com,%s,user:%d\n" % (t, p, ip, k) for t, k, ip, p in rows)
with open(out + "/trace.nginx", "w") as f:
    f.writelines('%s - user:%d [%s] "GET %s HTTP/1.1" 200 512 "-" "bench/1.0"\n' % (ip, k, tl(t), p)
                 for t, k, ip, p in rows)
with open(out + "/trace.nginx-json", "w") as f:
    f.writelines(json.dumps({"msec": "%.6f" % t, "remote_addr": ip, "request": "GET %s HTTP/1.1" % p,
                             "status": 200, "request_time": "0.000", "http_host": "api.example.com",
                             "http_x_api_key": "user:%d" % k, "http_user_agent": "bench/1.0"}) + "\n"
                 for t, k, ip, p in rows)
with open(out + "/trace.envoy", "w") as f:
    f.writelines(json.dumps({"start_time": iso(t), "method": "GET", "path": p, "protocol": "HTTP/1.1",
                             "response_code": 200, "duration": 1, "authority": "api.example.com",
                             "downstream_remote_address": ip + ":40000", "x_api_key": "user:%d" % k}) + "\n"
                 for t, k, ip, p in rows)
EOF

# The engine alone on the same requests (prebuilt, no log, no statistics): the ceiling
# for any replay, between the library's figure and replay's.
cat >"$work/engine_bench.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine/engine.h"
static double now_s(void) { /* CPU time of this thread, as lib_bench's "cpu" figure */
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    long n = atol(argv[2]), keys = atol(argv[3]);
    FILE *f = fopen(argv[1], "r");
    static char buf[4096];
    size_t len = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f) fclose(f);
    sl_config *c;
    static sl_diag_list d;
    if (sl_config_load_buffer(buf, len, "bench.yaml", &c, &d) != 0) return 1;
    const sl_settings *st = sl_config_settings(c);
    int err;
    sluice_store_options o = {.max_keys = st->store.max_keys};
    sluice_store *s = sluice_store_create(&o, &err);
    sl_engine *e = sl_engine_create(c, s, &err, NULL, 0);
    char (*k)[16] = malloc((size_t)n * 16);
    int *kl = malloc((size_t)n * sizeof(int));
    if (e == NULL || k == NULL || kl == NULL) return 1;
    uint64_t x = 42;
    for (long i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        kl[i] = snprintf(k[i], 16, "user:%ld", (long)(x % (uint64_t)keys));
    }
    static sl_verdict v;
    sluice_time now = {1000000000, 1767225600LL * 1000000000LL};
    long ok = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        sl_header h = {{"x-api-key", 9}, {k[i], (size_t)kl[i]}};
        sl_request r = {.method = {"GET", 3}, .path = {"/v1/items/5", 11}, .host = {"api.example.com", 15},
                        .client_ip = {"10.1.2.3", 8}, .headers = &h, .n_headers = 1};
        now.mono_ns += 1000000000LL / n;
        now.wall_ns += 1000000000LL / n;
        sl_engine_check(e, &r, now, &v);
        ok += v.action == SL_ALLOW;
    }
    double t = now_s() - t0;
    printf("RESULT | engine alone (sl_engine_check) | %ld checks | cpu %.1f ns/check | %.0f decisions/s | allowed %ld\n",
           n, t * 1e9 / n, n / t, ok);
    return 0;
}
EOF
"$cc" -O2 -std=c11 -D_GNU_SOURCE -I "$root/include" -I "$root/src" -I "$root/src/core" \
  -o "$work/engine_bench" "$work/engine_bench.c" "$lib" -lyaml -lcrypto -lpthread -lm

echo "-- library: sluice_decide, one thread, $keys keys (lib_bench)"
"$work/lib_bench" -T 1 -a gcra -s 1.5 "$keys" | tee "$work/lib.txt"
echo "-- the engine alone on $lines prebuilt requests, same keys and limit"
"$work/engine_bench" "$work/bench.yaml" "$lines" "$keys" | tee -a "$work/lib.txt"

run() { # name file [replay args...]
  local name=$1 file=$2
  shift 2
  "$sluice" replay -c "$work/bench.yaml" --bench --json "$@" "$file" >"$work/$name.json"
  /usr/bin/python3 - "$work/$name.json" "$name" "$(stat -c %s "$file")" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
lines, rc, dc = r["input"]["lines"], r["read_cpu_seconds"], r["decide_cpu_seconds"]
print("RESULT | replay %-14s | %8d lines | %6.1f MB | read+parse cpu %5.2f s | %9.0f lines/s | decide cpu %5.2f s | %9.0f decisions/s | wall %5.2f + %5.2f s | bad %d"
      % (sys.argv[2], lines, int(sys.argv[3]) / 1e6, rc, lines / rc, dc, r["totals"]["requests"] / dc,
         r["seconds"], r["decide_seconds"], r["input"]["bad"]))
EOF
}
echo "-- replay: $lines requests per format, read first, then decided (sluice replay --bench)"
run csv "$work/trace.csv" | tee -a "$work/replay.txt"
run nginx-combined "$work/trace.nginx" --map 'header.x-api-key=$remote_user' | tee -a "$work/replay.txt"
run nginx-json "$work/trace.nginx-json" | tee -a "$work/replay.txt"
run envoy-json "$work/trace.envoy" --map 'header.x-api-key=$x_api_key' | tee -a "$work/replay.txt"

/usr/bin/python3 - "$work/lib.txt" "$work/replay.txt" "$keys" <<'EOF'
import re, statistics, sys
lib = eng = None
for line in open(sys.argv[1]):
    m = re.search(r"sluice gcra\s+str\+hash\s+keys=\d+\s+threads=1\s*\|.*\| cpu ([\d.]+) ns/decision", line)
    if m:
        lib = 1e9 / float(m.group(1))
    m = re.search(r"engine alone.*\|\s*([\d.]+) decisions/s", line)
    if m:
        eng = float(m.group(1))
rows = []
for line in open(sys.argv[2]):
    m = re.search(r"replay (\S+)\s+\|.*\|\s+([\d.]+) lines/s \|.*\|\s+([\d.]+) decisions/s", line)
    if m:
        rows.append((m.group(1), float(m.group(2)), float(m.group(3))))
print()
print("CPU time of the deciding thread throughout (descheduled time on the shared cores left out).")
print("| format | lines/s (read + parse) | replay decisions/s | engine alone | library (1 thread) | replay/library | engine/library |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, lps, dps in rows:
    print("| %s | %.0f | %.0f | %s | %s | %s | %s |" % (
        name, lps, dps, "%.0f" % eng if eng else "n/a", "%.0f" % lib if lib else "n/a",
        "%.2fx" % (dps / lib) if lib else "n/a", "%.2fx" % (eng / lib) if lib and eng else "n/a"))
print()
print("target: replay decisions/s >= 0.5x the library's single-thread decisions/s (%s keys)." % sys.argv[3])
print("replay decides through the whole engine (match, key composition, verdict) and keeps")
print("per-window and per-key statistics; 'engine alone' is sl_engine_check on prebuilt")
print("requests (the ceiling for replay); the library figure is sluice_decide alone.")
print("The cores are shared: compare only within this run.")
EOF
