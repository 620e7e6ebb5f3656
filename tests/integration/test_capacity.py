# SPDX-License-Identifier: Apache-2.0
"""Capacity protection through the real server (docs/capacity.md), on the test clock:

- adaptive concurrency: a simulated backend whose latency grows beyond a knee of 20 and
  whose capacity halves then recovers; each controller, driven over RESP (SL.ACQUIRE, then
  SL.RELEASE with LATENCY), converges within 25 % of the knee, swings less than 20 % of
  it, tracks the halving and recovers; an unreleased lease counts as a drop; /v1/release
  takes latency_ms and outcome; the limit, no-load latency and in-flight count come back
  with each decision and in /metrics;
- priority shedding at 3x overload with 20 % critical traffic: critical keeps >= 99 %;
  a 30 % reserve holds for critical when sheddable arrived first; a refusal names the class
  shed (problem+json, X-Sluice-Shed, sluice_shed_total{class});
- borrowing between tiers: a busy sibling borrows up to its cap, the owner gets its share
  back within one window;
- penalties escalate and decay on the test clock; an attacker rotating addresses against
  one account never gets its owner blocked (challenged at most); a challenge is passed
  over HTTP and RESP;
- the Redis store gives the same answers as the memory store for the same traffic, and
  the controllers converge with it too; gRPC (RLS) sheds by a descriptor's class.
Every loop is bounded by the simulated time and counts; servers use free ports.
"""
import json
import os
import random
import re

import pytest
import requests

from conftest import Resp, RespError, Server, as_dict

# ---- RESP, pipelined ------------------------------------------------------------------------


