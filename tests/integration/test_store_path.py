# SPDX-License-Identifier: Apache-2.0
"""One decision, one store request: the decision path around the store interface, end to
end with real redis-server and `sluice serve` processes on free loopback ports.

- lifetimes: a reload while lease slices are held, while a late reply is awaited, and
  between a request's submission and its answer (the answer comes from the generation
  it was decided with; nothing reads freed memory: the ASan pass and valgrind check it);
- Redis commands per decision (INFO commandstats): an admitted decision of 5 windows in
  3 policies is one EVALSHA; once a key is known exhausted, rejected traffic costs at
  most one command per second per worker, on HTTP, RESP and gRPC;
- an Envoy request whose limit override rejects is rejected as a whole: the config's
  windows of the other descriptors are not consumed (memory and Redis stores);
- a worker never blocks on Redis: with Redis stopped and decisions waiting, the same
  worker answers health checks, requests that need no store, RESP PING and gRPC health.
"""
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests

from conftest import BIN, Client, Server, as_dict

OK, OVER = 1, 2
MINUTE = 2

BASE = """
workers: 1
store:
  type: memory
policies:
  - name: lease
    objective: fairness
    match: { path_prefix: /lease/ }
    key: [header.x-key]
    on_missing_key: skip
    algorithm: gcra
    limits:
      - { rate: 1000/min, burst: 1000 }
    leasing: { slice: 10, hold: 300ms }
  - name: api
    objective: fairness
    match: { path_prefix: /api/ }
    key: [header.x-key]
    on_missing_key: skip
    algorithm: token_bucket
    limits:
      - { rate: %(rate)s, burst: %(burst)d }
  - name: tiny
    objective: protection
    match: { path_prefix: /tiny/ }
    key: [header.x-key]
    on_missing_key: skip
    algorithm: gcra
    limits:
      - { rate: 3/min, burst: 3 }
  - name: multi-a
    objective: fairness
    match: { path_prefix: /multi/ }
    key: [header.x-key]
    on_missing_key: skip
    algorithm: token_bucket
    limits:
      - { rate: 100/s, burst: 100 }
      - { rate: 1000/min }
  - name: multi-b
    objective: protection
    match: { path_prefix: /multi/ }
    key: [header.x-tenant]
    on_missing_key: skip
    algorithm: fixed_window
    limits:
      - { rate: 1000/min }
      - { rate: 10000/h }
  - name: multi-c
    objective: fairness
    match: { path_prefix: /multi/ }
    key: []
    algorithm: sliding_window
    limits:
      - { rate: 100000/min }
domains:
  - domain: rl
    descriptors:
      - key: k
        rate_limit: { unit: minute, requests_per_unit: 10 }
      - key: tiny
        rate_limit: { unit: minute, requests_per_unit: 2 }
"""


def cfg(rate="100/s", burst=100):
    return BASE % {"rate": rate, "burst": burst}


