# SPDX-License-Identifier: Apache-2.0
"""Limits that hold, through the real server (issue 12): a key flood does not reset an
exhausted victim; a clock stepped back an hour does not lock a user out for an hour; a
damaged snapshot is never silently replaced by an empty store (refused by default, moved
aside with on_damaged: start_empty, counted, logged and shown by /readyz); snapshot write
failures are metrics and readiness with the system's error; `config check` reports what
the server would refuse; the test clock refuses values outside its range."""
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time

import requests

from conftest import BIN, Server, as_dict, free_port


def metric(text, name, **labels):
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, val = line.rpartition(" ")
        if head.split("{")[0] != name:
            continue
        if all('%s="%s"' % (k, v) in head for k, v in labels.items()):
            return float(val)
    return None


def pipeline(port, commands, chunk=2000):
    """Pipelined RESP commands; returns the number of replies read (one line each here)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    got = 0
    try:
        for i in range(0, len(commands), chunk):
            part = commands[i:i + chunk]
            out = bytearray()
            for args in part:
                out += b"*%d\r\n" % len(args)
                for a in args:
                    a = str(a).encode()
                    out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            # each SL.CHECK reply is a map/array ending with the token field: count the
            # top-level replies by reading until the server is idle (bounded in time)
            want = got + len(part)
            buf = b""
            deadline = time.time() + 30
            while got < want and time.time() < deadline:
                data = s.recv(1 << 20)
                if not data:
                    break
                buf += data
                got = want if buf.count(b"allowed") >= len(part) else got
    finally:
        s.close()
    return got


FLOOD = """
workers: 1
store: { type: memory, max_keys: 2000, shards: 16 }
policies:
  - name: reset
    objective: security
    key: [header.x-account]
    algorithm: fixed_window
    limits: [ { rate: 3/h } ]
  - name: browse
    objective: fairness
    key: [header.x-visitor]
    algorithm: gcra
    limits: [ { rate: 10/s, burst: 10 } ]
"""


def test_a_key_flood_does_not_reset_an_exhausted_victim():
    """The victim spends her 3/h; an attacker then rotates 60,000 fresh keys through a
    store of 2,000 (30 times its size, on both policies); she is still refused."""
    s = Server(config_text=FLOOD, test_clock=True, workers=1)
    try:
        c = s.resp()
        got = [as_dict(c.command("SL.CHECK", "reset", "alice"))["allowed"] for _ in range(5)]
        assert got == [1, 1, 1, 0, 0], got
        c.close()
        rnd = random.Random(7)
        keys = ["rot-%d" % rnd.randrange(1 << 40) for _ in range(60000)]
        cmds = [("SL.CHECK", "reset" if i % 2 else "browse", k) for i, k in enumerate(keys)]
        t0 = time.time()
        pipeline(s.resp_port, cmds)
        took = time.time() - t0
        c = s.resp()
        after = as_dict(c.command("SL.CHECK", "reset", "alice"))
        c.close()
        m = requests.get(s.admin + "/metrics", timeout=5).text
        lru = metric(m, "sluice_evictions_total", policy="reset", kind="lru") or 0
        lru_b = metric(m, "sluice_evictions_total", policy="browse", kind="lru") or 0
        print("flood: 60,000 keys into max_keys 2,000 in %.1f s: victim still refused (remaining %d, "
              "retry %d ms); live evictions reset=%d browse=%d"
              % (took, after["remaining"], after.get("retry_after_ms", -1), lru, lru_b))
        assert after["allowed"] == 0 and after["remaining"] == 0, after
        assert lru + lru_b > 10000  # the flood did push keys out: the store was under pressure
    finally:
        s.stop()
    s.assert_clean()


STEP = """
workers: 1
policies:
  - name: fw
    objective: security
    key: [header.x-k]
    algorithm: fixed_window
    limits: [ { rate: 5/min } ]
  - name: sw
    objective: security
    key: [header.x-k]
    algorithm: sliding_window
    limits: [ { rate: 5/min } ]
