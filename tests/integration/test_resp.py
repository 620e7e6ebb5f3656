# SPDX-License-Identifier: Apache-2.0
"""RESP against the real server with real clients: redis-cli (one-shot, -3 and an
interactive session on a pseudo-terminal), redis-benchmark (short, bounded), redis-py,
and raw bytes for the protocol's edge cases (pipelining, inline commands, errors)."""
import json
import os
import pty
import select
import subprocess
import time
import urllib.request

import redis

from conftest import RespError, as_dict


def cli(server, *args, proto3=False):
    cmd = ["redis-cli", "-p", str(server.resp_port)] + (["-3"] if proto3 else []) + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_redis_cli_one_shot(server):
    assert cli(server, "PING").stdout.strip() == "PONG"
    assert cli(server, "ECHO", "hi there").stdout.strip() == "hi there"
    out = cli(server, "SL.CHECK", "api", "user-1").stdout.split("\n")
    d = dict(zip(out[0::2], out[1::2]))
    assert d["allowed"] == "1" and d["policy"] == "api"
    assert d["limit"] == "20" and d["remaining"] == "19"
    assert d["retry_after_ms"] == "0"
    # RESP3: a map with a real boolean
    out3 = cli(server, "SL.CHECK", "api", "user-1", proto3=True).stdout
    assert "allowed" in out3 and "(true)" in out3 and "remaining" in out3


def test_redis_cli_interactive(server):
    """redis-cli on a TTY sends COMMAND DOCS, INFO and COMMAND first; it must then work
    like against Redis."""
    pid, fd = pty.fork()
    if pid == 0:
        # TERM=dumb: linenoise reads plain lines (no cursor-position queries); redis-cli
        # still sees a TTY and runs its interactive start-up (COMMAND DOCS, INFO, COMMAND)
        os.environ["TERM"] = "dumb"
        os.execvp("redis-cli", ["redis-cli", "-p", str(server.resp_port)])
    out = b""

    def expect(token, timeout=30):  # generous: CI machines may be loaded
        nonlocal out
        deadline = time.time() + timeout
        while token not in out and time.time() < deadline:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break
        return token in out

    try:
        assert expect(b">"), out
        os.write(fd, b"PING\n")
        assert expect(b"PONG"), out
        os.write(fd, b"CL.THROTTLE user123 15 30 60\n")
        assert expect(b"5) (integer) 2"), out
        os.write(fd, b"quit\n")
    finally:
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)


