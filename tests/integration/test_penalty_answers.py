# SPDX-License-Identifier: Apache-2.0
"""While a key is blocked by a penalty, every answer says so, on every protocol
(/v1/check, /v1/auth, RESP SL.CHECK, gRPC RLS): refused, remaining 0 and a retry-after
that is the block's remaining time, not the state of the window it watches (which resets
during the block, or which a cost above its limit never fits)."""
import pytest
import requests

from conftest import Client, as_dict

START_MS = 1767225600000  # 2026-01-01 00:00:00 UTC: fixed windows of 10 s align here

CONFIG = """
workers: 1
policies:
  - name: pen-fw
    match: { path_prefix: /pen }
    key: [header.x-k]
    algorithm: fixed_window
    limits: [ { rate: 3/10s } ]
    on_exceed:
      penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h }
  - name: pen-grpc
    match: { domain: edge }
    key: [descriptor.k]
    algorithm: fixed_window
    limits: [ { rate: 3/10s } ]
    on_exceed:
      penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h }
"""


class Http:
    """/v1/check naming the policy and the key."""

    def __init__(self, srv, key):
        self.srv, self.key = srv, key

    def ask(self, cost=None):
        body = {"policy": "pen-fw", "key": self.key}
        if cost is not None:
            body["cost"] = cost
        j = requests.post(self.srv.http + "/v1/check", json=body, timeout=5).json()
        win = [l for l in j["limits"] if not l.get("penalty")][0]
        h = j.get("headers", {})
        retry = j["retry_after_ms"]
        return {"allowed": j["allowed"], "remaining": win["remaining"],
                "retry_s": None if retry is None or retry < 0 else -(-retry // 1000),
                "ratelimit": h.get("RateLimit"), "retry_after": h.get("Retry-After")}


class Auth:
    """/v1/auth, as a gateway asks."""

    def __init__(self, srv, key):
        self.srv, self.key = srv, key

    def ask(self, cost=None):
        h = {"X-Original-URI": "/pen/x", "X-K": self.key}
        r = requests.get(self.srv.http + "/v1/auth", headers=h, timeout=5)
        ra = r.headers.get("Retry-After")
        rl = r.headers.get("RateLimit", "")
        rem = int(rl.split(";r=")[1].split(";")[0]) if ";r=" in rl else None
        return {"allowed": r.status_code == 200, "remaining": rem, "retry_s": int(ra) if ra else None,
                "ratelimit": rl or None, "retry_after": ra}


class Resp:
    def __init__(self, srv, key):
        self.c, self.key = srv.resp(), key

    def ask(self, cost=None):
        args = ["SL.CHECK", "pen-fw", self.key] + (["COST", str(cost)] if cost is not None else [])
        d = as_dict(self.c.command(*args))
        ms = d["retry_after_ms"]
        return {"allowed": bool(d["allowed"]), "remaining": d["remaining"],
                "retry_s": None if ms < 0 else -(-ms // 1000), "ratelimit": None, "retry_after": None}


class Grpc:
    def __init__(self, srv, key, pb):
        self.c, self.key = Client(pb, srv), key

    def ask(self, cost=None):
        d = {"entries": [("k", self.key)]}
        if cost is not None:
            d["hits"] = cost
        r = self.c.check("edge", [d])
        hdr = {h.key: h.value for h in r.response_headers_to_add}
        st = r.statuses[0]
        ra = hdr.get("Retry-After")
        return {"allowed": r.overall_code == 1, "remaining": st.limit_remaining,
                "retry_s": int(ra) if ra else None, "ratelimit": hdr.get("RateLimit"), "retry_after": ra,
                "reset_s": st.duration_until_reset.seconds}


def blocked(a, retry_s, name):
    assert a["allowed"] is False, a
    assert a["remaining"] == 0, a
    assert a["retry_s"] == retry_s, a
    if a["ratelimit"] is not None:
        assert a["ratelimit"] == '"%s";r=0;t=%d' % (name, retry_s), a
    if a["retry_after"] is not None:
        assert a["retry_after"] == str(retry_s), a


def protocols(srv, pb, tag):
    return [("http", Http(srv, "h" + tag), "pen-fw"), ("auth", Auth(srv, "a" + tag), "pen-fw"),
            ("resp", Resp(srv, "r" + tag), "pen-fw"), ("grpc", Grpc(srv, "g" + tag, pb), "pen-grpc")]


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_block_outlives_the_window(make_server, pb, request, store):
    """The window resets during the block: still refused, remaining 0, retry-after the
    block's rest (was: RateLimit "pen-fw";r=3;t=0 and the window's remaining)."""
    extra = ()
    if store == "redis":
        r = request.getfixturevalue("redis")
        extra = ("--store", "redis://127.0.0.1:%d?timeout_ms=2000" % r.port)
    srv = make_server(config_text=CONFIG, extra=extra)
    srv.clock_set(START_MS)
    ps = protocols(srv, pb, "1")
    for name, p, pol in ps:
        assert [p.ask()["allowed"] for _ in range(3)] == [True] * 3, name
        blocked(p.ask(), 60, pol)  # the violation: a block of 1 min
    srv.clock_advance(15000)       # the 10 s window has reset; 45 s of block left
    for name, p, pol in ps:
        blocked(p.ask(), 45, pol)
    srv.clock_advance(44000)       # the last second of the block, in a fresh window again
    for name, p, pol in ps:
        blocked(p.ask(), 1, pol)
    srv.clock_advance(1000)        # over: the window decides again
    for name, p, pol in ps:
        a = p.ask()
        assert a["allowed"] is True and a["remaining"] == 2, (name, a)


def test_cost_above_the_limit_starts_a_block(make_server, pb):
    """A cost the limit can never admit is a violation: the answer is the block it
    started (was: retry-after never and the window's remaining 3)."""
    srv = make_server(config_text=CONFIG)
    srv.clock_set(START_MS)
    for name, p, pol in protocols(srv, pb, "2"):
        if name == "auth":
            continue  # /v1/auth costs 1 per request
        blocked(p.ask(cost=5), 60, pol)
        blocked(p.ask(), 60, pol)   # and a cost that would fit is refused by the block


def test_block_ending_with_its_window(make_server, pb):
    """A block that ends when the window does (the window was used 1 of 3 when the
    block began) still reports remaining 0 until it ends (was: the window's 2)."""
    cfg = CONFIG.replace("rate: 3/10s", "rate: 3/1m")
    srv = make_server(config_text=cfg)
    srv.clock_set(START_MS)
    ps = protocols(srv, pb, "3")
    for name, p, pol in ps:
        if name == "auth":  # /v1/auth costs 1 per request: the fourth is the violation
            assert [p.ask()["allowed"] for _ in range(3)] == [True] * 3
            blocked(p.ask(), 60, pol)
            continue
        assert p.ask()["allowed"] is True, name
        blocked(p.ask(cost=3), 60, pol)  # 1 + 3 > 3: a violation, the window keeps 1 used
    srv.clock_advance(30000)
    for name, p, pol in ps:
        blocked(p.ask(), 30, pol)