"""


def test_a_clock_stepped_back_an_hour_locks_nobody_out_for_an_hour():
    s = Server(config_text=STEP, test_clock=True, workers=1)
    try:
        c = s.resp()
        now = c.command("SL.CLOCK", "GET")
        worst = {}
        for pol in ("fw", "sw"):
            for _ in range(6):
                d = as_dict(c.command("SL.CHECK", pol, "u"))
            assert d["allowed"] == 0
        assert isinstance(c.command("SL.CLOCK", "SET", now - 3600 * 1000), int)  # NTP steps back 1 h
        # no longer than its own window plus a second from here (a sliding window's estimate
        # may need one more slice of W/limit: docs/algorithms.md, "Time that steps")
        bound = {"fw": 61000, "sw": 60000 + 12000 + 1000}
        for pol in ("fw", "sw"):
            d = as_dict(c.command("SL.CHECK", pol, "u"))
            worst[pol] = d.get("retry_after_ms", 0)
            assert d["allowed"] == 1 or worst[pol] <= bound[pol], (pol, d)
        print("after a one-hour backward step: retry-after fixed_window %d ms (bound 61,000), "
              "sliding_window %d ms (bound 73,000); before the fix 3,630,000" % (worst["fw"], worst["sw"]))
        c.close()
    finally:
        s.stop()
    s.assert_clean()


def test_a_clock_stepped_back_an_hour_locks_nobody_out_on_redis(redis):
    """The same step with the Redis store, where the script decides: the retry-after the
    answer gives must be enough (the script kept a window from the future in force, and
    refused for an hour what the answer said would pass within a minute)."""
    s = Server(config_text=STEP, test_clock=True, workers=1,
               extra=["--store", "redis://127.0.0.1:%d?time=local&timeout_ms=2000" % redis.port])
    try:
        c = s.resp()
        now = c.command("SL.CLOCK", "GET")
        for pol in ("fw", "sw"):
            for _ in range(6):
                d = as_dict(c.command("SL.CHECK", pol, "u"))
            assert d["allowed"] == 0, d
        assert isinstance(c.command("SL.CLOCK", "SET", now - 3600 * 1000), int)
        bound = {"fw": 61000, "sw": 73000}
        for pol in ("fw", "sw"):
            waited = 0
            for _ in range(5):  # bounded: each answer's retry-after, then ask again
                d = as_dict(c.command("SL.CHECK", pol, "u"))
                if d["allowed"] == 1:
                    break
                wait = max(1, d.get("retry_after_ms", 0))
                waited += wait
                assert waited <= bound[pol], (pol, waited, d)
                c.command("SL.CLOCK", "ADVANCE", wait)
            assert d["allowed"] == 1, (pol, waited, d)
        c.close()
    finally:
        s.stop()
    s.assert_clean()


STEP_ALL = """
workers: 1
policies:
  - name: tb
    key: [header.x-k]
    algorithm: token_bucket
    limits: [ { rate: 5/min, burst: 5 } ]
  - name: lk
    key: [header.x-k]
    algorithm: leaky_bucket
    limits: [ { rate: 5/min, burst: 5 } ]
  - name: log
    key: [header.x-k]
    algorithm: sliding_log
    limits: [ { rate: 5/min } ]
  - name: cc
    key: [header.x-k]
    algorithm: concurrency
    limits: [ { max: 2, lease: 30s } ]
  - name: pen
    key: [header.x-k]
    algorithm: fixed_window
    limits: [ { rate: 5/10s } ]
    on_exceed:
      penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h }
  - name: gc
    key: [header.x-k]
    algorithm: gcra
    limits: [ { rate: 5/s, burst: 5 } ]
