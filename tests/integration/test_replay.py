# SPDX-License-Identifier: Apache-2.0
"""`sluice replay` decides a recorded trace exactly as `sluice serve` decides the same
arrivals on its test clock, whatever the log format, compression, file split or order
within the reorder window; it counts and reports bad lines without stopping; its report
and suggestions agree with what the trace contains."""
import gzip
import json
import os
import random
import re
import subprocess
import sys
import tempfile

import pytest

from conftest import BIN, SRC, Server

sys.path.insert(0, os.path.join(SRC, "tests", "replay"))
import tracegen  # noqa: E402

CONFIG = os.path.join(SRC, "tests", "replay", "config.yaml")


def replay(*args, check=True, timeout=120):
    r = subprocess.run([BIN, "replay", "-c", CONFIG] + list(args), capture_output=True, text=True,
                       timeout=timeout)
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-3000:]
    if check:
        assert r.returncode == 0, r.stderr
    return r


def replay_json(*args, **kw):
    r = replay("--json", *args, **kw)
    return json.loads(r.stdout), r


@pytest.fixture(scope="module")
def truth():
    """Arrivals and the server's decision for each, computed once for the module."""
    arr = tracegen.arrivals(seed=7)
    s = Server(config_path=CONFIG)
    try:
        dec = tracegen.server_decisions(s, arr)
    finally:
        s.stop()
    s.assert_clean()
    return arr, dec


@pytest.fixture
def tmp():
    with tempfile.TemporaryDirectory(prefix="sluice-replay-") as d:
        yield d


def compare(decisions_path, files, truth_dec):
    """Every request of every file was decided as the server decided it."""
    got = tracegen.read_decisions(decisions_path)
    n = 0
    wrong = []
    for path, index in files:
        base = os.path.basename(path)
        for line, idx in index.items():
            n += 1
            mine = got.get((base, line))
            assert mine is not None, "%s:%d was not replayed" % (base, line)
            if mine != truth_dec[idx]:
                wrong.append((base, line, idx, mine, truth_dec[idx]))
    assert not wrong, "%d of %d decisions differ, first: %r" % (len(wrong), n, wrong[:5])
    assert len(got) == n
    return n


@pytest.mark.parametrize("fmt", ["csv", "json", "envoy", "nginx"])
def test_replay_equals_server(truth, tmp, fmt):
    arr, dec = truth
    rejected = sum(1 for ok, _ in dec if not ok)
    # the trace must exercise the limits for the comparison to mean anything
    assert rejected > 100 and rejected < len(dec) / 2
    assert {p for ok, p in dec if not ok} >= {"api", "login", "search", "plan"}
    path = os.path.join(tmp, "trace." + fmt)
    index = tracegen.write(path, arr, fmt)
    extra = {"envoy": tracegen.ENVOY_MAP, "nginx": ["--log-format", tracegen.NGINX_FORMAT]}.get(fmt, [])
    out = os.path.join(tmp, "decisions.csv")
    rep, _ = replay_json(path, "--decisions", out, *extra)
    assert compare(out, [(path, index)], dec) == len(arr)
    assert rep["input"]["bad"] == 0
    assert rep["totals"]["requests"] == len(arr)
    assert rep["totals"]["rejected"] == rejected
    # nginx writes a line when the request ends: out of arrival order, put back in order
    assert rep["input"]["late"] == 0


def test_combined_format_whole_seconds(tmp):
    arr = tracegen.arrivals(seed=3, seconds=20, whole_seconds=True)
    s = Server(config_path=CONFIG)
    try:
        dec = tracegen.server_decisions(s, arr)
    finally:
        s.stop()
    s.assert_clean()
    path = os.path.join(tmp, "access.log")
    index = tracegen.write(path, arr, "combined")
    out = os.path.join(tmp, "d.csv")
    replay(path, "--decisions", out, *tracegen.COMBINED_MAP)
    compare(out, [(path, index)], dec)
    assert sum(1 for ok, _ in dec if not ok) > 50


