#!/usr/bin/env bash
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

cat >"$work/bench.yaml" <<'EOF'
# one policy shaped like lib_bench's case: GCRA, capacity 100 at 100/s, a key per client
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    on_missing_key: skip
    algorithm: gcra
    limits:
      - { rate: 100/s, burst: 100 }
store: { type: memory, max_keys: 1000000 }
EOF

# Traces: $lines requests over 100 s, keys uniform over $keys, in every format.
/usr/bin/python3 - "$work" "$lines" "$keys" <<'EOF'
import json, random, sys, time
out, n, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(42)
t0 = 1767225600.0
rows = []
for i in range(n):
    t = t0 + i * 100.0 / n
    k = rnd.randrange(keys)
    rows.append((t, k, "10.%d.%d.%d" % (k >> 16 & 255, k >> 8 & 255, k & 255), "/v1/items/%d" % (i % 997)))
def tl(t): return time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(t))
def iso(t): return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)
with open(out + "/trace.csv", "w") as f:
    f.write("time,method,path,host,client_ip,header.x-api-key\n")
    f.writelines("%.3f,GET,%s,api.example.com,%s,user:%d\n" % (t, p, ip, k) for t, k, ip, p in rows)
with open(out + "/trace.nginx", "w") as f:
    f.writelines('%s - user:%d [%s] "GET %s HTTP/1.1" 200 512 "-" "bench/1.0"\n' % (ip, k, tl(t), p)
                 for t, k, ip, p in rows)
with open(out + "/trace.nginx-json", "w") as f:
    f.writelines(json.dumps({"msec": "%.3f" % t, "remote_addr": ip, "request": "GET %s HTTP/1.1" % p,
                             "status": 200, "request_time": "0.000", "http_host": "api.example.com",
                             "http_x_api_key": "user:%d" % k, "http_user_agent": "bench/1.0"}) + "\n"
                 for t, k, ip, p in rows)
with open(out + "/trace.envoy", "w") as f:
    f.writelines(json.dumps({"start_time": iso(t), "method": "GET", "path": p, "protocol": "HTTP/1.1",
                             "response_code": 200, "duration": 1, "authority": "api.example.com",
                             "downstream_remote_address": ip + ":40000", "x_api_key": "user:%d" % k}) + "\n"
                 for t, k, ip, p in rows)
EOF

echo "-- library: sluice_decide, one thread, $keys keys (lib_bench)"
"$work/lib_bench" -T 1 -a gcra -s 1.5 "$keys" | tee "$work/lib.txt"

run() { # name file [replay args...]
  local name=$1 file=$2
  shift 2
  "$sluice" replay -c "$work/bench.yaml" --bench --json "$@" "$file" >"$work/$name.json"
  /usr/bin/python3 - "$work/$name.json" "$name" "$(stat -c %s "$file")" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
lines, secs, dec = r["input"]["lines"], r["seconds"], r["decide_seconds"]
print("RESULT | replay %-11s | %9d lines | %6.1f MB | read+parse %6.2f s | %9.0f lines/s | decide %5.2f s | %9.0f decisions/s | bad %d"
      % (sys.argv[2], lines, int(sys.argv[3]) / 1e6, secs, lines / secs, dec, r["totals"]["requests"] / dec,
         r["input"]["bad"]))
EOF
}
echo "-- replay: $lines requests per format, read first, then decided (sluice replay --bench)"
run csv "$work/trace.csv" | tee -a "$work/replay.txt"
run nginx-combined "$work/trace.nginx" --map 'header.x-api-key=$remote_user' | tee -a "$work/replay.txt"
run nginx-json "$work/trace.nginx-json" | tee -a "$work/replay.txt"
run envoy-json "$work/trace.envoy" --map 'header.x-api-key=$x_api_key' | tee -a "$work/replay.txt"

/usr/bin/python3 - "$work/lib.txt" "$work/replay.txt" "$keys" <<'EOF'
import re, statistics, sys
lib = None
for line in open(sys.argv[1]):
    m = re.search(r"sluice gcra\s+str\+hash\s+keys=\d+\s+threads=1\s*\|\s*([\d.]+) ns/decision", line)
    if m:
        lib = 1e9 / float(m.group(1))
rows = []
for line in open(sys.argv[2]):
    m = re.search(r"replay (\S+)\s+\|.*\|\s+([\d.]+) lines/s \|.*\|\s+([\d.]+) decisions/s", line)
    if m:
        rows.append((m.group(1), float(m.group(2)), float(m.group(3))))
print()
print("| format | lines/s (read + parse) | replay decisions/s | library decisions/s (1 thread) | replay/library |")
print("|---|---:|---:|---:|---:|")
for name, lps, dps in rows:
    print("| %s | %.0f | %.0f | %s | %s |" % (name, lps, dps, "%.0f" % lib if lib else "n/a",
                                             "%.2fx" % (dps / lib) if lib else "n/a"))
print()
print("target: replay decisions/s >= 0.5x the library's single-thread decisions/s (%s keys)." % sys.argv[3])
print("replay decides through the whole engine (match, key composition, verdict) and keeps")
print("per-window and per-key statistics; the library figure is sluice_decide alone.")
print("The cores are shared: compare only within this run.")
EOF