"""


def test_every_algorithm_on_redis_waits_at_most_its_own_window_after_a_step_back(redis):
    """After a one-hour backward step of the scripts' clock (time=local: the instances'
    wall clock), a key limited before the step waits at most its own window: a bucket its
    refill, a log its window, leases their lifetime, a penalty its block, GCRA one emission
    interval (its TAT read back from the key's TTL, on Redis's own clock, which the test
    lets run in real time beside the test clock); and each
    retry-after tells the truth (waiting it out is enough, or one more short wait). Before
    the fix, every one of these waited the step's hour more."""
    s = Server(config_text=STEP_ALL, test_clock=True, workers=1,
               extra=["--store", "redis://127.0.0.1:%d?time=local&timeout_ms=2000" % redis.port])
    bound = {"tb": 12000 + 1000, "lk": 12000 + 1000, "log": 60000 + 1000,
             "cc": 30000 + 2 * 6000 + 1000, "pen": 60000 + 10000 + 1000, "gc": 200 + 100}
    cmd = {"cc": "SL.ACQUIRE"}
    try:
        c = s.resp()
        waits = {}
        for pol in bound:  # each on its own: one's wait moves the clock for all
            op = cmd.get(pol, "SL.CHECK")
            for _ in range(7):
                d = as_dict(c.command(op, pol, "u"))
            assert d["allowed"] == 0, (pol, d)
            now = c.command("SL.CLOCK", "GET")
            assert isinstance(c.command("SL.CLOCK", "SET", now - 3600 * 1000), int)
            waited = 0
            for _ in range(6):  # bounded: each answer's retry-after, then ask again
                d = as_dict(c.command(op, pol, "u"))
                if d["allowed"] == 1:
                    break
                wait = max(1, d.get("retry_after_ms", 0))
                waited += wait
                if pol == "gc":  # the correction reads the key's TTL: Redis's clock must move too
                    time.sleep(min(wait, 2000) / 1000.0)
                c.command("SL.CLOCK", "ADVANCE", wait)
            waits[pol] = (waited, d["allowed"])
        print("after a one-hour backward step on Redis, waited (ms): %s" %
              ", ".join("%s %d%s" % (p, w, "" if a else " (still refused)") for p, (w, a) in waits.items()))
        for pol, b in bound.items():
            waited, allowed = waits[pol]
            assert allowed == 1 and waited <= b, (pol, waited, b)
        c.close()
    finally:
        s.stop()
    s.assert_clean()


def test_the_test_clock_refuses_values_out_of_range():
    s = Server(config_text=STEP, test_clock=True, workers=1)
    try:
        c = s.resp()
        before = c.command("SL.CLOCK", "GET")
        r = c.command("SL.CLOCK", "SET", 9223372036855)
        assert str(r).startswith("ERR out of range"), r
        r = c.command("SL.CLOCK", "SET", -1)
        assert str(r).startswith("ERR out of range"), r
        assert c.command("SL.CLOCK", "GET") == before  # nothing moved
        c.close()
        r = requests.post(s.admin + "/v1/clock", json={"set_ms": 9223372036855}, timeout=5)
        assert r.status_code == 400 and "2200" in r.text, r.text
        r = requests.post(s.admin + "/v1/clock", json={"advance_ms": 9223372036854775}, timeout=5)
        assert r.status_code == 400, r.text
    finally:
        s.stop()
    s.assert_clean()


SNAP = """
workers: 1
store:
  type: memory
  snapshot: { path: %(path)s, every: %(every)s%(extra)s }
policies:
  - name: q
    objective: cost
    key: [header.x-k]
    algorithm: quota
    limits: [ { quota: 10/day } ]
"""


def snap_config(path, every="1h", on_damaged=None):
    extra = ", on_damaged: %s" % on_damaged if on_damaged else ""
    return SNAP % {"path": path, "every": every, "extra": extra}


