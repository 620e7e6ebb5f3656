# SPDX-License-Identifier: Apache-2.0
"""The same request gets the same answer on every store (issue 27): costs and their range
are checked once, in the engine, before any store sees them. A cost above 2^40 (the most
one decision takes) is a 400 naming the cost on the memory and the Redis store alike, over
RESP and HTTP (it was 429 "remaining 100" on memory, and 400 "the request's key parts are
too long" on Redis); a cost above what a limit can ever hold is refused with what is left
(the Redis store answered it without reading the state: remaining 0). Loopback only; the
servers on their test clock, redis-server started by the test."""
import pytest
import requests

from conftest import RespError, as_dict

CONFIG = """
workers: 1
policies:
  - name: p
    key: [header.x-k]
    algorithm: %s
    limits: [ { %s } ]
"""
ALGOS = [("fixed_window", "rate: 100/m"), ("token_bucket", "rate: 100/m, burst: 100"),
         ("gcra", "rate: 100/m, burst: 100"), ("sliding_window", "rate: 100/m")]
COSTS = [0, 1, 99, 100, 101, 2 ** 40, 2 ** 40 + 1, 2 ** 53 + 1, 2 ** 63 - 1]
# (reset_after differs: the stores align windows on different clocks, as test_capacity.py says)
SAME = ("allowed", "action", "limit", "remaining", "retry_after_ms")
COST_ERROR = "the request's cost is above 1099511627776 (2^40)"


def answers(srv):
    """What RESP and HTTP answer for each cost, on a fresh key each (then a cost of 1 on the
    same key: a refusal must have changed nothing)."""
    c = srv.resp()
    out = []
    for i, cost in enumerate(COSTS):
        r = c.command("SL.CHECK", "p", "r%d" % i, "COST", str(cost))
        out.append(("resp", cost, r if isinstance(r, RespError) else {k: v for k, v in as_dict(r).items() if k in SAME}))
        r = as_dict(c.command("SL.CHECK", "p", "r%d" % i, "COST", "1"))
        out.append(("resp after", cost, r["remaining"]))
        h = requests.post(srv.http + "/v1/check", json={"policy": "p", "key": "h%d" % i, "cost": cost}, timeout=5)
        body = h.json()
        lim = (body.get("limits") or [{}])[0]
        out.append(("http", cost, h.status_code, body.get("error") or body.get("detail"),
                    {"allowed": body.get("allowed"), "remaining": lim.get("remaining")}))
    c.close()
    return out


@pytest.mark.parametrize("algo,limit", ALGOS, ids=[a for a, _ in ALGOS])
def test_costs_answered_alike_on_memory_and_redis(make_server, redis, algo, limit):
    mem = answers(make_server(config_text=CONFIG % (algo, limit)))
    red = answers(make_server(config_text=CONFIG % (algo, limit),
                              extra=["--store", "redis://127.0.0.1:%d?timeout_ms=2000" % redis.port]))
    for a, b in zip(mem, red):
        assert a == b, (a, b)
    assert len(mem) == len(red) == 3 * len(COSTS)
    by = {(x[0], x[1]): x for x in mem}
    # above the limit: refused, nothing taken, what is left said
    assert by[("resp", 101)][2]["allowed"] == 0 and by[("resp", 101)][2]["remaining"] == 100, by[("resp", 101)]
    assert by[("resp after", 101)][2] == 99
    assert by[("http", 101)][2] == 429 and by[("http", 101)][4]["remaining"] == 100
    # 2^40 is a cost like any other; above it a clear 400 on both protocols
    assert by[("resp", 2 ** 40)][2]["allowed"] == 0
    for cost in (2 ** 40 + 1, 2 ** 53 + 1, 2 ** 63 - 1):
        r = by[("resp", cost)][2]
        assert isinstance(r, RespError) and COST_ERROR in r, r
        assert by[("resp after", cost)][2] == 99
        h = by[("http", cost)]
        assert h[2] == 400 and COST_ERROR in h[3], h
