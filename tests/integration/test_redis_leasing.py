# SPDX-License-Identifier: Apache-2.0
"""Leasing's overshoot bound under adversarial timing (docs/redis.md): a slice taken near
the end of a window can be spent after it, so at most instances x workers x slice units
are admitted beyond a limit -- provided every worker holds at most one slice per key at a
time. The adversary: 30 connections, spread over every instance and worker, each send one
request just before the window ends (concurrently, so a worker has many decisions in
flight at once), then hammer the next window. Without single-flight slices each of those
30 decisions took a slice (300 units, the whole window, then spent again in the next one).

The test clock drives time (store time: local): the windows are exact, and every instance
is moved together. Every leasable algorithm is checked, on 1 and on 3 instances.
"""
import socket
import threading

import pytest

from conftest import Server, as_dict

LIMIT, SLICE, WORKERS = 300, 10, 2
W = 1764000000000  # a whole second: a window boundary for 1 s windows

POLICY = """
workers: %(workers)d
store:
  type: memory
policies:
  - name: hot
    objective: fairness
    key: [header.x-k]
    algorithm: %(algo)s
    limits:
      - { %(limit)s }
    leasing: { slice: %(slice)d, hold: 5s }
"""

LIMITS = {
    "fixed_window": "rate: %d/s" % LIMIT,
    "sliding_window": "rate: %d/s" % LIMIT,
    "token_bucket": "rate: %d/s, burst: %d" % (LIMIT, LIMIT),
    "gcra": "rate: %d/s, burst: %d" % (LIMIT, LIMIT),
}


def pipeline(port, n, key):
    """n SL.CHECK on one connection, written at once: the number admitted."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    cmd = b"*3\r\n$8\r\nSL.CHECK\r\n$3\r\nhot\r\n$%d\r\n%s\r\n" % (len(key), key.encode())
    s.sendall(cmd * n)
    f = s.makefile("rb")
    admitted = 0
    for _ in range(n):
        head = f.readline()
        assert head[:1] in (b"*", b"%"), head
        fields = int(head[1:]) * (2 if head[:1] == b"%" else 1)
        vals = []
        for _ in range(fields):
            line = f.readline()
            if line[:1] == b"$" and line[1:3] != b"-1":
                vals.append(f.readline().strip())
            else:
                vals.append(line.strip())
        d = dict(zip(vals[0::2], vals[1::2]))
        admitted += d[b"allowed"] in (b":1", b"#t")
    s.close()
    return admitted


def burst(servers, conns, per_conn, key):
    """`conns` connections spread over the servers' RESP ports, each pipelining
    per_conn requests, all started together; the total admitted."""
    got = []
    start = threading.Barrier(conns)

    def one(i):
        port = servers[i % len(servers)].resp_port
        start.wait(10)
        got.append(pipeline(port, per_conn, key))

    th = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
    for t in th:
        t.start()
    for t in th:
        t.join(60)
    assert len(got) == conns
    return sum(got)


def expected_max(algo, bound):
    """What the adversary may get after the boundary (fixed, sliding) or in all (buckets)."""
    if algo == "fixed_window":
        return LIMIT + bound  # the new window's limit, plus slices taken before it
    if algo == "sliding_window":
        return LIMIT + bound  # the weighted window holds (almost) all of the previous one
    return LIMIT + (LIMIT * 31 + 999) // 1000 + bound  # capacity + 31 ms of refill


@pytest.mark.parametrize("instances", [1, 3])
@pytest.mark.parametrize("algo", sorted(LIMITS))
def test_adversarial_leasing_stays_within_bound(redis, algo, instances):
    text = POLICY % {"workers": WORKERS, "algo": algo, "limit": LIMITS[algo], "slice": SLICE}
    url = "redis://127.0.0.1:%d?time=local&timeout_ms=2000" % redis.port
    servers = [Server(config_text=text, test_clock=True, workers=WORKERS, extra=["--store", url])
               for _ in range(instances)]
    try:
        key = "k-%s-%d" % (algo, instances)
        for s in servers:
            s.clock_set(W - 30)  # 30 ms before the window ends
        before = burst(servers, 30, 1, key)
        for s in servers:
            s.clock_set(W + 1)  # the next window
        after = burst(servers, 30, 40, key)  # 1200 requests: far beyond the limit
        bound = instances * WORKERS * SLICE
        total = before + after if algo in ("token_bucket", "gcra", "sliding_window") else after
        print("%s, %d instance(s) x %d workers, slice %d: %d admitted before the boundary, %d after; "
              "counted %d, limit %d + bound %d" % (algo, instances, WORKERS, SLICE, before, after, total,
                                                  LIMIT, bound))
        assert total <= expected_max(algo, bound), (before, after)
        assert after >= LIMIT - bound - before  # the limit is still reachable
    finally:
        for s in servers:
            s.stop()
        for s in servers:
            s.assert_clean()
