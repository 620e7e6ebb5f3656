# SPDX-License-Identifier: Apache-2.0
"""CL.THROTTLE replies exactly as redis-cell does (SPECS.md §5), on the test clock."""
from conftest import RespError


def test_readme_example(server):
    c = server.resp()
    assert c.command("CL.THROTTLE", "user123", 15, 30, 60) == [0, 16, 15, -1, 2]


def test_redis_cell_vector(server):
    """max_burst=4 (limit 5) at 1/s, every case at `start` unless stated."""
    c = server.resp()
    server.clock_set(1_700_000_000_000)
    k = "vector"
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 6) == [1, 5, 5, -1, 0]       # case 0: never fits
    for i in range(1, 6):                                                       # cases 1..5
        assert c.command("CL.THROTTLE", k, 4, 1, 1, 1) == [0, 5, 5 - i, -1, i]
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 1) == [1, 5, 0, 1, 5]          # case 6
    server.clock_advance(3000)
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 1) == [0, 5, 2, -1, 3]         # case 7 (+3 s)
    # The digest elides cases 8..11; one request at +9.5 s leaves the state case 12 sees.
    server.clock_advance(6500)
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 1) == [0, 5, 4, -1, 1]
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 0) == [0, 5, 4, -1, 1]         # case 12: peek
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 2) == [0, 5, 2, -1, 3]         # case 13: spends 2
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 5) == [1, 5, 2, 3, 3]          # case 14


def test_rounding(server):
    """Whole seconds, +1 only when at least 1 ms is left over."""
    c = server.resp()
    # T = 2001/2000 s = 1.0005 s: 0.5 ms over a second is not rounded up
    assert c.command("CL.THROTTLE", "r1", 0, 2000, 2001) == [0, 1, 0, -1, 1]
    assert c.command("CL.THROTTLE", "r1", 0, 2000, 2001) == [1, 1, 0, 1, 1]
    # T = 1/3 s: 333 ms is rounded up to 1 s
    assert c.command("CL.THROTTLE", "r2", 0, 3, 1) == [0, 1, 0, -1, 1]
    server.clock_advance(1)
    assert c.command("CL.THROTTLE", "r2", 0, 3, 1)[3] == 1


def test_errors(server):
    c = server.resp()
    assert c.command("CL.THROTTLE", "k", 1, 0, 60) == RespError("ERR Zero rates are not supported")
    assert isinstance(c.command("CL.THROTTLE", "k", 1, 0, 60), RespError)
    assert isinstance(c.command("CL.THROTTLE", "k", 1, 1), RespError)
    assert isinstance(c.command("CL.THROTTLE", "k", "x", 1, 60), RespError)
    assert c.command("PING") == "PONG"


# ---- redis-cell's arithmetic, as its source computes it (brandur/redis-cell, cell/mod.rs
# and lib.rs, 0.4.0 to 0.5.0; the decision itself is unchanged since 0.2.2). Python floats
# are IEEE doubles, so `int(a / b)` is Rust's `(a as f64 / b as f64) as i64` for finite
# values. Not modelled, on purpose (docs/algorithms.md lists it): Redis expires the key
# at a whole millisecond, up to 1 ms before its TAT.

def _trunc_div(a, b):
    q = abs(a) // b
    return q if a >= 0 else -q


def _cell_seconds(ns):
    """`d.as_seconds_f64() as i64`, plus 1 when `d.subsec_milliseconds() > 0` (lib.rs)."""
    whole = _trunc_div(ns, 10**9)
    sub = ns - whole * 10**9
    secs = int(float(whole) + float(sub) / 1e9)
    if _trunc_div(sub, 10**6) > 0:
        secs += 1
    return secs


