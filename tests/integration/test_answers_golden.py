# SPDX-License-Identifier: Apache-2.0
"""The recorded answers (issue 25, "behaviour unchanged"): a fixed script of requests on
every protocol (HTTP /v1/check named and by attributes, /v1/auth, RESP SL.CHECK / SL.PEEK /
CL.THROTTLE, gRPC ShouldRateLimit) and every action (allow, reject, shadow, delay and
recheck, penalty and challenge, concurrency, missing key, store-independent errors) on the
test clock, each answer's exact bytes compared with golden/answers.txt. Only the Date
header and sealed tokens (random per process) are masked.

Re-record (only when an answer changes on purpose, naming the change in CHANGELOG.md):
  SLUICE_GOLDEN_RECORD=1 pytest test_answers_golden.py
"""
import os
import re
import socket

import pytest

from conftest import Client

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "answers.txt")
START_MS = 1767225600000  # 2026-01-01 00:00:00 UTC
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

CONFIG = """
workers: 1
store: { type: memory, max_keys: 10000 }
policies:
  - name: two
    match: { path_prefix: /two/ }
    key: [header.x-k]
    on_missing_key: skip
    algorithm: fixed_window
    limits:
      - { name: two-10s, rate: 3/10s }
      - { name: two-1m, rate: 5/m }
  - name: shd
    match: { path_prefix: /shd/ }
    key: [header.x-k]
    on_missing_key: skip
    algorithm: fixed_window
    limits: [ { rate: 1/10s } ]
    on_exceed: shadow
  - name: dly
    match: { path_prefix: /dly/ }
    key: [header.x-k]
    on_missing_key: skip
    algorithm: gcra
    limits: [ { rate: 1/s, burst: 1 } ]
    on_exceed: { delay: 2s }
  - name: pen
    match: { path_prefix: /pen/ }
    key: [header.x-k]
    on_missing_key: skip
    algorithm: fixed_window
    limits: [ { rate: 2/10s } ]
    on_exceed:
      penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h }
  - name: conc
    match: { path_prefix: /conc/ }
    key: [header.x-k]
    on_missing_key: skip
    algorithm: concurrency
    limits: [ { max: 1, lease: 30s } ]
  - name: need
    match: { path_prefix: /need/ }
    key: [header.x-need]
    algorithm: token_bucket
    limits: [ { rate: 10/s, burst: 10 } ]
  - name: tb
    match: { path_prefix: /tb/ }
    key: [header.x-k]
    on_missing_key: skip
    algorithm: token_bucket
    limits: [ { rate: 1/s, burst: 3 } ]
  - name: lky
    match: { path_prefix: /lky/ }
    key: [header.x-k]
    on_missing_key: skip
    algorithm: leaky_bucket
    limits: [ { rate: 2/s, burst: 1, max_delay: 1s } ]
  - name: cst
    match: { path_prefix: /ai/ }
    key: [header.x-k]
    on_missing_key: skip
    cost: { default: 100, settle: true }
    algorithm: token_bucket
    limits: [ { rate: 1/h, burst: 250 } ]
  - name: edge
    match: { domain: edge }
    key: [descriptor.k]
    algorithm: fixed_window
    limits: [ { rate: 2/10s } ]
"""

TOKEN = re.compile(rb"(X-Sluice-Token: |\"token\":\"|token\r\n\$\d+\r\n)[A-Za-z0-9_\-.=:]+")
DATE = re.compile(rb"Date: [^\r]*\r\n")


def mask(b):
    b = DATE.sub(b"Date: -\r\n", b)
    b = re.sub(rb"(\$2\r\nid\r\n:)\d+", rb"\1-", b)  # HELLO's connection id
    return TOKEN.sub(lambda m: m.group(1) + b"<token>", b)