def test_mixed_formats_gzip_and_merge(truth, tmp):
    """Three files in three formats (one gzipped), each holding some keys' traffic over the
    whole trace: merged in time order, the decisions are the server's."""
    arr, dec = truth
    parts = {"csv": [], "json": [], "envoy": []}
    names = list(parts)
    for a in arr:
        parts[names[hash((a.key, a.ip)) % 3]].append(a)
    files = []
    for fmt in names:
        path = os.path.join(tmp, "part-%s.log%s" % (fmt, ".gz" if fmt == "json" else ""))
        files.append((path, tracegen.write(path, parts[fmt], fmt, compress=fmt == "json")))
    out = os.path.join(tmp, "d.csv")
    rep, _ = replay_json(*[p for p, _ in files], "--decisions", out, *tracegen.ENVOY_MAP)
    assert [f["format"] for f in rep["files"]] == ["csv", "json", "json"]
    compare(out, files, dec)


def test_unsorted_within_the_reorder_window(truth, tmp):
    arr, dec = truth
    path = os.path.join(tmp, "shuffled.csv")
    index = tracegen.write(path, arr, "csv")
    with open(path) as f:
        lines = f.read().splitlines()
    header, body = lines[0], lines[1:]
    # every line moves by up to ~3 s of traffic
    rnd = random.Random(5)
    keyed = sorted(range(len(body)), key=lambda i: float(body[i].split(",")[0]) + rnd.uniform(0, 3))
    with open(path, "w") as f:
        f.write(header + "\n" + "\n".join(body[i] for i in keyed) + "\n")
    index = {2 + pos: index[2 + i] for pos, i in enumerate(keyed)}
    out = os.path.join(tmp, "d.csv")
    rep, _ = replay_json(path, "--decisions", out, "--reorder", "5s")
    assert rep["input"]["late"] == 0
    compare(out, [(path, index)], dec)
    # beyond the window: replayed at the time reached (never backwards), counted, no abort
    body.reverse()
    with open(path, "w") as f:
        f.write(header + "\n" + "\n".join(body) + "\n")
    rep, r = replay_json(path, "--reorder", "1s")
    assert rep["input"]["late"] > len(body) * 0.9
    assert rep["input"]["max_late_ms"] > 30000
    assert rep["totals"]["requests"] == len(body)
    text = replay(path, "--reorder", "1s").stdout
    assert "out of order beyond --reorder" in text


def test_bad_lines_are_counted_and_shown(tmp):
    arr = tracegen.arrivals(seed=2, seconds=5)
    path = os.path.join(tmp, "mixed.log")
    tracegen.write(path, arr, "json")
    with open(path) as f:
        good = f.read().splitlines()
    secret = "very-secret-api-key"
    bad = [
        "this is not json",
        '{"msec":"1767225601.000","request":"GET / HTTP/1.1","http_x_api_key":"%s"' % secret,  # truncated
        '{"msec":"yesterday","request":"GET / HTTP/1.1"}',
        '{"request":"GET / HTTP/1.1"}',
        "x" * 70000,  # longer than a line may be
        '{"msec":"1767225601.000","request":"\\u0016\\u0003"}',
        "",  # blank lines are not requests and not errors
    ]
    lines = []
    for i, g in enumerate(good):
        lines.append(g)
        if i % 20 == 5 and bad:
            lines.append(bad.pop(0))
    lines.append('{"msec":"1767225609.000","request":"GET /')  # the last line, cut short
    with open(path, "w") as f:
        f.write("\n".join(lines))  # no final newline
    rep, r = replay_json(path)
    assert rep["input"]["bad"] == 7
    assert rep["totals"]["requests"] == len(good)
    shown = [l for l in r.stderr.splitlines() if l.startswith(path + ":")]
    assert len(shown) == 5  # the first five, then only counted
    for l in shown:
        assert re.match(re.escape(path) + r":\d+: \S", l), l
    assert secret not in r.stderr  # lines are personal data: not shown by default
    first_bad = lines.index("this is not json") + 1
    assert shown[0].startswith("%s:%d: " % (path, first_bad))
    r = replay(path, "--show-bad", "2", "--raw-keys")
    shown = [l for l in r.stderr.splitlines() if l.startswith(path + ":")]
    assert len(shown) == 2 and "this is not json" in shown[0] and secret in shown[1]


