# SPDX-License-Identifier: Apache-2.0
"""A 1 GB access log, generated on the fly and streamed through a pipe, replays in bounded
memory: the resident size of `sluice replay` stays under a ceiling, and stops growing once
its buffers and tables are full (the log is never loaded whole, per-key statistics are
capped): the peak over the whole log is within a few percent of the peak over its first
40 %. Under AddressSanitizer (much slower, larger allocations) 256 MB are streamed with a
small quarantine and a higher ceiling; the property checked is the same."""
import os
import re
import subprocess
import threading
import time

from conftest import BIN, SRC

CONFIG = os.path.join(SRC, "tests", "replay", "large.yaml")
SANITIZED = "asan" in BIN or "ASAN_OPTIONS" in os.environ
TARGET_BYTES = (256 if SANITIZED else 1024) << 20
RSS_CEILING_KB = (450 if SANITIZED else 260) * 1024
LINES_PER_SECOND = 20000
DISTINCT_CLIENTS = 300000


def _template(variant):
    """One second of traffic in nginx's combined format with the time as a placeholder:
    each second is a bytes.replace of it, fast enough to feed replay at full speed."""
    lines = []
    for i in range(LINES_PER_SECOND):
        n = (variant * LINES_PER_SECOND + i * 7919) % DISTINCT_CLIENTS
        ip = "10.%d.%d.%d" % (n >> 16 & 255, n >> 8 & 255, n & 255)
        method, path = ("POST", "/login") if i % 97 == 0 else ("GET", "/v1/items/%d" % (i % 1000))
        if i % 13 == 0:
            path = "/search?q=%d" % i
        lines.append('%s - u%d [@@TIME@@] "%s %s HTTP/1.1" 200 %d "-" "load/1.0 (#%d)"'
                     % (ip, n, method, path, 100 + i % 900, i % 50))
    return ("\n".join(lines) + "\n").encode()


def _feed(pipe, written, stop_at):
    try:
        templates = [_template(v) for v in range(16)]
        sec = 1767225600
        while written[0] < stop_at:
            tl = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(sec)).encode()
            block = templates[sec % 16].replace(b"@@TIME@@", tl)
            pipe.write(block)
            written[0] += len(block)
            written[1] += LINES_PER_SECOND
            sec += 1
    except BrokenPipeError:
        pass
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def test_gigabyte_log_in_bounded_memory():
    env = dict(os.environ)
    if SANITIZED:  # ASan's quarantine of freed memory would grow on its own: keep it small
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=16"
    proc = subprocess.Popen([BIN, "replay", "-c", CONFIG, "--map", "header.x-api-key=$remote_user",
                             "--max-keys", "200000", "--json", "-"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    written = [0, 0]
    feeder = threading.Thread(target=_feed, args=(proc.stdin, written, TARGET_BYTES), daemon=True)
    start = time.time()
    feeder.start()
    # stdout is small (the report); read it while the feeder writes
    out_box = {}
    reader = threading.Thread(target=lambda: out_box.update(out=proc.stdout.read(), err=proc.stderr.read()),
                              daemon=True)
    reader.start()
    deadline = start + 480
    usage = None
    samples = []  # (bytes written so far, resident KB)
    while True:
        try:
            with open("/proc/%d/status" % proc.pid) as f:
                rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
            samples.append((written[0], rss))
        except (OSError, AttributeError):
            pass
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # rusage of this child alone
        if pid != 0:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.time() > deadline:
            proc.kill()
            proc.wait(10)
            raise AssertionError("replay of %d MB did not finish within 480 s" % (written[0] >> 20))
        time.sleep(0.2)
    feeder.join(10)
    reader.join(10)
    err = out_box.get("err", b"").decode(errors="replace")
    assert "Sanitizer" not in err, err[-3000:]
    assert proc.returncode == 0, err[-3000:]
    import json
    rep = json.loads(out_box["out"])
    assert written[0] >= TARGET_BYTES
    assert rep["input"]["lines"] == written[1]
    assert rep["input"]["bad"] == 0
    assert rep["totals"]["requests"] == written[1]
    assert rep["input"]["bytes"] == written[0]
    # the key statistics were capped, not grown without bound
    assert rep["totals"]["keys_evicted"] > 0
    assert rep["input"]["reorder_peak_bytes"] <= (64 << 20) + 70000  # its cap, plus the line that crossed it
    rss_kb = usage.ru_maxrss
    assert rss_kb < RSS_CEILING_KB, "peak RSS %d MB for a %d MB log" % (rss_kb >> 10, written[0] >> 20)
    early = [kb for w, kb in samples if w <= TARGET_BYTES * 0.4]
    late = [kb for w, kb in samples if w >= TARGET_BYTES * 0.9]
    assert len(early) > 5 and late, (len(samples), len(early))
    assert max(late) <= max(early) * 1.05 + 16 * 1024, \
        "still growing: %d MB in the first 40 %%, %d MB at the end" % (max(early) >> 10, max(late) >> 10)
    elapsed = time.time() - start
    print("replayed %d MB (%d lines) in %.1f s, peak RSS %d MB (%d MB in the first 40 %%)"
          % (written[0] >> 20, written[1], elapsed, rss_kb >> 10, max(early) >> 10))
