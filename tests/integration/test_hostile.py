# SPDX-License-Identifier: Apache-2.0
"""Regressions from an attacker's review (each failed before its fix): long bearer tokens
as keys of several policies, oversized keys, a zero-limit override, a zero cost in the
request form, tokens that must not carry the key, release/settle tokens used for the
other operation."""
import json

import requests

from conftest import Server, as_dict

JWT = """
policies:
  - name: per-token
    objective: fairness
    key: [header.authorization]
    algorithm: gcra
    limits: [ { rate: 100/s, burst: 100 } ]
  - name: per-token-day
    objective: cost
    key: [header.authorization]
    algorithm: quota
    limits: [ { quota: 100000/day } ]
  - name: per-token-burst
    objective: protection
    key: [header.authorization]
    algorithm: token_bucket
    limits: [ { rate: 10/s, burst: 50 } ]
"""


def test_a_long_bearer_token_keys_several_policies():
    """One 1,400-character bearer token is the key of three policies: stored once in the
    decision, admitted (before: 500 for every such user). Beyond what a decision can hold,
    the answer is a 400 that says so, never a 500 or an "allowed"."""
    s = Server(config_text=JWT)
    try:
        tok = "Bearer " + "x" * 1400
        r = requests.get(s.http + "/v1/auth", headers={"Authorization": tok, "X-Original-URI": "/a"}, timeout=5)
        assert r.status_code == 200, r.text
        assert r.headers.get("RateLimit-Policy", "").count("per-token") >= 1 or "RateLimit" in r.headers
        huge = "Bearer " + "y" * 5000
        r = requests.post(s.http + "/v1/check", json={"request": {"headers": {"authorization": huge}}},
                          timeout=5)
        assert r.status_code == 400, r.text
        body = r.json()
        assert body.get("allowed") is False and "too long" in body.get("error", ""), body
        # an explicit key over the limit: 400, not allowed
        r = requests.post(s.http + "/v1/check", json={"policy": "per-token", "key": "k" * 6000}, timeout=5)
        assert r.status_code == 400 and r.json().get("allowed") is False, r.text
        c = s.resp()
        got = c.command("SL.CHECK", "per-token", "k" * 6000)
        assert str(got).startswith("ERR") and "too long" in str(got), got
        c.close()
    finally:
        s.stop()
    s.assert_clean()


UPLOADS = """
policies:
  - name: uploads
    objective: cost
    match: { method: PUT }
    key: [header.x-api-key]
    cost: { default: 1000 }
    algorithm: token_bucket
    limits: [ { rate: 1000/min, burst: 5000 } ]
"""


def test_a_zero_cost_in_the_request_form_is_a_check():
    """COST 0 (RESP) or "cost": 0 (/v1/check) with the request's attributes takes nothing,
    as in the explicit form (before: the policy's default cost, 1000 units, each time);
    a stated cost replaces the policy's."""
    s = Server(config_text=UPLOADS)
    try:
        c = s.resp()
        for _ in range(3):
            d = as_dict(c.command("SL.CHECKREQ", "METHOD", "PUT", "PATH", "/f", "HEADER", "x-api-key", "c0",
                                  "COST", 0))
            assert d["allowed"] == 1 and d["remaining"] == 5000, d
        d = as_dict(c.command("SL.CHECKREQ", "METHOD", "PUT", "PATH", "/f", "HEADER", "x-api-key", "c0",
                              "COST", 7))
        assert d["remaining"] == 4993, d
        c.close()
        for _ in range(2):
            r = requests.post(s.http + "/v1/check", json={"request": {"method": "PUT", "path": "/f",
                              "headers": {"x-api-key": "c0"}}, "cost": 0}, timeout=5)
            assert r.status_code == 200 and json.loads(r.text)["allowed"] is True, r.text
        c = s.resp()
        assert as_dict(c.command("SL.CHECKREQ", "METHOD", "PUT", "PATH", "/f", "HEADER", "x-api-key", "c0",
                                 "COST", 0))["remaining"] == 4993
        c.close()
    finally:
        s.stop()
    s.assert_clean()


def test_a_zero_limit_override_is_over_limit(make_server, pb):
    """An Envoy descriptor with its own limit of 0 per unit is always OVER_LIMIT, as
    envoyproxy/ratelimit answers (before: unlimited, remaining 4294967292)."""
    from test_grpc_rls import start
    s, c = start(make_server, pb, "05-unlimited.yaml")
    for _ in range(3):
        r = c.check("internal", [{"entries": [("azure", "zero")], "limit": (0, 2)}])
        assert r.overall_code == 2 and r.statuses[0].code == 2, r  # OVER_LIMIT
    c.close()


TOKENS = """
policies:
  - name: slots
    objective: protection
    match: { path_prefix: /slow }
    key: [header.x-api-key]
    algorithm: concurrency
    limits: [ { max: 3, lease: 30s } ]
  - name: ai
    objective: cost
    match: { path_prefix: /ai }
    key: [header.x-api-key]
    cost: { default: 100, settle: true }
    algorithm: token_bucket
    limits: [ { rate: 1000/min, burst: 1000 } ]
"""