class RedisCell:
    def __init__(self):
        self.tat = {}

    def throttle(self, now, key, max_burst, count, period, qty):
        t = int(float(period * 10**9) / float(count))  # Rate::per_period
        dvt = t * (max_burst + 1)
        inc = t * qty
        tat = self.tat.get(key, now)
        if tat <= now:  # Redis expired the key (its TTL ran out with the TAT)
            self.tat.pop(key, None)
            tat = now
        new_tat = now + inc if now > tat else tat + inc
        diff = now - (new_tat - dvt)
        retry = -10**9
        if diff < 0:
            limited = True
            if inc <= dvt:
                retry = -diff
            ttl = tat - now
        else:
            limited = False
            ttl = new_tat - now
            if ttl > 0:
                self.tat[key] = new_tat
            else:
                self.tat.pop(key, None)
        nxt = dvt - ttl
        remaining = 0
        if nxt > -t:
            a, b = _trunc_div(nxt, 1000), _trunc_div(t, 1000)
            if b == 0:
                remaining = 2**63 - 1 if a > 0 else 0
            else:
                remaining = int(float(a) / float(b))
        return [1 if limited else 0, max_burst + 1, remaining, _cell_seconds(retry),
                _cell_seconds(ttl)]


def test_remaining_in_whole_microseconds(server):
    """The issue's case: T = 1/7 s = 142857142 ns is divided as 142857 us."""
    c = server.resp()
    start = 1_700_000_000_000
    server.clock_set(start)
    cell = RedisCell()
    for _ in range(5):
        want = cell.throttle(start * 10**6, "k", 4999, 7, 1, 1)
        assert c.command("CL.THROTTLE", "k", 4999, 7, 1) == want
    server.clock_advance(428)
    want = cell.throttle((start + 428) * 10**6, "k", 4999, 7, 1, 0)
    assert want[2] == 4998  # what redis-cell was seen to answer (the nanosecond formula: 4997)
    assert c.command("CL.THROTTLE", "k", 4999, 7, 1, 0) == want


def test_documented_differences(server):
    """A burst spanning more than 2^62 ns (146 years) is refused; redis-cell takes up to
    2^63 ns. Negative quantities are refused; redis-cell would refund with them."""
    c = server.resp()
    assert isinstance(c.command("CL.THROTTLE", "d", 65535, 1, 86400), RespError)
    assert isinstance(c.command("CL.THROTTLE", "d", 5, 1, 60, -1), RespError)
    assert c.command("CL.THROTTLE", "d", 5, 1, 60) == [0, 6, 5, -1, 60]


def test_random_traffic_matches_redis_cell(server):
    """Random parameters, quantities and clock steps (whole ms, as SL.CLOCK moves): every
    reply field equals the model's. Seeded; SLUICE_SEED varies it."""
    import os
    import random
    rnd = random.Random(int(os.environ.get("SLUICE_SEED", "0x5eed"), 0))
    c = server.resp()
    now_ms = 1_700_000_000_000
    server.clock_set(now_ms)
    cell = RedisCell()
    params = {}
    while len(params) < 12:
        p = (rnd.choice([0, 1, 4, 15, 99, 4999, 65535]),
             rnd.choice([1, 3, 7, 60, 1000, 3600, 999983]),
             rnd.choice([1, 2, 7, 60, 3600, 86400]))
        if (p[0] + 1) * (p[2] * 10**9 // p[1]) <= 2**62:  # beyond: refused, see below
            params["key%d" % len(params)] = p
    for _ in range(1500):
        key = rnd.choice(list(params))
        burst, count, period = params[key]
        qty = rnd.choice([0, 1, 1, 1, 2, 5, burst, burst + 1, burst + 2])
        want = cell.throttle(now_ms * 10**6, key, burst, count, period, qty)
        got = c.command("CL.THROTTLE", key, burst, count, period, qty)
        assert got == want, (key, burst, count, period, qty, now_ms)
        step = rnd.choice([0, 0, 1, 7, 142, 428, 999, 1000, 60_000])
        if step:
            now_ms += step
            server.clock_advance(step)