def start(cfg_text, tmp_path):
    """sluice serve on cfg_text; (process or None, its output) -- None when it exited."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(cfg_text)
    ports = [free_port() for _ in range(3)]
    args = [BIN, "serve", "-c", str(cfg), "--http", "127.0.0.1:%d" % ports[0], "--resp",
            "127.0.0.1:%d" % ports[1], "--admin", "127.0.0.1:%d" % ports[2], "--grpc", "off"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=5)
        return None, out, p.returncode
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=15)
        return p, out, p.returncode


def spend(tmp_path, n):
    """Runs a server on a fresh snapshot, spends n units of key k, stops (final snapshot)."""
    path = tmp_path / "state.snap"
    s = Server(config_text=snap_config(path), test_clock=False, workers=1)
    try:
        c = s.resp()
        for _ in range(n):
            assert as_dict(c.command("SL.CHECK", "q", "k"))["allowed"] == 1
        c.close()
    finally:
        s.stop()
    s.assert_clean()
    return path


def test_a_damaged_snapshot_stops_the_start_and_is_left_in_place(tmp_path):
    path = spend(tmp_path, 7)
    data = path.read_bytes()
    for name, damaged in (("truncated", data[:len(data) // 2]), ("bit flip", data[:40] + bytes([data[40] ^ 1]) +
                                                                   data[41:]), ("foreign", b"{\"hello\": 1}\n")):
        path.write_bytes(damaged)
        proc, out, code = start(snap_config(path), tmp_path)
        assert proc is None and code == 1, (name, out)
        assert "is damaged" in out and "not starting" in out and "on_damaged" in out, (name, out)
        assert path.read_bytes() == damaged, name  # neither moved nor overwritten
        print("%s: %s" % (name, out.strip().splitlines()[-1]))
        # config check says the same, with the place in the file
        r = subprocess.run([BIN, "config", "check", str(tmp_path / "c.yaml")], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 1 and re.search(r"c\.yaml:\d+:\d+: the snapshot .* is damaged", r.stderr), r.stderr


def test_start_empty_moves_it_aside_and_says_so(tmp_path):
    path = spend(tmp_path, 7)
    data = path.read_bytes()
    path.write_bytes(data[:-9])  # truncated
    s = Server(config_text=snap_config(path, on_damaged="start_empty"), test_clock=False, workers=1)
    try:
        aside = [f for f in os.listdir(tmp_path) if f.startswith("state.snap.damaged-")]
        assert len(aside) == 1, os.listdir(tmp_path)
        assert (tmp_path / aside[0]).read_bytes() == data[:-9]  # kept for examination
        r = requests.get(s.admin + "/readyz", timeout=5)
        assert r.status_code == 200 and r.text.startswith("degraded"), r.text
        assert "started with no state" in r.text and aside[0] in r.text, r.text
        m = requests.get(s.admin + "/metrics", timeout=5).text
        assert metric(m, "sluice_snapshot_damaged_total") == 1
        assert metric(m, "sluice_snapshot_started_empty") == 1
        assert "snapshot damaged" in s.output() and aside[0] in s.output()
    finally:
        s.stop()
    s.assert_clean()


def test_an_intact_snapshot_restores_the_spent_quota(tmp_path):
    path = spend(tmp_path, 7)
    s = Server(config_text=snap_config(path), test_clock=False, workers=1)
    try:
        c = s.resp()
        d = as_dict(c.command("SL.CHECK", "q", "k"))
        assert d["allowed"] == 1 and d["remaining"] == 2, d  # 7 + 1 of 10 spent
        c.close()
        assert requests.get(s.admin + "/readyz", timeout=5).text == "ready\n"
    finally:
        s.stop()
    s.assert_clean()


def test_write_failures_are_counted_and_shown_with_the_system_error(tmp_path):
    d = tmp_path / "snaps"
    d.mkdir()
    path = d / "state.snap"
    s = Server(config_text=snap_config(path, every="200ms"), test_clock=False, workers=1)
    try:
        c = s.resp()
        c.command("SL.CHECK", "q", "k")
        c.close()
        shutil.rmtree(d)  # the directory goes away under the running server

        def failing():
            m = requests.get(s.admin + "/metrics", timeout=5).text
            return (metric(m, "sluice_snapshot_writes_total", outcome="failed") or 0) >= 1

        deadline = time.time() + 10
        while not failing() and time.time() < deadline:
            time.sleep(0.1)
        assert failing()
        r = requests.get(s.admin + "/readyz", timeout=5)
        assert r.status_code == 200 and "snapshot: the last write failed" in r.text, r.text
        assert "No such file or directory" in r.text, r.text
        print("readyz while failing: %r" % r.text)
        d.mkdir()  # fixed: the next write succeeds and readiness is clean again
        deadline = time.time() + 10
        while requests.get(s.admin + "/readyz", timeout=5).text != "ready\n" and time.time() < deadline:
            time.sleep(0.1)
        assert requests.get(s.admin + "/readyz", timeout=5).text == "ready\n"
        assert path.exists()
        out = s.output()
        assert "snapshot_failed" in out and "snapshot_recovered" in out, out
    finally:
        s.stop()
    s.assert_clean()


def test_config_check_reports_a_snapshot_directory_it_cannot_write(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(snap_config(tmp_path / "missing" / "state.snap"))
    r = subprocess.run([BIN, "config", "check", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert re.search(r"c\.yaml:5:\d+: snapshots cannot be written at .*No such file or directory", r.stderr), r.stderr
    # and serve refuses to start rather than failing every interval
    proc, out, code = start(cfg.read_text(), tmp_path)
    assert proc is None and code == 1 and "cannot be written" in out, out


def test_config_check_warns_when_a_policy_needs_the_gateway_to_finish(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("""
policies:
  - name: slots
    objective: protection
    key: [header.x-k]
    algorithm: concurrency
    limits: [ { max: 3, lease: 30s } ]
  - name: plain
    objective: fairness
    key: [header.x-k]
    algorithm: gcra
    limits: [ { rate: 10/s } ]
