# SPDX-License-Identifier: Apache-2.0
"""Replay of the reactions that depend on time after the decision, against the server
driven the way a gateway drives it: a concurrency slot is released when the logged request
ended (SL.RELEASE with its token), a delay verdict is held and asked again when the hold
ends, a reserved cost is settled with the logged cost (SL.SETTLE). Same decisions."""
import heapq
import os
import random
import subprocess
import sys
import tempfile

from conftest import BIN, SRC, Server

sys.path.insert(0, os.path.join(SRC, "tests", "replay"))
import tracegen  # noqa: E402

CONFIG = """
policies:
  - name: slots
    objective: protection
    match: { path_prefix: /slow/ }
    key: [header.x-api-key]
    on_missing_key: skip
    algorithm: concurrency
    limits:
      - { max: 3, lease: 30s }
  - name: hooks
    objective: protection
    match: { path_prefix: /hooks/ }
    key: [header.x-api-key]
    on_missing_key: skip
    algorithm: gcra
    limits:
      - { rate: 5/s, burst: 2 }
    on_exceed: { delay: 1s }
  - name: tokens
    objective: cost
    match: { path_prefix: /ai/ }
    key: [header.x-api-key]
    on_missing_key: skip
    cost: { default: 100, settle: true }
    algorithm: token_bucket
    limits:
      - { rate: 1000/min, burst: 1000 }
"""


def arrivals(seed=5, seconds=30):
    rnd = random.Random(seed)
    out = []
    for k in range(4):  # slow requests: up to 6 at once per key, 0.2-2 s each
        t = rnd.randint(0, 500)
        while t < seconds * 1000:
            out.append((t, "/slow/report", "s%d" % k, rnd.randint(200, 2000), 0))
            t += rnd.randint(50, 400)
    for k in range(3):  # webhooks in bursts: held, then admitted (or held 16 times: refused)
        for b in range(6):
            at = rnd.randint(0, seconds * 1000 - 1000)
            for j in range(30 if (k, b) == (0, 0) else rnd.randint(3, 12)):
                out.append((at + j * 20, "/hooks/deliver", "h%d" % k, 5, 0))
    for k in range(3):  # AI calls reserving 100 tokens, costing 20-400
        t = rnd.randint(0, 300)
        while t < seconds * 1000:
            out.append((t, "/ai/complete", "a%d" % k, 50, rnd.randint(20, 400)))
            t += rnd.randint(20, 150)
    out.sort()
    res, last = [], -1
    for t, path, key, dur, cost in out:  # distinct whole milliseconds
        t = max(t, last + 1)
        last = t
        res.append((t, path, key, dur, cost))
    return res


def server_truth(server, arr):
    """Drives the server as a gateway would, in time order: releases and held requests
    due at a time go before new arrivals at that time (as replay does)."""
    c = server.resp()
    ev = []  # (time, order, kind, payload)
    for i, a in enumerate(arr):
        heapq.heappush(ev, (a[0], 2, i, "arrive", 0))
    result = [None] * len(arr)
    held = [0] * len(arr)
    rechecks = [0] * len(arr)
    try:
        while ev:
            t, order, i, kind, token = heapq.heappop(ev)
            assert isinstance(c.command("SL.CLOCK", "SET", tracegen.T0_MS + t), int)
            if kind == "release":
                c.command("SL.RELEASE", token)
                continue
            _, path, key, dur, cost = arr[i]
            r = c.command("SL.CHECKREQ", "METHOD", "POST", "PATH", path, "HEADER", "x-api-key", key)
            d = {r[j].decode(): r[j + 1] for j in range(0, len(r), 2)}
            action = d["action"].decode()
            if action in ("delay", "recheck") and path.startswith("/hooks/") and rechecks[i] < 16:
                # a "wait and ask again" verdict: nothing consumed; the gateway holds it
                rechecks[i] += 1
                held[i] += d["delay_ms"]
                heapq.heappush(ev, (t + d["delay_ms"], 1, i, "recheck", 0))
                continue
            ok = d["allowed"] == 1 and action not in ("delay", "recheck")
            pol = d["policy"].decode() if d["policy"] else ""
            result[i] = (ok, pol, held[i] if ok else 0)
            tok = d["token"]
            if ok and tok and path.startswith("/slow/"):
                heapq.heappush(ev, (t + dur, 0, i, "release", tok))
            if ok and tok and path.startswith("/ai/"):
                c.command("SL.SETTLE", tok, cost)
    finally:
        c.close()
    return result


def test_reactions_match_the_server():
    d = tempfile.mkdtemp(prefix="sluice-react-")
    cfg = os.path.join(d, "c.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    arr = arrivals()
    s = Server(config_path=cfg)
    try:
        truth = server_truth(s, arr)
    finally:
        s.stop()
    s.assert_clean()
    trace = os.path.join(d, "t.csv")
    with open(trace, "w") as f:
        f.write("time,method,path,client_ip,header.x-api-key,duration,cost\n")
        for t, path, key, dur, cost in arr:
            f.write("%.3f,POST,%s,10.0.0.1,%s,%d,%s\n" % ((tracegen.T0_MS + t) / 1000.0, path, key, dur,
                                                        cost if cost else ""))
    out = os.path.join(d, "dec.csv")
    r = subprocess.run([BIN, "replay", "-c", cfg, trace, "--decisions", out, "--json"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = {}
    with open(out) as f:
        f.readline()
        for row in f:
            _, _, line, outcome, pol, delay = row.strip().split(",")
            got[int(line) - 2] = (outcome in ("admitted", "delayed"), pol, int(delay) if outcome == "delayed" else 0)
    wrong = [(i, arr[i], got.get(i), truth[i]) for i in range(len(arr)) if got.get(i) != truth[i]]
    assert not wrong, "%d of %d differ, first: %r" % (len(wrong), len(arr), wrong[:5])
    # the trace exercised every reaction
    assert any(not ok and p == "slots" for ok, p, _ in truth)
    assert any(ok and h > 0 for ok, p, h in truth)            # held, then admitted
    assert any(not ok and p == "hooks" for ok, p, _ in truth)  # held 16 times: refused
    assert any(not ok and p == "tokens" for ok, p, _ in truth)
    import json
    rep = json.loads(r.stdout)
    assert rep["totals"]["settled"] == sum(1 for (ok, _, _), a in zip(truth, arr) if ok and a[1].startswith("/ai/"))
    assert rep["totals"]["released"] > 0
    slots = [w for w in rep["windows"] if w["policy"] == "slots"][0]
    assert slots["peak"]["kind"] == "in_flight" and slots["key_peak"]["max"] >= 4