def test_gzip_truncated_and_missing_files(truth, tmp):
    arr, _ = truth
    path = os.path.join(tmp, "t.csv.gz")
    tracegen.write(path, arr, "csv", compress=True)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    rep, r = replay_json(path, check=False)
    assert r.returncode == 1
    assert "truncated gzip" in r.stderr
    assert rep["input"]["read_errors"] == 1
    assert 0 < rep["totals"]["requests"] < len(arr)  # what was readable was replayed
    r = replay(os.path.join(tmp, "nope.log"), check=False)
    assert r.returncode == 1 and "nope.log" in r.stderr
    r = subprocess.run([BIN, "replay", "-c", CONFIG, "--map", "colour=$x", path], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown attribute" in r.stderr


def test_standard_input(truth, tmp):
    arr, dec = truth
    path = os.path.join(tmp, "t.csv")
    tracegen.write(path, arr, "csv")
    with open(path, "rb") as f:
        r = subprocess.run([BIN, "replay", "-c", CONFIG, "--json", "-"], stdin=f, capture_output=True,
                           timeout=120)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["totals"]["rejected"] == sum(1 for ok, _ in dec if not ok)


def test_peaks_and_suggestion(tmp):
    """Keys that each send one burst at once: the burst a key needs at the bucket's rate
    is its burst size, so the distribution and the suggestion are known exactly."""
    rnd = random.Random(11)
    sizes = [rnd.choice([1, 2, 3, 5, 8, 13, 21, 34]) for _ in range(400)]
    lines = ["time,method,path,client_ip,header.x-api-key"]
    for k, n in enumerate(sizes):
        t = 1767225600 + k * 0.05
        for j in range(n):
            lines.append("%.3f,GET,/search/x,10.9.%d.%d,k%d" % (t + j * 0.0001, k // 250, k % 250, k))
    path = os.path.join(tmp, "bursts.csv")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    rep, _ = replay_json(path, "--suggest", "--target", "5%")
    w = [w for w in rep["windows"] if w["policy"] == "api"][0]
    assert w["peak"]["kind"] == "burst"
    s = sorted(sizes)
    q = lambda p: s[max(0, -(-int(p * 1000) * len(s) // 1000) - 1)]  # noqa: E731
    assert w["keys"] == len(sizes)
    assert w["key_peak"]["max"] == max(sizes)
    assert w["key_peak"]["p50"] == q(0.5)
    assert w["key_peak"]["p90"] == q(0.9)
    over = sum(1 for n in sizes if n > 20)
    assert w["keys_over_limit"] == over
    # exactly the keys over the burst were touched, and only by their excess
    assert w["keys_touched"] == over
    assert w["rejected"] == sum(n - 20 for n in sizes if n > 20)
    # the same keys in a sliding window (search: any 10 s) and an aligned one (plan: the
    # minute): each key's busiest window holds its whole burst
    for name, kind in (("search", "sliding"), ("plan-minute", "aligned")):
        x = [w for w in rep["windows"] if w["window"] == name][0]
        assert x["peak"]["kind"] == kind
        assert x["keys"] == len(sizes)
        assert (x["key_peak"]["p50"], x["key_peak"]["p90"], x["key_peak"]["max"]) == (q(0.5), q(0.9), max(sizes))
    # the least limit with at most 5% of keys above it
    allowed = int(0.05 * len(sizes))
    want = next(v for v in sorted(set(sizes)) if sum(1 for n in sizes if n > v) <= allowed)
    assert w["suggest"]["limit"] == want


def test_text_report_and_key_privacy(truth, tmp):
    arr, _ = truth
    path = os.path.join(tmp, "t.csv")
    tracegen.write(path, arr, "csv")
    out = replay(path, "--suggest").stdout
    for needle in ("per policy and window", "per-key peak", "what each limit did",
                   "most affected keys", "api", "login", "plan-minute", "suggested"):
        assert needle in out, needle
    assert "key-" not in out and "198.51.100." not in out  # keys are hashed by default
    assert re.search(r"k-[0-9a-f]{12}", out)
    raw = replay(path, "--raw-keys").stdout
    assert "header=key-" in raw and "ip=198.51.100." in raw


SANITIZED = "asan" in BIN or "ASAN_OPTIONS" in os.environ
MIN_CONFIG = """store: { type: memory, max_keys: 10000 }
policies:
  - name: api
    key: [client_ip]
    algorithm: token_bucket
    limits: [ { rate: 10/s, burst: 20 } ]
"""


# Runs a command from a small fresh interpreter and prints its peak RSS (wait4): a child
# forked from this test process would count this process's size as its own peak (Linux
# keeps the highest resident size across the exec), which grows with the tests run before.
_PEAK = """import os, sys
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.dup2(w, 1)
    os.execv(sys.argv[1], sys.argv[1:])
os.close(w)
out = b""
while True:
    b = os.read(r, 65536)
    if not b:
        break
    out += b
_, st, ru = os.wait4(pid, 0)
sys.stderr.write("peak_rss_kb=%d\\n" % ru.ru_maxrss)
sys.stdout.buffer.write(out)
"""


def _replay_rss(config, paths):
    """Runs replay --json over paths; (its report, its peak resident size in KiB, stderr)."""
    r = subprocess.run([sys.executable, "-c", _PEAK, BIN, "replay", "--json", "-c", config] + paths,
                       capture_output=True, timeout=300)
    err = r.stderr.decode()
    m = re.search(r"peak_rss_kb=(\d+)", err)
    assert r.returncode == 0 and m, err[-3000:]
    return json.loads(r.stdout), int(m.group(1)), err


def test_many_small_files_in_constant_memory_per_file(tmp):
    """Issue 27: 10,000 one-line files took 834 MB (80 KB each: a 1 MiB buffer, zlib's
    buffers, a 4096-slot FIFO and a layout per file, all held until the end). A file now
    holds a buffer only while it is read; the 10,000 files replay within 50 MB, within
    2 KB a file of the same lines in one file. A time beyond what int64 nanoseconds hold
    (year 9999: it was taken for 1816) is unparsable, counted with the other bad lines."""
    lines = ['10.0.%d.%d - - [01/Jan/2026:00:%02d:%02d +0000] "GET /x HTTP/1.1" 200 1 "-" "-"'
             % (i // 256 % 256, i % 256, i // 60 % 60, i % 60) for i in range(10000)]
    lines[5000] = '10.9.9.9 - - [31/Dec/9999:23:59:59 +0000] "GET /x HTTP/1.1" 200 1 "-" "-"'
    config = os.path.join(tmp, "c.yaml")
    with open(config, "w") as f:
        f.write(MIN_CONFIG)
    paths = []
    for i, line in enumerate(lines):
        paths.append(os.path.join(tmp, "f%05d.log" % i))
        with open(paths[-1], "w") as f:
            f.write(line + "\n")
    one = os.path.join(tmp, "all.log")
    with open(one, "w") as f:
        f.write("\n".join(lines) + "\n")
    rep_one, rss_one, _ = _replay_rss(config, [one])
    rep, rss, err = _replay_rss(config, paths)
    assert "Sanitizer" not in err and "runtime error" not in err, err[-3000:]
    print("10,000 files: %d KiB peak; the same lines in one file: %d KiB" % (rss, rss_one))
    for r in (rep_one, rep):
        assert r["input"]["bad"] == 1, r["input"]  # the year 9999
        assert r["totals"]["requests"] == 9999, r["totals"]
    if not SANITIZED:  # AddressSanitizer holds freed buffers in its quarantine (256 MB)
        assert (rss - rss_one) * 1024 <= 10000 * 2048, (rss, rss_one)
        assert rss <= 50 * 1024, rss
