# SPDX-License-Identifier: Apache-2.0
"""The validation plan of DESIGN.md over HTTP, on the test clock, against the `api`
policy (token bucket B=20, r=10/s per x-api-key): steady traffic under the rate, a burst
after idle with an exact Retry-After, independent identities, weighted costs, rejected
requests consuming nothing, refill/expiry, and a config change mid-window."""
import requests


def check(s, server, key, cost=None):
    body = {"policy": "api", "key": key}
    if cost is not None:
        body["cost"] = cost
    r = s.post(server.http + "/v1/check", json=body, timeout=5)
    j = r.json()
    assert (r.status_code == 200) == j["allowed"], (r.status_code, j)
    return j


def auth(s, server, key):
    return s.get(server.http + "/v1/auth", headers={"X-Api-Key": key}, timeout=5)


def test_1_steady_8_per_second_never_rejected(server):
    s = requests.Session()
    for i in range(8 * 30):
        assert auth(s, server, "steady").status_code == 200, i
        server.clock_advance(125)


def test_2_burst_after_idle_exactly_20_with_exact_retry_after(server):
    s = requests.Session()
    check(s, server, "bursty")
    server.clock_advance(60_000)  # idle: the bucket is full again
    results = [check(s, server, "bursty") for _ in range(30)]
    assert [r["allowed"] for r in results] == [True] * 20 + [False] * 10
    assert results[19]["limits"][0]["remaining"] == 0
    retry_ms = results[20]["retry_after_ms"]
    assert retry_ms == 100  # one token every 100 ms
    r = s.post(server.http + "/v1/check", json={"policy": "api", "key": "bursty"}, timeout=5)
    assert r.status_code == 429 and r.headers["Retry-After"] == "1"
    assert r.json()["headers"]["Retry-After"] == "1"
    server.clock_advance(retry_ms - 1)
    assert check(s, server, "bursty")["allowed"] is False  # 1 ms early: still limited
    server.clock_advance(1)
    assert check(s, server, "bursty")["allowed"] is True   # exactly on time: admitted
    assert check(s, server, "bursty")["allowed"] is False


def test_3_four_identities_are_independent(server):
    s = requests.Session()
    keys = ["id-%d" % i for i in range(4)]
    admitted = {k: 0 for k in keys}
    for _ in range(30):
        for k in keys:  # interleaved
            admitted[k] += check(s, server, k)["allowed"]
    assert admitted == {k: 20 for k in keys}
    # one identity exhausted does not affect a fifth
    assert check(s, server, "id-new")["limits"][0]["remaining"] == 19


def test_6_weighted_costs_rejections_refill_and_reload(server):
    s = requests.Session()
    j = check(s, server, "w", cost=5)
    assert j["allowed"] and j["limits"][0]["remaining"] == 15
    j = check(s, server, "w", cost=15)
    assert j["allowed"] and j["limits"][0]["remaining"] == 0
    # a rejected request consumes nothing: after 300 ms exactly 3 tokens are there
    for _ in range(5):
        assert check(s, server, "w")["allowed"] is False
    server.clock_advance(300)
    assert check(s, server, "w", cost=0)["limits"][0]["remaining"] == 3
    j = check(s, server, "w", cost=4)
    assert j["allowed"] is False and j["retry_after_ms"] == 100
    # config change mid-window: the same policy reloaded keeps its counters
    r = s.post(server.admin + "/v1/reload", timeout=5)
    assert r.status_code == 200 and r.json()["reloaded"] is True
    assert check(s, server, "w", cost=0)["limits"][0]["remaining"] == 3
    # expiry: after 2 s idle the bucket is full, as for a key never seen
    server.clock_advance(2000)
    assert check(s, server, "w", cost=0)["limits"][0]["remaining"] == 20