def test_redis_benchmark_short(server):
    base = ["redis-benchmark", "-p", str(server.resp_port), "-q", "-c", "4", "-n", "3000"]
    r = subprocess.run(base + ["-t", "ping"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PING_INLINE" in r.stdout and "PING_MBULK" in r.stdout
    for p in ("1", "16"):
        r = subprocess.run(base + ["-P", p, "-r", "1000", "SL.CHECK", "big", "k:__rand_int__"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, r.stdout + r.stderr
        assert "requests per second" in r.stdout
        r = subprocess.run(base + ["-P", p, "-r", "1000", "CL.THROTTLE", "k:__rand_int__", "100", "10", "1"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, r.stdout + r.stderr
    # every command was counted
    c = server.resp()
    info = c.command("INFO").decode()
    assert "redis_version:" in info


def test_redis_py(server):
    r = redis.Redis(port=server.resp_port, socket_timeout=5)
    assert r.ping() is True
    d = as_dict(r.execute_command("SL.CHECK", "api", "py-user", "COST", "5"))
    assert d["allowed"] == 1 and d["remaining"] == 15
    d = as_dict(r.execute_command("SL.PEEK", "api", "py-user"))
    assert d["remaining"] == 15  # a peek consumes nothing
    p = r.pipeline(transaction=False)
    for _ in range(20):
        p.execute_command("CL.THROTTLE", "py-key", 9, 1, 60)
    replies = p.execute()
    assert [x[0] for x in replies] == [0] * 10 + [1] * 10
    assert replies[9][2] == 0 and replies[10][3] == 60  # limited: retry after one emission
    assert r.execute_command("SL.RESET", "api", "py-user") == 1
    assert as_dict(r.execute_command("SL.PEEK", "api", "py-user"))["remaining"] == 20
    with_err = None
    try:
        r.execute_command("NOSUCH", "a", "b")
    except redis.ResponseError as e:
        with_err = str(e)
    assert with_err == "unknown command 'NOSUCH', with args beginning with: 'a' 'b' "
    r.close()


def test_pipelined_and_inline_raw(server):
    c = server.resp()
    c.send_raw(b"PING\r\n*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n\r\nECHO \"a b\"\r\n*1\r\n$4\r\nPING\r\n")
    assert c.read() == "PONG"
    assert c.read() == b"abc"
    assert c.read() == b"a b"  # the empty inline line got no reply
    assert c.read() == "PONG"
    assert c.command("SELECT", "0") == "OK"
    assert isinstance(c.command("SELECT", "1"), RespError)
    cfg = c.command("CONFIG", "GET", "save")
    assert cfg == [b"save", b""]
    assert c.command("COMMAND", "DOCS") == []
    assert c.command("CLIENT", "SETINFO", "LIB-NAME", "x") == "OK"
    hello = c.command("HELLO", "3")
    assert hello[b"proto"] == 3
    d = as_dict(c.command("SL.CHECK", "api", "raw"))
    assert d["allowed"] is True and d["token"] is None
    assert isinstance(c.command("HELLO", "4"), RespError)
    assert c.command("QUIT") == "OK"
    assert c.closed()


def test_protocol_errors_close(server):
    for bad, text in [(b"*1\r\n+PING\r\n", "ERR Protocol error: expected '$', got '+'"),
                      (b"*x\r\n", "ERR Protocol error: invalid multibulk length"),
                      (b"*1\r\n$-3\r\n", "ERR Protocol error: invalid bulk length"),
                      (b"ECHO \"abc\r\n", "ERR Protocol error: unbalanced quotes in request")]:
        c = server.resp()
        c.send_raw(bad)
        assert c.read() == text
        assert c.closed()
    # a huge inline request without a newline
    c = server.resp()
    c.send_raw(b"a" * (70 * 1024))
    assert c.read() == "ERR Protocol error: too big inline request"
    assert c.closed()
    # the server is still fine
    c = server.resp()
    assert c.command("PING") == "PONG"


def test_clock_refused_without_flag(make_server):
    s = make_server(test_clock=False)
    c = s.resp()
    r = c.command("SL.CLOCK", "ADVANCE", "1000")
    assert isinstance(r, RespError) and "--test-clock" in r
    import requests
    resp = requests.post(s.admin + "/v1/clock", json={"advance_ms": 10}, timeout=5)
    assert resp.status_code == 403


def test_acquire_release_settle(server):
    c = server.resp()
    toks = []
    for _ in range(2):
        d = as_dict(c.command("SL.ACQUIRE", "slots", "tenant-a"))
        assert d["allowed"] == 1 and d["token"]
        toks.append(d["token"])
    d = as_dict(c.command("SL.ACQUIRE", "slots", "tenant-a"))
    assert d["allowed"] == 0  # max 2 in flight
    assert c.command("SL.RELEASE", toks[0]) == "OK"
    d = as_dict(c.command("SL.ACQUIRE", "slots", "tenant-a"))
    assert d["allowed"] == 1
    assert isinstance(c.command("SL.RELEASE", "garbage"), RespError)


def test_settle_over_resp(server):
    c = server.resp()
    d = as_dict(c.command("SL.CHECK", "tokens", "u1"))
    assert d["allowed"] == 1 and d["remaining"] == 900 and d["token"]
    assert c.command("SL.SETTLE", d["token"], 30) == "OK"
    assert as_dict(c.command("SL.PEEK", "tokens", "u1"))["remaining"] == 970  # 70 refunded
    assert isinstance(c.command("SL.SETTLE", d["token"], "x"), RespError)


def bulk(*args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def test_pipelined_checks_answered_in_order_and_exact(server):
    """Pipelined SL.CHECKs are decided together (one pass over the store): their answers
    come back in order, exact as one by one, interleaved with everything else in its
    place: other commands, peeks, errors, a key that repeats, several read buffers."""
    c = server.resp()
    pipeline = []
    expect = []
    for i in range(60):  # the api bucket holds 20: the 21st check of one key is refused
        pipeline.append(bulk(b"SL.CHECK", b"api", b"same"))
        expect.append(("check", i < 20))
        if i % 7 == 3:
            pipeline.append(bulk(b"PING"))
            expect.append(("ping", None))
        if i % 11 == 5:
            pipeline.append(bulk(b"SL.PEEK", b"api", b"same"))
            expect.append(("peek", None))
        if i == 30:
            pipeline.append(bulk(b"SL.CHECK", b"api", b"other", b"COST", b"-1"))
            expect.append(("error", None))
            pipeline.append(bulk(b"SL.CHECK", b"api", b"other", b"COST", b"3"))
            expect.append(("check3", True))
    c.send_raw(b"".join(pipeline))
    remaining_seen = []
    for kind, allowed in expect:
        r = c.read()
        if kind == "ping":
            assert r == "PONG"
        elif kind == "error":
            assert isinstance(r, RespError), r
        else:
            d = as_dict(r)
            if kind == "peek":
                remaining_seen.append(d["remaining"])
            elif kind == "check3":
                assert d["allowed"] in (1, True) and d["remaining"] == 17, d
            else:
                assert bool(d["allowed"]) is allowed, (d, allowed)
    # peeks saw the remaining at their place in the pipeline (never taking anything)
    assert remaining_seen == sorted(remaining_seen, reverse=True), remaining_seen
    d = as_dict(c.command("SL.PEEK", "api", "same"))
    assert d["remaining"] == 0
    c.close()


SHADOW_CONFIG = """
policies:
  - name: watch
    objective: fairness
    key: [header.x-user]
    mode: shadow
    algorithm: fixed_window
    limits: [{ rate: 2/min }]
  - name: api
    objective: fairness
    key: [header.x-user]
    algorithm: fixed_window
    limits: [{ rate: 5/min }]
"""


def test_check_says_shadow_decisions(make_server):
    """SL.CHECK carries /v1/check's shadow_limited, as its last field (RESP2 and RESP3):
    the fields before it keep their positions."""
    s = make_server(config_text=SHADOW_CONFIG)
    c = s.resp()
    got = []
    for _ in range(3):
        r = c.command("SL.CHECK", "watch", "u1")
        assert isinstance(r, list) and len(r) == 20, r
        assert r[0] == b"allowed" and r[2] == b"action" and r[16] == b"token" and r[18] == b"shadow_limited"
        got.append(as_dict(r))
    assert [d["allowed"] for d in got] == [1, 1, 1]  # a shadow policy never refuses
    assert [d["shadow_limited"] for d in got] == [0, 0, 1]
    assert as_dict(c.command("SL.CHECK", "api", "u1"))["shadow_limited"] == 0
    assert c.command("HELLO", "3")[b"proto"] == 3
    d = as_dict(c.command("SL.CHECK", "watch", "u1"))
    assert d["allowed"] is True and d["shadow_limited"] is True
    assert as_dict(c.command("SL.CHECK", "api", "u1"))["shadow_limited"] is False
    # the HTTP answer says the same
    body = json.loads(urllib.request.urlopen(urllib.request.Request(
        s.http + "/v1/check", data=json.dumps({"policy": "watch", "key": "u1"}).encode(),
        headers={"Content-Type": "application/json"}), timeout=10).read())
    assert body["shadow_limited"] is True
    c.close()