""")
    r = subprocess.run([BIN, "config", "check", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    warn = [l for l in r.stderr.splitlines() if "warning" in l]
    assert len(warn) == 1 and "c.yaml:3:" in warn[0] and "/v1/finish" in warn[0] and "rate" in warn[0], r.stderr


SHARE = """
workers: 1
store: { type: memory, max_keys: 1000, on_full: evict_lru, shards: 4 }
policies:
  - name: daily
    objective: fairness
    key: [header.x-k]
    algorithm: quota
    limits: [ { quota: 100/day } ]
  - name: other
    objective: fairness
    key: [header.x-u]
    algorithm: token_bucket
    limits: [ { rate: 1/min, burst: 5 } ]
"""


def test_a_flood_on_one_policy_leaves_room_for_another():
    """5,000 keys flood `daily` in a 1,000-key store; then 50 users of `other`, 7
    requests each, are limited by `other` itself (5 each), never failed open for lack of
    room (the store gives each policy holding keys a share, newcomers included)."""
    s = Server(config_text=SHARE, test_clock=True, workers=1)
    try:
        pipeline(s.resp_port, [("SL.CHECK", "daily", "d%d" % i) for i in range(5000)])
        c = s.resp()
        got = [as_dict(c.command("SL.CHECK", "other", "u%d" % (i // 7)))["allowed"] for i in range(350)]
        c.close()
        m = requests.get(s.admin + "/metrics", timeout=5).text
        fail_open = metric(m, "sluice_decisions_total", policy="other", result="fail_open") or 0
        refused = metric(m, "sluice_evictions_total", policy="other", kind="refused") or 0
        print("after the flood: other admitted %d of 350 (limit 250), fail_open %d, refused %d"
              % (sum(got), fail_open, refused))
        assert sum(got) == 250 and fail_open == 0 and refused == 0, (sum(got), fail_open, refused)
    finally:
        s.stop()
    s.assert_clean()