def encode(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        if not isinstance(a, bytes):
            a = str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def pipeline(conn, cmds):
    """Sends every command at once, then reads their replies in order."""
    if not cmds:
        return []
    conn.send_raw(b"".join(encode(*c) for c in cmds))
    return [conn.read() for _ in cmds]


def fields(reply):
    assert isinstance(reply, list), reply
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def metric(text, name, **labels):
    """The value of one series of /metrics (None when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all('%s="%s"' % (k, v) in head for k, v in labels.items()):
            return float(value)
    return None


def redis_url(redis):
    return ["--store", "redis://127.0.0.1:%d?timeout_ms=2000" % redis.port]


# ---- adaptive concurrency --------------------------------------------------------------------

ADAPTIVE = """
workers: 1
policies:
  - name: backend
    key: []
    algorithm: adaptive_concurrency
    limits:
      - { min: 2, max: 200, initial: 10, lease: 30s, controller: %s %s }
"""

KNEE, BASE_MS, RATE = 20, 50.0, 600.0  # capacity 400/s: offered 1.5x, 3x when halved
HALVE_MS, RESTORE_MS, END_MS = 20000, 30000, 40000


def knee_at(t):
    return KNEE // 2 if HALVE_MS <= t < RESTORE_MS else KNEE


class Backend:
    """The backend of tests/sim/sim_adaptive.h, at a slower pace: `knee` requests in
    parallel at BASE_MS each (+-10 % jitter); beyond the knee they share it (latency
    grows with the count, throughput does not)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def latency(self, t, n):
        k = knee_at(t)
        lat = BASE_MS * max(n, k) / k
        return lat * (1 + self.rng.uniform(-0.1, 0.1))


SEED = int(os.environ.get("SLUICE_SEED", "7"))


def run_adaptive(srv, seed=SEED):
    """Open-loop arrivals at RATE/s for END_MS of simulated time; each admitted request
    holds its lease until the backend answers, then SL.RELEASE reports its latency.
    Events are sent in batches of 40 ms (shorter than any latency, so no completion
    depends on a reply of its own batch), the clock moved in whole ms before each event.
    Returns the limit every 100 ms, from the replies."""
    conn = srv.resp()
    be = Backend(seed)
    rng = random.Random(seed + 1)
    arrivals, t = [], 0.0
    while t < END_MS:
        arrivals.append(t)
        t += rng.uniform(0, 2000.0 / RATE)
    inflight = []  # (done_ms, latency_ms, token)
    clock = 0
    trace, last_limit = {}, 0
    ai = 0
    admitted = rejected = 0
    batch_start = 0.0
    while batch_start < END_MS:
        batch_end = batch_start + 40.0
        events = [(d, 0, (l, tok)) for d, l, tok in inflight if d < batch_end]
        inflight = [x for x in inflight if x[0] >= batch_end]
        while ai < len(arrivals) and arrivals[ai] < batch_end:
            events.append((arrivals[ai], 1, None))
            ai += 1
        events.sort(key=lambda e: (e[0], e[1]))
        cmds, kinds = [], []
        for at, kind, data in events:
            ms = int(at)
            if ms > clock:
                cmds.append(("SL.CLOCK", "ADVANCE", ms - clock))
                kinds.append(("clock", None))
                clock = ms
            if kind == 0:
                lat, tok = data
                cmds.append(("SL.RELEASE", tok, "LATENCY", "%.3f" % lat, "OUTCOME", "ok"))
                kinds.append(("release", None))
            else:
                cmds.append(("SL.ACQUIRE", "backend", ""))
                kinds.append(("acquire", at))
        replies = pipeline(conn, cmds)
        n_in = len(inflight) + sum(1 for k, _ in kinds if k == "release")  # before this batch's releases
        # replay the batch in order: in-flight count at each admission, its latency
        n = len(inflight) + sum(1 for e in events if e[1] == 0)
        for (kind, at), rep in zip(kinds, replies):
            assert not isinstance(rep, RespError), rep
            if kind == "release":
                assert rep == "OK", rep
                n -= 1
            elif kind == "acquire":
                f = fields(rep)
                last_limit = f["adaptive_limit"]
                if f["allowed"] == 1:
                    n += 1
                    lat = be.latency(at, n)
                    inflight.append((at + lat, lat, f["token"]))
                    admitted += 1
                else:
                    rejected += 1
                trace[int(at // 100)] = last_limit
        del n_in
        batch_start = batch_end
    conn.close()
    points = []
    last = 0
    for i in range(END_MS // 100):
        last = trace.get(i, last)
        points.append((i * 100, last))
    return points, admitted, rejected


def settle_ms(points, start, end, pct=25):
    """From start until the limit stays within pct of the knee until end."""
    last_out = start - 100
    for t, lim in points:
        if start <= t < end and abs(lim - knee_at(t)) * 100 > knee_at(t) * pct:
            last_out = t
    return last_out + 100 - start


def stats(points, start, end):
    xs = [lim for t, lim in points if start <= t < end]
    return sum(xs) / len(xs), min(xs), max(xs)


def judge(points, name):
    """The issue's criteria: converge within 25 % of the knee, swing less than 20 % of it,
    track the halving and recover within a few seconds."""
    settle = settle_ms(points, 0, HALVE_MS)
    mean, lo, hi = stats(points, HALVE_MS // 2, HALVE_MS)
    track = settle_ms(points, HALVE_MS, RESTORE_MS)
    hmean, hlo, hhi = stats(points, HALVE_MS + 5000, RESTORE_MS)
    recover = settle_ms(points, RESTORE_MS, END_MS)
    rmean, rlo, rhi = stats(points, RESTORE_MS + 5000, END_MS)
    print("%-9s settle %.1f s, steady mean %.2f (%d..%d, p2p %.0f %%), halving tracked in %.1f s, "
          "halved mean %.2f (%d..%d), recovered in %.1f s, mean %.2f"
          % (name, settle / 1000, mean, lo, hi, (hi - lo) * 100 / KNEE, track / 1000, hmean, hlo, hhi,
             recover / 1000, rmean))
    assert settle <= 10000, settle
    assert abs(mean - KNEE) <= KNEE * 0.25, mean
    assert abs(lo - KNEE) <= KNEE * 0.25 and abs(hi - KNEE) <= KNEE * 0.25, (lo, hi)
    assert (hi - lo) <= KNEE * 0.20, (lo, hi)
    assert track <= 5000, track
    assert abs(hmean - KNEE / 2) <= KNEE / 2 * 0.25, hmean
    assert recover <= 5000, recover
    assert abs(rmean - KNEE) <= KNEE * 0.25, rmean


CONTROLLERS = [("gradient2", ", window: 200ms"), ("vegas", ", window: 200ms"), ("aimd", ", timeout: 57500us, window: 200ms")]


@pytest.mark.parametrize("ctl,extra", CONTROLLERS, ids=[c for c, _ in CONTROLLERS])
def test_controller_converges_through_the_server(make_server, ctl, extra):
    srv = make_server(config_text=ADAPTIVE % (ctl, extra))
    points, admitted, rejected = run_adaptive(srv)
    assert admitted > 0 and rejected > 0
    judge(points, ctl)
    m = requests.get(srv.admin + "/metrics", timeout=5).text
    assert metric(m, "sluice_adaptive_limit", policy="backend") == points[-1][1] or \
        abs(metric(m, "sluice_adaptive_limit", policy="backend") - points[-1][1]) <= 2
    noload = metric(m, "sluice_adaptive_noload_seconds", policy="backend")
    assert noload is not None and 0.9 * BASE_MS / 1000 * 0.9 <= noload <= 1.3 * BASE_MS / 1000, noload
    assert metric(m, "sluice_in_flight", policy="backend") is not None


def test_controller_converges_with_redis(make_server, redis):
    srv = make_server(config_text=ADAPTIVE % CONTROLLERS[0], extra=redis_url(redis))
    points, admitted, rejected = run_adaptive(srv)
    judge(points, "gradient2 (redis)")
    m = requests.get(srv.admin + "/metrics", timeout=5).text
    assert metric(m, "sluice_redis_events_total", event="mismatches") == 0


# ---- adaptive concurrency: the wiring ----------------------------------------------------------

WIRING = """
workers: 1
policies:
  - name: backend
    key: []
    algorithm: adaptive_concurrency
    limits:
      - { min: 1, max: 100, initial: 20, lease: 1s, controller: aimd, timeout: 50ms,
          window: 10ms, min_samples: 1, probe_after: 0 }
"""


def acquire_http(srv, cls=None):
    body = {"policy": "backend", "key": ""}
    if cls:
        body["class"] = cls
    r = requests.post(srv.http + "/v1/acquire", json=body, timeout=5)
    return r.status_code, r.json()


def probe(srv, n=4, latency_ms=5):
    """The start-up probe (4 x min_samples samples at min) done over HTTP."""
    for _ in range(n):
        st, v = acquire_http(srv)
        assert st == 200, v
        srv.clock_advance(5)
        r = requests.post(srv.http + "/v1/release",
                          json={"token": v["token"], "latency_ms": latency_ms, "outcome": "ok"}, timeout=5)
        assert r.status_code == 200 and r.json() == {"released": True}, r.text
        srv.clock_advance(5)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_release_sample_expired_lease_and_view(make_server, redis, store):
    srv = make_server(config_text=WIRING, extra=redis_url(redis) if store == "redis" else ())
    st, v = acquire_http(srv)
    assert v["adaptive"] == {"limit": 1, "noload_ms": 0.0, "in_flight": 1}  # probing at min
    srv.clock_advance(5)
    r = requests.post(srv.http + "/v1/release", json={"token": v["token"], "latency_ms": 5, "outcome": "ok"},
                      timeout=5)
    assert r.status_code == 200
    srv.clock_advance(5)
    probe(srv, 3)
    st, v = acquire_http(srv)
    assert v["adaptive"]["limit"] == 20 and v["adaptive"]["noload_ms"] == 5.0, v
    # bad samples are refused, and a token releases once
    for bad in ({"latency_ms": "x"}, {"outcome": "slow"}, {"latency_ms": -1}):
        r = requests.post(srv.http + "/v1/release", json=dict(token=v["token"], **bad), timeout=5)
        assert r.status_code == 400, (bad, r.text)
    c = srv.resp()
    assert c.command("SL.RELEASE", v["token"], "LATENCY", "7.5", "OUTCOME", "bad").startswith("ERR OUTCOME")
    assert c.command("SL.RELEASE", v["token"], "LATENCY", "7.5", "OUTCOME", "ok") == "OK"
    assert c.command("SL.RELEASE", v["token"]).startswith("ERR token already used")
    # 20 slots taken and never released: reclaimed after the lease, each a drop
    tokens = [acquire_http(srv)[1]["token"] for _ in range(20)]
    st, v = acquire_http(srv)
    assert st == 429 and v["adaptive"]["in_flight"] == 20, v
    srv.clock_advance(1300)
    st, v = acquire_http(srv)
    assert st == 200 and v["adaptive"]["limit"] < 20 and v["adaptive"]["in_flight"] == 1, v
    # the late release of a reclaimed lease: 404 (it already counted as a drop)
    r = requests.post(srv.http + "/v1/release", json={"token": tokens[0], "latency_ms": 1}, timeout=5)
    assert r.status_code == 404
    # RESP replies carry the view too; /metrics shows it
    f = fields(c.command("SL.ACQUIRE", "backend", ""))
    assert f["adaptive_limit"] == v["adaptive"]["limit"] and f["in_flight"] == 2 and f["noload_us"] == 5000
    c.close()
    m = requests.get(srv.admin + "/metrics", timeout=5).text
    assert metric(m, "sluice_adaptive_limit", policy="backend") == v["adaptive"]["limit"]
    assert metric(m, "sluice_adaptive_noload_seconds", policy="backend") == 0.005
    assert metric(m, "sluice_in_flight", policy="backend") == 2
    if store == "redis":
        assert metric(m, "sluice_redis_events_total", event="mismatches") == 0


# ---- priority shedding ----------------------------------------------------------------------------

SHED = """
workers: 1
policies:
  - name: backend
    key: []
    algorithm: concurrency
    limits: [ { max: 100, lease: 30s } ]
    priority_from: header.x-priority
    classes:
      - { name: critical }
      - { name: default, fill: 90%% }
      - { name: sheddable, fill: 70%% }
      - { name: batch, fill: 50%% }
  - name: reserved
    key: []
    algorithm: concurrency
    limits: [ { max: 100, lease: 30s } ]
    priority_from: header.x-priority
    classes:
      - { name: critical, reserve: 30%% }
      - { name: sheddable }
%s
"""


def overload(srv, policy, mix, rate, seconds, hold_ms=100, seed=3):
    """Open-loop requests at `rate`/s over RESP (SL.ACQUIRE CLASS c), each holding its slot
    hold_ms; mix: [(class, share, start_ms)]. Sent in pipelines of 20 ms (shorter than a
    hold, so no release depends on a reply of its own pipeline), the clock moved ms by ms.
    Returns per class (offered, admitted) after the first second, and the slots each class
    held, sampled every 20 ms."""
    rng = random.Random(seed)
    conn = srv.resp()
    events, t = [], 0.0
    while t < seconds * 1000:
        u, acc = rng.random(), 0.0
        for cls, share, begin in mix:
            acc += share
            if u < acc:
                if t >= begin:
                    events.append((t, cls))
                break
        t += rng.uniform(0, 2000.0 / rate)
    held, clock, out = [], 0, {}
    holding = {cls: [] for cls, _, _ in mix}
    i = 0
    for start in range(0, seconds * 1000, 20):
        cmds, meta = [], []
        for ms in range(start, start + 20):
            due = [h for h in held if h[0] <= ms]
            batch = []
            while i < len(events) and events[i][0] < ms + 1:
                batch.append(events[i])
                i += 1
            if not due and not batch:
                continue
            if ms > clock:
                cmds.append(("SL.CLOCK", "ADVANCE", ms - clock))
                meta.append(None)
                clock = ms
            held = [h for h in held if h[0] > ms]
            for _, tok, cls in due:
                cmds.append(("SL.RELEASE", tok))
                meta.append(None)
            for at, cls in batch:
                cmds.append(("SL.ACQUIRE", policy, "", "CLASS", cls))
                meta.append((ms, cls))
        for m, rep in zip(meta, pipeline(conn, cmds)):
            assert not isinstance(rep, RespError), rep
            if m is None:
                continue
            at, cls = m
            f = fields(rep)
            o = out.setdefault(cls, [0, 0])
            if at >= 1000:
                o[0] += 1
                o[1] += f["allowed"]
            if f["allowed"]:
                held.append((at + hold_ms, f["token"], cls))
        for cls in holding:
            holding[cls].append(sum(1 for h in held if h[2] == cls))
    conn.close()
    return out, holding


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_overload_keeps_critical(make_server, redis, store):
    srv = make_server(config_text=SHED % "", extra=redis_url(redis) if store == "redis" else ())
    # capacity 100 slots of ~100 ms: 1000/s; offered 3000/s for 5 s
    mix = [("critical", 0.2, 0), ("default", 0.2, 0), ("sheddable", 0.4, 0), ("batch", 0.2, 0)]
    out, _ = overload(srv, "backend", mix, 3000, 5)
    share = {c: a / o for c, (o, a) in out.items()}
    print("admitted at 3x overload:", {c: "%.1f %%" % (100 * s) for c, s in share.items()})
    assert share["critical"] >= 0.99, share
    assert share["sheddable"] < 0.05 and share["batch"] < 0.05, share
    assert share["default"] < share["critical"]
    # a refusal names the class shed: problem+json, a header, a metric label (requests
    # keyed from their attributes count apart from SL.ACQUIRE's explicit keys)
    for _ in range(50):
        assert requests.get(srv.http + "/v1/auth", headers={"X-Priority": "default"}, timeout=5).status_code == 200
    r = requests.get(srv.http + "/v1/auth", headers={"X-Priority": "batch"}, timeout=5)
    assert r.status_code == 429 and r.headers["X-Sluice-Shed"] == "batch"
    problem = json.loads(r.headers["X-Sluice-Problem"])
    assert problem["shed_class"] == "batch" and problem["reason"] in ("priority", "full"), problem
    assert r.json()["shed_class"] == "batch"
    m = requests.get(srv.admin + "/metrics", timeout=5).text
    assert metric(m, "sluice_shed_total", policy="backend", **{"class": "batch"}) is not None
    assert metric(m, "sluice_shed_total", policy="backend", **{"class": "sheddable", "reason": "priority"}) > 0


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_reserve_holds_when_sheddable_came_first(make_server, redis, store):
    srv = make_server(config_text=SHED % "", extra=redis_url(redis) if store == "redis" else ())
    # sheddable floods from 0 at 3x; critical arrives at 2 s asking for ~60 slots
    mix = [("sheddable", 0.83, 0), ("critical", 0.17, 2000)]
    out, holding = overload(srv, "reserved", mix, 3600, 5)
    crit = holding["critical"][2200 // 20:]
    shed = holding["sheddable"][2200 // 20:]
    print("critical held %.1f slots on average, sheddable at most %d" % (sum(crit) / len(crit), max(shed)))
    assert sum(crit) / len(crit) >= 29, sum(crit) / len(crit)
    assert max(shed) <= 70
    assert out["critical"][1] > 0 and out["sheddable"][1] > 0


# ---- borrowing -----------------------------------------------------------------------------------

BORROW = """
workers: 1
policies:
  - name: platform
    key: []
    algorithm: fixed_window
    limits: [ { rate: 100/s } ]
    borrow:
      tiers: [platform, product]
      product: { from: header.x-product, share: 50/s, cap: 80/s }
      reclaim: 2s
"""


def borrow_round(srv, asks, ms):
    """asks: [(product, n)] interleaved at one clock reading; admitted per product."""
    c = srv.resp()
    cmds, who = [], []
    order = []
    for p, n in asks:
        order += [p] * n
    random.Random(ms).shuffle(order)
    for p in order:
        cmds.append(("SL.CHECKREQ", "HEADER", "x-product", p))
        who.append(p)
    got = {p: 0 for p, _ in asks}
    for p, rep in zip(who, pipeline(c, cmds)):
        got[p] += fields(rep)["allowed"]
    c.close()
    return got


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_borrowing_returns_within_one_window(make_server, redis, store):
    srv = make_server(config_text=BORROW, extra=redis_url(redis) if store == "redis" else ())
    now = srv.clock_advance(0)
    srv.clock_advance(1000 - now % 1000 + 10)  # 10 ms into a second
    # B alone: borrows A's idle share up to its cap
    assert borrow_round(srv, [("B", 150)], 1) == {"B": 80}
    # A arrives in the same window: what is left (20) is A's; A refused within its share
    assert borrow_round(srv, [("A", 40)], 2) == {"A": 20}
    # every later window while A is active: A gets its whole share, B is held to its own
    for w in range(3):
        srv.clock_advance(1000)
        got = borrow_round(srv, [("A", 60), ("B", 150)], 3 + w)
        assert got == {"A": 50, "B": 50}, (w, got)
    # A idle past the reclaim: B borrows again, never beyond its cap
    srv.clock_advance(4000)
    assert borrow_round(srv, [("B", 150)], 9) == {"B": 80}
    # the refusal says which tier: the JSON verdict names the tier limit
    r = requests.post(srv.http + "/v1/check", json={"request": {"headers": {"x-product": "B"}}}, timeout=5)
    assert r.status_code == 429 and r.json()["deciding"] == "platform.product", r.text


# ---- penalties --------------------------------------------------------------------------------------

PENALTY = """
workers: 1
policies:
  - name: login-by-address
    match: { method: POST, path: /login }
    key: [client_ip]
    algorithm: fixed_window
    limits: [ { rate: 5/10s } ]
    on_exceed:
      penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h }
  - name: login-by-account
    match: { method: POST, path: /login }
    key: [header.x-user]
    algorithm: fixed_window
    limits: [ { rate: 20/h } ]
    on_exceed:
      penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h, challenge: always }
      challenge: { status: 401, header: "X-Challenge: captcha" }
"""


def login(srv, ip, user):
    h = {"X-Original-Method": "POST", "X-Original-URI": "/login", "X-Forwarded-For": ip, "X-User": user}
    return requests.get(srv.http + "/v1/auth", headers=h, timeout=5)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_penalty_escalates_and_decays(make_server, redis, store):
    srv = make_server(config_text=PENALTY, extra=redis_url(redis) if store == "redis" else ())
    for i in range(5):
        assert login(srv, "198.51.100.7", "u%d" % i).status_code == 200
    r = login(srv, "198.51.100.7", "u9")  # the limit refuses: a violation, blocked 1 min
    assert r.status_code == 429 and r.headers["Retry-After"] == "60", r.headers
    assert r.json()["penalty"] == {"level": 1, "action": "block"}
    srv.clock_advance(30000)
    # blocked: refused by the penalty, the address's window untouched
    r = login(srv, "198.51.100.7", "u9")
    assert r.status_code == 429 and r.headers["Retry-After"] == "30"
    srv.clock_advance(31000)  # the block is over (and the 10 s window): 5 pass, then level 2, 2 min
    for i in range(5):
        assert login(srv, "198.51.100.7", "w%d" % i).status_code == 200
    r = login(srv, "198.51.100.7", "u9")
    assert r.status_code == 429 and r.headers["Retry-After"] == "120" and r.json()["penalty"]["level"] == 2
    srv.clock_advance(121000)
    for i in range(5):
        assert login(srv, "198.51.100.7", "x%d" % i).status_code == 200
    r = login(srv, "198.51.100.7", "u9")
    assert r.headers["Retry-After"] == "240" and r.json()["penalty"]["level"] == 3
    # a day clean after the block forgives a level: the next violation is level 3 again
    srv.clock_advance((240 + 86400) * 1000)
    for i in range(5):
        assert login(srv, "198.51.100.7", "v%d" % i).status_code == 200
    r = login(srv, "198.51.100.7", "v9")
    assert r.json()["penalty"]["level"] == 3 and r.headers["Retry-After"] == "240"
    m = requests.get(srv.admin + "/metrics", timeout=5).text
    assert metric(m, "sluice_penalties_total", policy="login-by-address", event="violation") == 4
    assert metric(m, "sluice_penalties_total", policy="login-by-address", event="block") == 1


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_rotating_attacker_cannot_block_the_owner(make_server, redis, store):
    """200 addresses try one account, 6 attempts each, one every 6 s, for 2 hours; the
    owner logs in every 10 minutes from her own address. Blocks are keyed on the address,
    the account's limit only ever challenges: the owner is never blocked."""
    srv = make_server(config_text=PENALTY, extra=redis_url(redis) if store == "redis" else ())
    attacker = {"attempts": 0, "refused": 0}
    owner = {"ok": 0, "challenged": 0, "blocked": 0}
    c = srv.resp()
    t = 0
    for minute in range(120):
        for step in range(10):  # one attempt every 6 s
            n = (minute * 10 + step)
            ip = "203.0.%d.%d" % ((n // 6) // 250, (n // 6) % 250 + 1)
            rep = fields(c.command("SL.CHECKREQ", "METHOD", "POST", "PATH", "/login", "IP", ip,
                                   "HEADER", "x-user", "alice"))
            attacker["attempts"] += 1
            attacker["refused"] += 1 - rep["allowed"]
            if minute % 10 == 0 and step == 0:
                r = login(srv, "192.0.2.1", "alice")
                if r.status_code == 200:
                    owner["ok"] += 1
                elif r.status_code == 401:
                    owner["challenged"] += 1
                    assert r.headers["X-Challenge"] == "captcha"
                    assert r.json()["challenge"] is True if "challenge" in r.json() else True
                else:
                    owner["blocked"] += 1
            c.command("SL.CLOCK", "ADVANCE", 6000)
            t += 6
    c.close()
    print("attacker", attacker, "owner", owner)
    assert owner["blocked"] == 0 and owner["ok"] + owner["challenged"] == 12
    assert attacker["refused"] > attacker["attempts"] * 0.8


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_challenge_is_passed(make_server, redis, store):
    srv = make_server(config_text=PENALTY, extra=redis_url(redis) if store == "redis" else ())
    for i in range(20):
        assert login(srv, "192.0.2.%d" % (i + 1), "bob").status_code == 200
    r = login(srv, "192.0.2.50", "bob")
    assert r.status_code == 401 and r.headers["X-Challenge"] == "captcha", (r.status_code, r.headers)
    assert r.json()["penalty"] == {"level": 1, "action": "challenge"}
    # solved: the challenge period ends (the limit still refuses: a new violation, level 2)
    body = {"request": {"method": "POST", "path": "/login", "client_ip": "192.0.2.50", "headers": {"x-user": "bob"}}}
    r = requests.post(srv.http + "/v1/challenge/pass", json=body, timeout=5)
    assert r.status_code == 200 and r.json() == {"passed": True}, r.text
    r = requests.post(srv.http + "/v1/challenge/pass", json=body, timeout=5)
    assert r.status_code == 404  # nothing running any more
    r = login(srv, "192.0.2.51", "bob")
    assert r.status_code == 401 and r.json()["penalty"]["level"] == 2
    # RESP: SL.PASS with the explicit key of the account policy
    c = srv.resp()
    f = fields(c.command("SL.CHECK", "login-by-account", "carol"))
    for _ in range(20):
        f = fields(c.command("SL.CHECK", "login-by-account", "carol"))
    assert f["allowed"] == 0 and f["penalty_action"] == b"challenge"
    assert c.command("SL.PASS", "login-by-account", "carol") == "OK"
    assert c.command("SL.PASS", "login-by-account", "carol").startswith("ERR no challenge")
    c.close()


# ---- the Redis store answers as the memory store does ---------------------------------------------

PARITY = """
workers: 1
policies:
  - name: backend
    key: [header.x-b]
    on_missing_key: skip
    algorithm: adaptive_concurrency
    limits:
      - { min: 2, max: 200, initial: 10, lease: 60s, controller: vegas, window: 200ms }
    priority_from: header.x-priority
    classes: [ { name: critical }, { name: default, fill: 80% }, { name: batch, fill: 50% } ]
  - name: tb
    key: [header.x-k]
    on_missing_key: skip
    algorithm: token_bucket
    limits: [ { rate: 100/s, burst: 50 } ]
    priority_from: header.x-priority
    classes: [ { name: critical, reserve: 20% }, { name: default }, { name: batch, fill: 40% } ]
  - name: cc
    key: [header.x-c]
    on_missing_key: skip
    algorithm: concurrency
    limits: [ { max: 10, lease: 60s } ]
    priority_from: header.x-priority
    classes: [ { name: critical, reserve: 20% }, { name: default }, { name: batch, fill: 40% } ]
"""

# What does not depend on how each store aligns lease buckets on its clock (the memory
# store counts on the monotonic clock, the Redis store on the shared wall clock): the
# verdict, the budget, the adaptive view, the class shed.
SAME = ("allowed", "action", "policy", "limit", "remaining", "adaptive_limit", "noload_us", "in_flight",
        "shed_class", "shed_reason", "penalty_level", "penalty_action")


def scripted(srv, seed=11):
    """A fixed mixture of decisions and releases on the adaptive, token bucket and
    class-limited concurrency policies (nothing held long enough to expire); the fields of
    every reply that both stores must agree on."""
    rng = random.Random(seed)
    c = srv.resp()
    out, held = [], []
    for step in range(3000):
        cmds = [("SL.CLOCK", "ADVANCE", rng.choice([1, 2, 5, 20]))]
        kind = rng.random()
        cls = rng.choice(["critical", "default", "batch", "nosuch"])
        if kind < 0.4:
            cmds.append(("SL.ACQUIRE", "backend", "", "CLASS", cls))
        elif kind < 0.7:
            cmds.append(("SL.CHECKREQ", "HEADER", "x-k", "k%d" % rng.randrange(3), "HEADER", "x-priority", cls,
                         "COST", rng.choice([1, 5, 20])))
        else:
            cmds.append(("SL.CHECKREQ", "HEADER", "x-c", "c", "HEADER", "x-priority", cls))
        while held and (rng.random() < 0.45 or len(held) > 40):
            tok, lat = held.pop(rng.randrange(len(held)))
            cmds.append(("SL.RELEASE", tok, "LATENCY", lat, "OUTCOME", rng.choice(["ok", "ok", "ok", "error", "dropped"])))
        for rep in pipeline(c, cmds)[1:]:
            if isinstance(rep, list):
                f = fields(rep)
                if f.get("token"):
                    held.append((f["token"], "%.3f" % rng.uniform(1, 80)))
                out.append(sorted((k, v) for k, v in f.items() if k in SAME))
            else:
                out.append(rep)
    # a fresh key filled by one class: what is left is the critical reserve
    for rep in pipeline(c, [("SL.CHECKREQ", "HEADER", "x-c", "c2", "HEADER", "x-priority", "default")] * 12 +
                        [("SL.CHECKREQ", "HEADER", "x-k", "k9", "HEADER", "x-priority", "default", "COST", 9)] * 6):
        out.append(sorted((k, v) for k, v in fields(rep).items() if k in SAME))
    c.close()
    return out


def test_redis_store_answers_like_the_memory_store(make_server, redis):
    mem = make_server(config_text=PARITY)
    red = make_server(config_text=PARITY, extra=redis_url(redis))
    a, b = scripted(mem), scripted(red)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    assert first is None, (first, a[first], b[first])
    assert len(a) == len(b) > 3000
    # the traffic moved the controller and shed classes (else agreeing would prove little)
    limits = {dict(x).get("adaptive_limit") for x in a if isinstance(x, list)} - {None}
    sheds = {dict(x).get("shed_reason") for x in a if isinstance(x, list)} - {None}
    assert len(limits) >= 3 and sheds >= {b"priority", b"reserved"}, (limits, sheds)
    m = requests.get(red.admin + "/metrics", timeout=5).text
    assert metric(m, "sluice_redis_events_total", event="mismatches") == 0


# ---- gRPC (RLS): a descriptor's class -------------------------------------------------------------

GRPC = """
workers: 1
policies:
  - name: search
    match: { domain: edge }
    key: [descriptor.route]
    algorithm: token_bucket
    limits: [ { rate: 1/h, burst: 10 } ]
    priority_from: descriptor.priority
    classes: [ { name: critical }, { name: batch, fill: 50% } ]
    on_missing_class: batch
"""


def test_grpc_sheds_by_class(make_server, pb):
    from conftest import Client
    srv = make_server(config_text=GRPC)
    c = Client(pb, srv)
    batch = [[("route", "search"), ("priority", "batch")]]
    crit = [[("route", "search"), ("priority", "critical")]]
    codes = [c.check("edge", batch).overall_code for _ in range(8)]
    assert codes == [1] * 5 + [2] * 3, codes  # batch: half the bucket
    codes = [c.check("edge", crit).overall_code for _ in range(6)]
    assert codes == [1] * 5 + [2], codes      # critical: the rest
    c.close()


# ---- sluice simulate: the capacity patterns ---------------------------------------------------------

def test_simulate_capacity_patterns(tmp_path):
    import subprocess
    from conftest import BIN
    out = {}
    for p in ("adaptive", "shed", "borrow", "penalty"):
        r = subprocess.run([BIN, "simulate", p, "--svg", str(tmp_path)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / ("simulate-%s.svg" % p)).read_text().startswith("<svg") or \
            "<svg" in (tmp_path / ("simulate-%s.svg" % p)).read_text()
        out[p] = r.stdout
    # each controller: settled, steady within 25 % of the knee (20), swinging at most 20 %
    for ctl in ("gradient2", "vegas", "aimd"):
        m = re.search(r"^%s\s+([\d.]+) s\s+([\d.]+) \(\s*(\d+) %%\)\s+([\d.]+) s\s+([\d.]+) \(\s*(\d+) %%\)" % ctl,
                      out["adaptive"], re.M)
        assert m, out["adaptive"]
        settle, mean, p2p, track, hmean, hp2p = (float(x) for x in m.groups())
        assert settle <= 10 and abs(mean - 20) <= 5 and p2p <= 20 and track <= 5 and abs(hmean - 10) <= 2.5
    shares = dict(re.findall(r"^(critical|default|sheddable|batch)\s.*?([\d.]+) %$", out["shed"], re.M))
    assert float(shares["critical"]) >= 99 and float(shares["sheddable"]) < 5, shares
    a = [int(x) for x in re.search(r"^A\s+(.*)$", out["borrow"], re.M).group(1).split()]
    b = [int(x) for x in re.search(r"^B\s+(.*)$", out["borrow"], re.M).group(1).split()]
    assert a[6:] == [50] * 6 and max(b) == 80 and b[6:] == [50] * 6, (a, b)
    total = re.search(r"^all\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", out["penalty"], re.M).groups()
    assert int(total[4]) == 0 and int(total[2]) + int(total[3]) == 60, total


def test_class_by_operation_and_missing_class(make_server):
    srv = make_server(config_text="""
workers: 1
policies:
  - name: api
    key: []
    algorithm: token_bucket
    limits: [ { rate: 1/h, burst: 10 } ]
    priority_from: { "POST /reindex": batch, "GET /search*": critical, from: header.x-priority }
    classes: [ { name: critical }, { name: default, fill: 80% }, { name: batch, fill: 30% } ]
""")
    def cls(method, path, prio=None):
        req = {"method": method, "path": path, "headers": {"x-priority": prio} if prio else {}}
        r = requests.post(srv.http + "/v1/check", json={"request": req}, timeout=5)
        return r.json()["limits"][0]["class"], r.status_code
    assert cls("POST", "/reindex", "critical") == ("batch", 200)   # the operation wins
    assert cls("GET", "/search/q") == ("critical", 200)
    assert cls("GET", "/other", "batch") == ("batch", 200)         # the attribute
    assert cls("GET", "/other", "vip") == ("default", 200)         # unknown: on_missing_class
    assert cls("GET", "/other") == ("default", 200)                # missing
    # 4 of 10 taken: batch (30 %) is shed, default (80 %) still admitted
    assert cls("POST", "/reindex") == ("batch", 429)
    assert cls("GET", "/x", "default") == ("default", 200)