def http_raw(port, method, path, headers=(), body=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    req = b"%s %s HTTP/1.1\r\nHost: t\r\n" % (method.encode(), path.encode())
    for k, v in headers:
        req += b"%s: %s\r\n" % (k.encode(), v.encode())
    if body or method == "POST":
        req += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    req += b"Connection: close\r\n\r\n" + body
    s.sendall(req)
    out = b""
    while True:
        ch = s.recv(65536)
        if not ch:
            break
        out += ch
    s.close()
    return out


def resp_raw(port, *cmds, pipeline=False):
    """Sends each command on one connection (all at once with `pipeline`) and returns the
    raw bytes of each reply (read by a minimal RESP2 parser that keeps the bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    f = s.makefile("rb")
    out = []

    def one():
        line = f.readline()
        buf = line
        t, rest = line[:1], line[1:-2]
        if t in (b"$",) and int(rest) >= 0:
            buf += f.read(int(rest) + 2)
        elif t in (b"*", b"%") and int(rest) >= 0:
            for _ in range(int(rest) * (2 if t == b"%" else 1)):
                buf += one()
        return buf

    def enc(c):
        data = b"*%d\r\n" % len(c)
        for a in c:
            a = a if isinstance(a, bytes) else str(a).encode()
            data += b"$%d\r\n%s\r\n" % (len(a), a)
        return data

    if pipeline:
        s.sendall(b"".join(enc(c) for c in cmds))
        out = [one() for _ in cmds]
    for c in cmds if not pipeline else ():
        s.sendall(enc(c))
        out.append(one())
    s.close()
    return out


class Rec:
    def __init__(self):
        self.lines = []

    def add(self, label, data):
        self.lines.append(b"### " + label.encode() + b"\n" + mask(data) + b"\n")


def script(srv, pb):
    rec = Rec()
    h = srv.http_port

    def check(label, obj):
        import json
        rec.add("check " + label, http_raw(h, "POST", "/v1/check", body=json.dumps(obj).encode()))

    def auth(label, uri, hdrs=(), q=""):
        rec.add("auth " + label, http_raw(h, "GET", "/v1/auth" + q,
                                          [("X-Original-URI", uri)] + list(hdrs)))

    srv.clock_set(START_MS)
    # allow, then reject on the short window (two windows: which one decides)
    for i in range(4):
        check("two named %d" % i, {"policy": "two", "key": "a"})
    for i in range(4):
        auth("two %d" % i, "/two/x", [("X-K", "b"), ("traceparent", TP)])
    auth("two deny-status 403", "/two/x", [("X-K", "b")], "?status=403")
    rec.add("auth two HEAD", http_raw(h, "HEAD", "/v1/auth", [("X-Original-URI", "/two/x"), ("X-K", "b")]))
    for i in range(4):
        check("two attrs %d" % i, {"request": {"method": "GET", "path": "/two/y", "headers": {"x-k": "c"}}})
    # shadow
    for i in range(3):
        check("shd named %d" % i, {"policy": "shd", "key": "a"})
        auth("shd %d" % i, "/shd/", [("X-K", "b")])
    # delay: gcra with on_exceed delay (recheck)
    for i in range(3):
        check("dly named %d" % i, {"policy": "dly", "key": "a"})
        auth("dly %d" % i, "/dly/", [("X-K", "b")])
    # token bucket, cost
    check("tb cost 2", {"policy": "tb", "key": "a", "cost": 2})
    check("tb cost 5", {"policy": "tb", "key": "a", "cost": 5})
    check("tb cost 1", {"policy": "tb", "key": "a", "cost": 1})
    # shaping (admitted with a delay) and settle tokens
    for i in range(4):
        check("lky named %d" % i, {"policy": "lky", "key": "a"})
    for i in range(3):
        check("cst attrs %d" % i, {"request": {"path": "/ai/x", "headers": {"x-k": "a"}}})
        auth("cst %d" % i, "/ai/x", [("X-K", "b")])
    # penalty
    for i in range(5):
        check("pen named %d" % i, {"policy": "pen", "key": "a"})
        auth("pen %d" % i, "/pen/", [("X-K", "b")])
    # concurrency: acquire, refuse, release
    check("conc acquire 1", {"policy": "conc", "key": "a"})
    check("conc acquire 2", {"policy": "conc", "key": "a"})
    auth("conc 1", "/conc/", [("X-K", "b")])
    auth("conc 2", "/conc/", [("X-K", "b")])
    # missing key, errors
    auth("need missing", "/need/", [])
    check("need missing", {"request": {"path": "/need/"}})
    auth("need present", "/need/", [("X-Need", "z")])
    check("unknown policy", {"policy": "nosuch", "key": "a"})
    check("cost too big", {"policy": "tb", "key": "a", "cost": 2 ** 41})
    check("no key", {"policy": "tb"})
    rec.add("check bad json", http_raw(h, "POST", "/v1/check", body=b"{nope"))
    rec.add("check GET 405", http_raw(h, "GET", "/v1/check"))
    rec.add("no such endpoint", http_raw(h, "GET", "/nope"))
    rec.add("healthz", http_raw(h, "GET", "/healthz"))
    check("no policy applies", {"request": {"path": "/nothing"}})
    # RESP
    cmds = []
    for i in range(4):
        cmds.append(("SL.CHECK", "two", "r"))
    cmds += [("SL.PEEK", "two", "r"), ("SL.CHECK", "shd", "r"), ("SL.CHECK", "shd", "r"),
             ("SL.CHECK", "dly", "r"), ("SL.CHECK", "dly", "r"),
             ("SL.CHECK", "tb", "r", "COST", "2"), ("SL.CHECK", "tb", "r", "COST", "9"),
             ("SL.CHECK", "pen", "r"), ("SL.CHECK", "pen", "r"), ("SL.CHECK", "pen", "r"),
             ("SL.CHECK", "pen", "r"), ("SL.CHECK", "conc", "r"), ("SL.CHECK", "conc", "r"),
             ("SL.CHECK", "lky", "r"), ("SL.CHECK", "lky", "r"), ("SL.CHECK", "lky", "r"),
             ("SL.CHECKREQ", "PATH", "/ai/x", "HEADER", "x-k", "q"),
             ("SL.CHECK", "nosuch", "r"), ("SL.CHECK", "tb"), ("SL.CHECK", "tb", "r", "COST", "x"),
             ("CL.THROTTLE", "ct", "2", "3", "10"), ("CL.THROTTLE", "ct", "2", "3", "10"),
             ("CL.THROTTLE", "ct", "2", "3", "10"), ("CL.THROTTLE", "ct", "2", "3", "10"),
             ("CL.THROTTLE", "ct", "2", "3", "10"), ("CL.THROTTLE", "ct"),
             ("SL.CHECKREQ", "PATH", "/two/z", "HEADER", "x-k", "q"),
             ("PING",), ("ECHO", "hi"), ("NOSUCH",), ("SL.NOSUCH",), ("SELECT", "1"),
             ("HELLO", "3"), ("SL.CHECK", "two", "r3"), ("SL.CHECK", "two", "r"), ("SL.CHECK", "nosuch", "r")]
    for c, out in zip(cmds, resp_raw(srv.resp_port, *cmds)):
        rec.add("resp " + " ".join(c), out)
    # gRPC
    c = Client(pb, srv)
    for i in range(3):
        req = c.request("edge", [[("k", "g")], [("k", "h")]], hits=1 if i < 2 else 2)
        out, call = c.rls.ShouldRateLimit.with_call(req, timeout=5)
        rec.add("grpc edge %d" % i, out.SerializeToString(deterministic=True).hex().encode() + b"\n" +
                str(out).encode())
    for i in range(3):
        req = c.request("edge", [[("k", "pen")]], hits=0)
        out = c.rls.ShouldRateLimit(req, timeout=5)
        rec.add("grpc edge hits0 %d" % i, out.SerializeToString(deterministic=True).hex().encode())
    out = c.rls.ShouldRateLimit(c.request("other", [[("x", "1")]]), timeout=5)
    rec.add("grpc unknown domain", out.SerializeToString(deterministic=True).hex().encode())
    out = c.rls.ShouldRateLimit(c.request("edge", [[("nok", "1")]]), timeout=5)
    rec.add("grpc missing key", out.SerializeToString(deterministic=True).hex().encode() + b"\n" +
            str(out).encode())
    c.close()
    srv.clock_advance(1500)
    check("dly after 1.5s", {"policy": "dly", "key": "a"})
    srv.clock_advance(10000)
    check("two after 11.5s", {"policy": "two", "key": "a"})
    auth("two after 11.5s", "/two/x", [("X-K", "b")])
    return b"".join(rec.lines)


def test_answers_are_the_recorded_ones(make_server, pb):
    srv = make_server(config_text=CONFIG, workers=1)
    got = script(srv, pb)
    if os.environ.get("SLUICE_GOLDEN_RECORD"):
        with open(GOLDEN, "wb") as f:
            f.write(got)
        return
    with open(GOLDEN, "rb") as f:
        want = f.read()
    if got != want:
        a, b = want.split(b"\n### "), got.split(b"\n### ")
        diffs = [(x[:2000], y[:2000]) for x, y in zip(a, b) if x != y]
        pytest.fail("answers differ from golden/answers.txt (first of %d):\nwant: %r\n got: %r" %
                    (len(diffs), diffs[0][0] if diffs else a[-1:], diffs[0][1] if diffs else b[-1:]))


def test_compact_reply_is_the_full_replys_numbers(make_server):
    """SL.CHECK ... COMPACT (issue 28): five integers as CL.THROTTLE answers (limited,
    limit, remaining, retry_after_ms or -1, reset_after_ms), the same numbers as the full
    reply; pipelined (the batch path) and alone, errors unchanged."""
    from conftest import as_dict
    srv = make_server(config_text=CONFIG, workers=1)
    srv.clock_set(START_MS)
    c = srv.resp()
    full = [as_dict(c.command("SL.CHECK", "two", "f%d" % (i // 4))) for i in range(8)]
    comp = [c.command("SL.CHECK", "two", "c%d" % (i // 4), "COMPACT") for i in range(8)]
    for f, k in zip(full, comp):
        assert k == [0 if f["allowed"] else 1, f["limit"], f["remaining"],
                     -1 if f["allowed"] else f["retry_after_ms"], f["reset_after_ms"]], (f, k)
    assert comp[3][0] == 1 and comp[3][3] == 10000
    assert c.command("SL.CHECK", "tb", "x", "COST", "2", "COMPACT") == [0, 3, 1, -1, 2000]
    assert c.command("SL.PEEK", "tb", "x", "COMPACT") == [0, 3, 1, -1, 2000]
    assert "unknown policy" in c.command("SL.CHECK", "nosuch", "x", "COMPACT")
    assert "wrong number" in c.command("SL.CHECK", "tb", "x", "COST", "COMPACT")
    c.close()
    # pipelined: decided as one batch, each reply in its own form
    out = resp_raw(srv.resp_port, *[("SL.CHECK", "tb", "p", "COMPACT") if i % 2 else ("SL.CHECK", "tb", "p")
                                     for i in range(4)], pipeline=True)
    assert out[1] == b"*5\r\n:0\r\n:3\r\n:1\r\n:-1\r\n:2000\r\n", out
    assert out[0].startswith(b"*20\r\n") and out[2].startswith(b"*20\r\n")
    assert out[3] == b"*5\r\n:1\r\n:3\r\n:0\r\n:1000\r\n:3000\r\n", out