def redis_cli(redis, *args):
    return subprocess.run(["redis-cli", "-p", str(redis.port)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=10).stdout


def evalsha_calls(redis):
    """Decision script calls Redis ran: FCALL (the function library, Redis 7) plus EVALSHA
    (the fallback). Counting EVALSHA alone read 0 once decisions went as FCALL, and the
    "at most one call per second" checks below passed without measuring anything."""
    stats = redis_cli(redis, "INFO", "commandstats")
    return sum(int(m) for m in re.findall(r"cmdstat_(?:evalsha|fcall):calls=(\d+)", stats))


def serve(redis, text, timeout_ms=None, workers=1):
    url = "redis://127.0.0.1:%d" % redis.port
    if timeout_ms is not None:
        url += "?timeout_ms=%d" % timeout_ms
    return Server(config_text=text, test_clock=False, workers=workers, extra=["--store", url])


def rewrite(srv, text):
    with open(srv.config_path, "w") as f:
        f.write(text)
    r = requests.post(srv.admin + "/v1/reload", timeout=10)
    assert r.status_code == 200, r.text


def auth(s, srv, path, key, tenant=None, timeout=5):
    h = {"X-Original-URI": path, "X-Key": key}
    if tenant:
        h["X-Tenant"] = tenant
    return s.get(srv.http + "/v1/auth", headers=h, timeout=timeout)


def metric(srv, name):
    text = requests.get(srv.admin + "/metrics", timeout=5).text
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else None


def stopped(redis):
    redis.proc.send_signal(signal.SIGSTOP)


def resumed(redis):
    redis.proc.send_signal(signal.SIGCONT)


# ---- lifetimes -------------------------------------------------------------------------

def test_reload_with_held_leases(redis):
    """Slices held by a worker name limiters of the generation that took them; a reload
    frees that generation's engine, and the sweep that gives the slices back (hold 300 ms)
    must not read its memory (it did: sl_algo_refundable on a freed limiter)."""
    srv = serve(redis, cfg())
    try:
        c = srv.resp()
        for _ in range(3):
            assert as_dict(c.command("SL.CHECK", "lease", "k"))["allowed"] == 1
        rewrite(srv, cfg(rate="50/s", burst=50))
        # the slice's hold (300 ms) passes: given back through the old limiter (polled: a
        # loaded machine runs the sweep late)
        deadline = time.time() + 10
        m = ""
        while time.time() < deadline:
            m = requests.get(srv.admin + "/metrics", timeout=5).text
            if 'sluice_redis_events_total{event="lease_returned"} 7' in m:
                break
            time.sleep(0.05)
        assert 'sluice_redis_events_total{event="lease_returned"} 7' in m, m
        assert as_dict(c.command("SL.CHECK", "lease", "k"))["allowed"] == 1
        c.close()
    finally:
        srv.stop()
    srv.assert_clean()


def test_reload_around_late_reply(redis):
    """A decision that timed out while Redis was stopped is answered by its failure mode;
    its late reply arrives after a reload and is refunded through the old generation's
    limiter (it read freed memory)."""
    srv = serve(redis, cfg(), timeout_ms=50)
    try:
        s = requests.Session()
        assert auth(s, srv, "/api/x", "late").status_code == 200
        stopped(redis)
        try:
            assert auth(s, srv, "/api/x", "late").status_code == 200  # fail-open on timeout
            rewrite(srv, cfg(rate="50/s", burst=50))
        finally:
            resumed(redis)
        deadline = time.time() + 5
        m = ""
        while time.time() < deadline:
            m = requests.get(srv.admin + "/metrics", timeout=5).text
            if 'event="late_refunds"} 1' in m:
                break
            time.sleep(0.05)
        assert 'event="late_refunds"} 1' in m, m
    finally:
        srv.stop()
    srv.assert_clean()


def test_reload_between_submission_and_answer(redis):
    """A request waiting for Redis when a reload happens is answered by the generation it
    was decided with (its limits), and the next request by the new one."""
    srv = serve(redis, cfg(rate="100/s", burst=100), timeout_ms=4000)
    try:
        s = requests.Session()
        assert auth(s, srv, "/api/x", "k").status_code == 200
        got = {}

        def waiting():
            got["r"] = requests.post(srv.http + "/v1/check", json={"policy": "api", "key": "k2"}, timeout=10)

        stopped(redis)
        try:
            t = threading.Thread(target=waiting)
            t.start()
            time.sleep(0.3)  # submitted, waiting for Redis
            rewrite(srv, cfg(rate="7/s", burst=7))
        finally:
            resumed(redis)
        t.join(10)
        j = got["r"].json()
        assert j["allowed"] and j["limits"][0]["limit"] == 100, j
        j = requests.post(srv.http + "/v1/check", json={"policy": "api", "key": "k3"}, timeout=5).json()
        assert j["limits"][0]["limit"] == 7, j
    finally:
        srv.stop()
    srv.assert_clean()


# ---- store requests per decision -----------------------------------------------------

def test_admitted_decision_is_one_call(redis, pb):
    """Five windows of three policies on a single node: one EVALSHA per decision, on
    HTTP, RESP and gRPC (an Envoy rule and a limit override in one request too)."""
    srv = serve(redis, cfg())
    cl = Client(pb, srv)
    try:
        s = requests.Session()
        assert auth(s, srv, "/multi/a", "u", tenant="t").status_code == 200  # scripts loaded
        before = evalsha_calls(redis)
        for _ in range(20):
            assert auth(s, srv, "/multi/a", "u", tenant="t").status_code == 200
        http = evalsha_calls(redis) - before
        c = srv.resp()
        before = evalsha_calls(redis)
        for _ in range(20):
            d = as_dict(c.command("SL.CHECKREQ", "PATH", "/multi/a", "HEADER", "x-key", "u",
                                  "HEADER", "x-tenant", "t"))
            assert d["allowed"] == 1
        resp = evalsha_calls(redis) - before
        c.close()
        before = evalsha_calls(redis)
        for i in range(20):
            r = cl.check("rl", [[("k", "g%d" % (i % 2))], {"entries": [("o", "y")], "limit": (100, MINUTE)}])
            assert r.overall_code == OK
        grpc = evalsha_calls(redis) - before
        print("EVALSHA per admitted decision: HTTP %.2f, RESP %.2f, gRPC %.2f" % (http / 20, resp / 20, grpc / 20))
        assert (http, resp, grpc) == (20, 20, 20)
    finally:
        cl.close()
        srv.stop()
    srv.assert_clean()


def rejected_traffic_costs(redis, srv, one_request, n=20):
    """EVALSHA calls made by n rejected requests sent within a second."""
    before = evalsha_calls(redis)
    t0 = time.time()
    for _ in range(n):
        assert not one_request()
    assert time.time() - t0 < 1.0, "too slow to measure one second"
    return evalsha_calls(redis) - before


def test_rejections_answered_locally_on_every_protocol(redis, pb):
    """Once a key is known exhausted, rejected traffic costs at most one command per
    second per worker and key (it cost one per request, plus a peek, before)."""
    srv = serve(redis, cfg())
    cl = Client(pb, srv)
    try:
        s = requests.Session()
        c = srv.resp()
        # RESP: exhaust, then 20 rejections
        for _ in range(3):
            assert as_dict(c.command("SL.CHECK", "tiny", "r"))["allowed"] == 1
        assert as_dict(c.command("SL.CHECK", "tiny", "r"))["allowed"] == 0  # learns the state
        cost = rejected_traffic_costs(redis, srv, lambda: as_dict(c.command("SL.CHECK", "tiny", "r"))["allowed"])
        print("RESP: %d EVALSHA for 20 rejected decisions" % cost)
        assert cost <= 1
        # HTTP forward-auth
        for _ in range(3):
            assert auth(s, srv, "/tiny/x", "h").status_code == 200
        assert auth(s, srv, "/tiny/x", "h").status_code == 429
        cost = rejected_traffic_costs(redis, srv, lambda: auth(s, srv, "/tiny/x", "h").status_code == 200)
        print("HTTP: %d EVALSHA for 20 rejected decisions" % cost)
        assert cost <= 1
        # gRPC
        for _ in range(2):
            assert cl.check("rl", [[("tiny", "g")]]).overall_code == OK
        assert cl.check("rl", [[("tiny", "g")]]).overall_code == OVER
        cost = rejected_traffic_costs(redis, srv, lambda: cl.check("rl", [[("tiny", "g")]]).overall_code == OK)
        print("gRPC: %d EVALSHA for 20 rejected decisions" % cost)
        assert cost <= 1
        c.close()
    finally:
        cl.close()
        srv.stop()
    srv.assert_clean()


# ---- Envoy overrides in the same decision ----------------------------------------------

def override_rejects_whole_request(cl):
    with_override = [[("k", "v")], {"entries": [("o", "x")], "limit": (1, MINUTE)}]
    r = cl.check("rl", with_override)
    assert r.overall_code == OK and [s.code for s in r.statuses] == [OK, OK]
    assert r.statuses[0].limit_remaining == 9
    r = cl.check("rl", with_override)  # the override (1/min) rejects the whole request
    assert r.overall_code == OVER
    assert r.statuses[1].code == OVER
    assert r.statuses[1].current_limit.requests_per_unit == 1
    # nothing was consumed from the config's window by the rejected request
    r = cl.check("rl", [[("k", "v")]])
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 8, r


def test_override_rejected_as_a_whole_memory(pb):
    srv = Server(config_text=cfg(), test_clock=False, workers=1)
    cl = Client(pb, srv)
    try:
        override_rejects_whole_request(cl)
    finally:
        cl.close()
        srv.stop()
    srv.assert_clean()


def test_override_rejected_as_a_whole_redis(redis, pb):
    srv = serve(redis, cfg())
    cl = Client(pb, srv)
    try:
        before = evalsha_calls(redis)
        override_rejects_whole_request(cl)
        assert evalsha_calls(redis) - before <= 3  # one store request per decision
    finally:
        cl.close()
        srv.stop()
    srv.assert_clean()


# ---- never blocking ------------------------------------------------------------------

def test_worker_never_blocks_on_redis(redis, pb):
    """One worker, Redis stopped, five decisions of 5 windows in 3 policies waiting: the
    same worker answers everything that needs no store at once, then the waiting
    decisions when Redis is back (none of them timed out)."""
    srv = serve(redis, cfg(), timeout_ms=5000)
    cl = Client(pb, srv)
    try:
        s = requests.Session()
        assert auth(s, srv, "/multi/a", "u", tenant="t").status_code == 200
        results = []

        def one(i):
            results.append(auth(requests.Session(), srv, "/multi/a", "u%d" % i, tenant="t", timeout=15).status_code)

        stopped(redis)
        try:
            th = [threading.Thread(target=one, args=(i,)) for i in range(5)]
            for t in th:
                t.start()
            time.sleep(0.3)
            t0 = time.time()
            assert s.get(srv.http + "/healthz", timeout=2).status_code == 200
            assert auth(s, srv, "/nothing/matches", "x", timeout=2).status_code == 200
            assert requests.get(srv.admin + "/healthz", timeout=2).status_code == 200
            c = srv.resp()
            assert c.command("PING") == "PONG"
            c.close()
            assert cl.serving()
            answered_in = time.time() - t0
            print("answered while 5 decisions wait for Redis: %.3f s" % answered_in)
            assert answered_in < 2.0
            assert results == []  # still waiting
        finally:
            resumed(redis)
        for t in th:
            t.join(15)
        assert results == [200] * 5, results
        m = requests.get(srv.admin + "/metrics", timeout=5).text
        assert 'sluice_redis_events_total{event="timeouts"} 0' in m
    finally:
        cl.close()
        srv.stop()
    srv.assert_clean()


# ---- the reload-under-traffic scenario under valgrind --------------------------------

def sanitized(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return "libasan" in out or "libubsan" in out


def test_reload_under_redis_traffic_memcheck(redis, pb):
    """Traffic on every protocol with leases held and late replies awaited, reloads at
    the same time, Redis stopped and resumed around them: valgrind memcheck finds no
    error (the ASan build runs the same scenario natively: its sanitizer does the
    checking, valgrind cannot run under it)."""
    memcheck = not sanitized(BIN)
    prefix = []
    if memcheck:
        prefix = ["valgrind", "--quiet", "--error-exitcode=99", "--errors-for-leak-kinds=definite",
                  "--leak-check=full", "--track-origins=no"]
    srv = Server(config_text=cfg(), test_clock=False, workers=2,
                 extra=["--store", "redis://127.0.0.1:%d?timeout_ms=200" % redis.port],
                 wrapper=prefix, start_timeout=60)
    cl = Client(pb, srv)
    try:
        stop = time.time() + (8 if memcheck else 4)
        errors = []

        def traffic():
            s = requests.Session()
            c = srv.resp()
            i = 0
            while time.time() < stop and i < 5000:
                i += 1
                try:
                    c.command("SL.CHECK", "lease", "hot%d" % (i % 3))
                    auth(s, srv, "/multi/a", "u%d" % (i % 5), tenant="t", timeout=10)
                    cl.check("rl", [[("k", "v%d" % (i % 4))], {"entries": [("o", "x")], "limit": (5, MINUTE)}],
                             timeout=10)
                except Exception as e:  # noqa: BLE001 - collected, asserted below
                    errors.append(repr(e))
                    return
            c.close()

        t = threading.Thread(target=traffic)
        t.start()
        n = 0
        while time.time() < stop:
            rewrite(srv, cfg(rate="%d/s" % (100 + n % 7), burst=100 + n % 7))
            n += 1
            if n % 3 == 0:
                stopped(redis)
                time.sleep(0.3)  # decisions time out; their late replies come after
                rewrite(srv, cfg(rate="%d/s" % (90 + n % 5), burst=90))
                resumed(redis)
            time.sleep(0.2)
        t.join(60)
        assert not errors, errors
        time.sleep(0.6)  # slices' holds pass: given back after the reloads
    finally:
        resumed(redis)
        cl.close()
        rc = srv.stop(timeout=120)
    out = srv.output()
    assert rc == 0, out[-4000:]
    assert "Invalid read" not in out and "Invalid write" not in out, out[-4000:]
    srv.assert_clean()