def test_tokens_carry_no_key_and_refuse_the_wrong_operation():
    """A settle/release token travels through gateways and logs: it must not carry the
    API key that keyed the decision (before: the key in hex). A lease token used to
    settle, or a reservation token used to release, is refused as such (before: OK, and
    nothing done)."""
    s = Server(config_text=TOKENS)
    try:
        secret = "sk-live-4242-tenant"
        hexkey = secret.encode().hex()
        r = requests.get(s.http + "/v1/auth", headers={"X-Api-Key": secret, "X-Original-URI": "/slow/x"},
                         timeout=5)
        lease_tok = r.headers["X-Sluice-Token"]
        r = requests.get(s.http + "/v1/auth", headers={"X-Api-Key": secret, "X-Original-URI": "/ai/x"},
                         timeout=5)
        settle_tok = r.headers["X-Sluice-Token"]
        for t in (lease_tok, settle_tok):
            assert secret not in t and hexkey not in t, t
        c = s.resp()
        got = c.command("SL.SETTLE", lease_tok, 5)
        assert str(got).startswith("ERR this token holds nothing"), got
        got = c.command("SL.RELEASE", settle_tok)
        assert str(got).startswith("ERR this token holds nothing"), got
        # used as meant, they work: the slot comes back, the cost is settled
        assert c.command("SL.RELEASE", lease_tok) == "OK"
        assert c.command("SL.SETTLE", settle_tok, 40) == "OK"
        d = as_dict(c.command("SL.CHECKREQ", "PATH", "/ai/y", "HEADER", "x-api-key", secret, "COST", 0))
        assert d["remaining"] == 960, d  # 1000 - 40 actual
        c.close()
        r = requests.post(s.http + "/v1/settle", json={"token": lease_tok, "actual": 1}, timeout=5)
        assert r.status_code in (400, 404), r.text  # used already, or the wrong operation
    finally:
        s.stop()
    s.assert_clean()


def test_the_shipped_login_policy_covers_the_usual_spellings():
    """examples/sluice.yaml's brute-force policy: /login/, /login;jsessionid=1 and
    /login%00 count against the same budget as /login (before: an exact path, and those
    spellings were never limited)."""
    import os
    from conftest import SRC
    s = Server(config_path=os.path.join(SRC, "examples", "sluice.yaml"), test_clock=True)
    try:
        codes = []
        for uri in ["/login", "/login/", "/login;jsessionid=1", "/login%00", "/login/?x=1", "/login", "/login/"]:
            r = requests.get(s.http + "/v1/auth", headers={"X-Original-Method": "POST", "X-Original-URI": uri,
                                                           "X-Forwarded-For": "203.0.113.9"}, timeout=5)
            codes.append(r.status_code)
        assert codes[:5] == [200] * 5 and codes[5:] == [429, 429], codes
    finally:
        s.stop()
    s.assert_clean()


MISSING = """
policies:
  - name: needs-tenant
    objective: fairness
    key: [header.x-tenant]
    on_missing_key: reject
    algorithm: gcra
    limits: [ { rate: 10/s } ]
"""


def test_errors_say_what_is_wrong():
    """A body that is not JSON says the parser's words and place (before: "the body must
    be a JSON object" for a too-big integer or a NUL in a string); a request missing the
    key a policy needs reads action missing_key with that policy on RESP (before: reject
    and no policy, as if limited); a client name with a newline is refused, as Redis does."""
    s = Server(config_text=MISSING)
    try:
        r = requests.post(s.http + "/v1/check", data='{"policy":"needs-tenant","key":"a","cost":9223372036854775808}',
                          headers={"Content-Type": "application/json"}, timeout=5)
        assert r.status_code == 400 and "invalid JSON" in r.json()["detail"], r.text
        r = requests.post(s.http + "/v1/check", data='{"policy":"needs-tenant","key":"a\\u0000b"}', timeout=5)
        assert r.status_code == 400 and "invalid JSON" in r.json()["detail"], r.text
        # a policy that is not a string is the caller's error (it was read as the request
        # form, and the pass endpoint answered 404)
        for path in ("/v1/check", "/v1/challenge/pass", "/v1/acquire"):
            r = requests.post(s.http + path, json={"policy": 5, "key": "a"}, timeout=5)
            assert r.status_code == 400 and r.headers["Content-Type"].startswith("application/problem+json"), (path, r.text)
            assert '"policy" must be a string' in r.json()["detail"], (path, r.text)
        c = s.resp()
        d = as_dict(c.command("SL.CHECKREQ", "PATH", "/x"))
        assert d["allowed"] == 0 and d["action"] == b"missing_key" and d["policy"] == b"needs-tenant", d
        assert str(c.command("CLIENT", "SETNAME", "evil\r\nname")).startswith("ERR Client names")
        assert c.command("CLIENT", "SETNAME", "worker-1") == "OK"
        c.close()
    finally:
        s.stop()
    s.assert_clean()
