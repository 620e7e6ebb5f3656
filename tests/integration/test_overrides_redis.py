# SPDX-License-Identifier: Apache-2.0
# test_overrides_redis.py -- per-key overrides on the Redis store (issue 21,
# docs/overrides.md "what each store guarantees"): two sluice instances on one
# redis-server started here on a free port. A change made on one instance decides on the
# other within 1 s (measured and printed), without a Redis read per decision; restarts keep
# them; expiry; numbers, plan, block and exempt apply to Redis decisions; Redis holds the
# keyed hash of the key, never the raw key, unless raw keys are configured.
import json
import subprocess
import time

import requests

from conftest import Redis, Server

TOKEN = "ovr-redis-token-1234"
H = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}
T0_MS = 1767225600000  # 2026-01-01T00:00:00Z

CONFIG = """
workers: 2
admin:
  tokens: [ { name: ops, token: %s } ]
store:
  type: redis
  key_secret: shared-secret-of-the-test
%s
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    algorithm: gcra
    limits: [ { rate: 3/min, burst: 3 } ]
    plan_from: header.x-plan
    plans:
      enterprise: { limits: [ { name: ent, rate: 10/min, burst: 10 } ] }
"""


def start(redis, log_extra=""):
    s = Server(config_text=CONFIG % (TOKEN, log_extra), test_clock=True,
               extra=["--store", "redis://127.0.0.1:%d?timeout_ms=1000" % redis.port])
    clock_set(s, T0_MS)
    return s


def clock_set(s, ms):
    r = requests.post(s.admin + "/v1/clock", json={"set_ms": ms}, headers=H, timeout=10)
    assert r.status_code == 200, r.text


def put(s, key, body):
    return requests.put(s.admin + "/v1/overrides/api/" + key, data=json.dumps(body), headers=H,
                        timeout=10)


def get(s, key):
    return requests.get(s.admin + "/v1/overrides/api/" + key, headers=H, timeout=10)


def delete(s, key):
    return requests.delete(s.admin + "/v1/overrides/api/" + key, headers=H, timeout=10)


def auth(s, key):
    return requests.get(s.http + "/v1/auth", headers={"x-api-key": key}, timeout=10).status_code


def admitted(s, key, n):
    return sum(1 for _ in range(n) if auth(s, key) == 200)


def until(fn, timeout=5.0):
    """Seconds until fn() is true (polled every 5 ms); fails after timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if fn():
            return time.monotonic() - t0
        time.sleep(0.005)
    raise AssertionError("not within %.1f s" % timeout)


def feed_metric(s, name):
    text = requests.get(s.admin + "/metrics", headers=H, timeout=10).text
    line = [l for l in text.splitlines() if l.startswith(name + " ")]
    assert line, name
    return float(line[0].split()[1])


def rcli(redis, *args):
    return subprocess.run(["redis-cli", "-p", str(redis.port)] + list(args), capture_output=True,
                          text=True, timeout=10).stdout


def test_a_change_on_one_instance_decides_on_the_other_within_1s():
    redis = Redis()
    a = b = None
    try:
        a, b = start(redis), start(redis)
        # numbers
        r = put(a, "k-num", {"limits": [{"rate": "10/min", "burst": 10}], "label": "acme",
                             "reason": "launch week"})
        assert r.status_code == 201, r.text
        t_put = until(lambda: get(b, "k-num").status_code == 200)
        print("PUT on A seen by B after %.0f ms" % (t_put * 1000))
        assert t_put < 1.0
        got = get(b, "k-num").json()
        assert got["label"] == "acme" and got["reason"] == "launch week" and got["set_by"] == "ops"
        assert admitted(b, "k-num", 12) == 10  # the override's numbers on B's Redis decisions
        assert auth(a, "k-num") == 429          # one counter in Redis, shared
        # a list on B shows the label
        items = requests.get(b.admin + "/v1/overrides?policy=api", headers=H, timeout=10).json()["items"]
        assert [i["label"] for i in items] == ["acme"]
        # delete
        assert delete(a, "k-num").status_code == 204
        t_del = until(lambda: get(b, "k-num").status_code == 404)
        print("DELETE on A seen by B after %.0f ms" % (t_del * 1000))
        assert t_del < 1.0
        assert admitted(b, "k-fresh", 5) == 3  # the policy's own 3/min again
        # plan, block, exempt set on B decide on A
        assert put(b, "k-plan", {"plan": "enterprise"}).status_code == 201
        assert put(b, "k-block", {"block": True}).status_code == 201
        assert put(b, "k-exempt", {"exempt": True}).status_code == 201
        until(lambda: get(a, "k-exempt").status_code == 200, 1.0)
        assert admitted(a, "k-plan", 12) == 10
        assert auth(a, "k-block") == 429
        assert admitted(a, "k-exempt", 20) == 20
        # an unknown plan or a bad number is refused before Redis sees it
        assert put(a, "k-bad", {"plan": "nope"}).status_code == 400
        assert rcli(redis, "HEXISTS", "sl:{sluice-ovr}:data", "x").strip() == "0"
    finally:
        for s in (a, b):
            if s:
                assert s.stop() == 0, s.output()  # clean exit (sanitizer builds: no leak)
        redis.kill()


def test_restarts_keep_them_and_redis_holds_hashes_only():
    redis = Redis()
    a = b = None
    try:
        a, b = start(redis), start(redis)
        assert put(a, "customer-4711", {"limits": [{"rate": "10/min", "burst": 10}],
                                        "label": "Customer 4711"}).status_code == 201
        until(lambda: get(b, "customer-4711").status_code == 200, 1.0)
        # Redis: one field, the keyed hash; the raw key appears nowhere
        fields = rcli(redis, "HKEYS", "sl:{sluice-ovr}:data").split()
        assert len(fields) == 1 and len(fields[0]) == 32
        dump = rcli(redis, "HGETALL", "sl:{sluice-ovr}:data")
        assert "customer-4711" not in dump and "Customer 4711" in dump
        # restart B: its copy comes back from Redis
        b.stop()
        b = start(redis)
        t = until(lambda: get(b, "customer-4711").status_code == 200, 2.0)
        print("restarted B has the override after %.0f ms" % (t * 1000))
        assert admitted(b, "customer-4711", 12) == 10
        # a change while A is down reaches A when it starts again
        a.stop()
        a = None
        assert delete(b, "customer-4711").status_code == 204
        assert put(b, "k2", {"block": True}).status_code == 201
        a = start(redis)
        until(lambda: get(a, "k2").status_code == 200, 2.0)
        assert get(a, "customer-4711").status_code == 404
        assert auth(a, "k2") == 429
    finally:
        for s in (a, b):
            if s:
                assert s.stop() == 0, s.output()  # clean exit (sanitizer builds: no leak)
        redis.kill()


def test_expiry_on_redis():
    redis = Redis()
    a = b = None
    try:
        a, b = start(redis), start(redis)
        exp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0_MS // 1000 + 120))
        assert put(a, "k-exp", {"limits": [{"rate": "10/min", "burst": 10}],
                                "expires_at": exp}).status_code == 201
        until(lambda: get(b, "k-exp").status_code == 200, 1.0)
        assert admitted(b, "k-exp2", 1) == 1
        for s in (a, b):
            clock_set(s, T0_MS + 121000)
        assert get(a, "k-exp").status_code == 404 and get(b, "k-exp").status_code == 404
        assert admitted(b, "k-exp", 5) == 3  # back to the policy's numbers
        # a restart after the expiry does not bring it back
        b.stop()
        b = start(redis)
        clock_set(b, T0_MS + 121000)
        time.sleep(0.5)
        assert get(b, "k-exp").status_code == 404
    finally:
        for s in (a, b):
            if s:
                assert s.stop() == 0, s.output()  # clean exit (sanitizer builds: no leak)
        redis.kill()


def test_redis_down_a_change_is_refused_not_lost():
    redis = Redis()
    a = None
    try:
        a = start(redis)
        assert put(a, "k1", {"block": True}).status_code == 201
        redis.kill()
        r = put(a, "k2", {"block": True})
        assert r.status_code == 503, r.text
        assert "Redis" in r.json()["detail"]
        assert get(a, "k2").status_code == 404      # not applied here either
        assert get(a, "k1").status_code == 200      # the copy stays while Redis is away
    finally:
        if a:
            assert a.stop() == 0, a.output()
        redis.kill()


def test_redis_loses_its_data_and_others_write_more_than_this_copy_had_seen(monkeypatch):
    """Redis restarted empty (FLUSHALL here), then B writes more changes than A had seen: the
    version counter is past A's again, so only the data set's epoch tells A that its copy
    follows a lost one. A must drop k1..k3 and take all of n1..n6, not just n4..n6."""
    redis = Redis()
    a = b = None
    try:
        monkeypatch.setenv("SLUICE_OVERRIDES_POLL_MS", "3000")  # A polls late: B's writes land first
        a = start(redis)
        monkeypatch.delenv("SLUICE_OVERRIDES_POLL_MS")
        for k in ("k1", "k2", "k3"):
            assert put(a, k, {"block": True}).status_code == 201
        assert get(a, "k3").status_code == 200
        time.sleep(0.2)
        passes = feed_metric(a, "sluice_overrides_redis_full_passes_total")
        assert passes >= 1 and feed_metric(a, "sluice_overrides_redis_synced") == 1
        assert rcli(redis, "FLUSHALL").strip() == "OK"
        b = start(redis)
        for i in range(1, 7):
            assert put(b, "n%d" % i, {"block": True}).status_code == 201
        assert rcli(redis, "GET", "sl:{sluice-ovr}:ver").strip() == "6"
        until(lambda: get(a, "n6").status_code == 200, 8.0)
        assert [get(a, "n%d" % i).status_code for i in range(1, 7)] == [200] * 6
        assert [get(a, k).status_code for k in ("k1", "k2", "k3")] == [404] * 3
        assert auth(a, "k1") == 200 and auth(a, "n1") == 429
        # an operator sees it: a full pass more, the feed polled recently, no errors
        assert feed_metric(a, "sluice_overrides_redis_full_passes_total") > passes
        assert feed_metric(a, "sluice_overrides_redis_last_poll_age_seconds") < 10
        assert feed_metric(a, "sluice_overrides_redis_errors_total") == 0
    finally:
        for s in (a, b):
            if s:
                assert s.stop() == 0, s.output()  # clean exit (sanitizer builds: no leak)
        redis.kill()


def test_import_on_one_instance_export_from_the_other_reimports_the_same_set():
    n = 500
    redis, redis2 = Redis(), Redis()
    a = b = c = None
    try:
        a, b = start(redis), start(redis)
        body = "".join(json.dumps({"policy": "api", "key": "imp-%d" % i, "label": "L%d" % i,
                                   "limits": [{"rate": "%d/min" % (5 + i % 7), "burst": 5 + i % 7}]}) + "\n"
                       for i in range(n)) + "not json\n"
        t0 = time.monotonic()
        r = requests.post(a.admin + "/v1/overrides/import", data=body, headers=H, timeout=120)
        took = time.monotonic() - t0
        assert r.status_code == 200, r.text
        assert r.json()["applied"] == n and [x["line"] for x in r.json()["refused"]] == [n + 1]
        print("import of %d lines on the Redis store: %.2f s (%.2f ms per line)" % (n, took, took * 1000 / n))

        def listed(s):
            return requests.get(s.admin + "/v1/overrides/export", headers=H, timeout=30).text.splitlines()
        until(lambda: len(listed(b)) == n, 2.0)
        exported = sorted(listed(b))
        # re-imported into another pair of instances on another Redis: the same set
        c = start(redis2)
        r = requests.post(c.admin + "/v1/overrides/import", data="\n".join(exported) + "\n", headers=H,
                          timeout=120)
        assert r.status_code == 200 and r.json()["applied"] == n, r.text
        strip = lambda lines: sorted(json.dumps({k: v for k, v in json.loads(l).items()
                                                 if k not in ("set_at", "set_by")}, sort_keys=True)
                                     for l in lines)
        assert strip(listed(c)) == strip(exported)
        assert admitted(c, "imp-3", 12) == 8  # 5 + 3 % 7 = 8/min from the imported line
    finally:
        for s in (a, b, c):
            if s:
                assert s.stop() == 0, s.output()  # clean exit (sanitizer builds: no leak)
        redis.kill()
        redis2.kill()


def test_import_in_batches_keeps_order_max_audit_and_refuses_when_redis_dies():
    """The import writes its lines to Redis SL_OVR_BATCH at a time: a key twice in one body
    ends as its later line (audited twice, in order), overrides.max counts the lines still
    queued, and a Redis that is gone refuses the queued lines with 503 (none counted)."""
    redis = Redis()
    a = b = None
    try:
        a, b = start(redis, "overrides: { max: 4 }"), start(redis)
        lines = [{"policy": "api", "key": "dup", "limits": [{"rate": "5/min", "burst": 5}]},
                 {"policy": "api", "key": "u1", "block": True},
                 {"policy": "api", "key": "dup", "limits": [{"rate": "7/min", "burst": 7}],
                  "label": "second"},
                 {"policy": "api", "key": "u2", "block": True},
                 {"policy": "api", "key": "u3", "block": True},  # the 4th key: max
                 {"policy": "api", "key": "u4", "block": True},  # over max: 507
                 {"policy": "api", "key": "u5", "plan": "nope"}]  # 400
        body = "".join(json.dumps(l) + "\n" for l in lines)
        r = requests.post(a.admin + "/v1/overrides/import", data=body, headers=H, timeout=60)
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["applied"] == 5, got
        assert [(x["line"], x["reason"][:3]) for x in got["refused"]] == [(6, "507"), (7, "400")], got
        until(lambda: get(b, "u3").status_code == 200, 2.0)
        assert get(b, "dup").json()["label"] == "second"
        assert admitted(b, "dup", 9) == 7
        audit = requests.get(a.admin + "/v1/audit", headers=H, timeout=10).json()["entries"]
        ov = [json.dumps(e) for e in audit if e.get("source") == "override"]
        assert len(ov) == 5, ov
        first = [e for e in ov if "5/min" in e and "(second)" not in e]
        second = [e for e in ov if "(second)" in e]
        assert len(first) == 1 and "none ->" in first[0], first
        assert len(second) == 1 and "5/min" in second[0] and "none ->" not in second[0], second
        # Redis gone: the lines are refused with 503, nothing applied here
        redis.kill()
        r = requests.post(b.admin + "/v1/overrides/import",
                          data='{"policy": "api", "key": "z1", "block": true}\n'
                               '{"policy": "api", "key": "z2", "block": true}\n',
                          headers=H, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["applied"] == 0 and [x["reason"][:3] for x in r.json()["refused"]] == ["503", "503"]
        assert get(b, "z1").status_code == 404
    finally:
        for s in (a, b):
            if s:
                assert s.stop() == 0, s.output()  # clean exit (sanitizer builds: no leak)
        redis.kill()


def test_through_sentinel_a_failover_keeps_them_and_takes_new_changes():
    """Two instances find the primary through three sentinels. An override set before the
    primary is killed is still there after the replica is promoted (on both instances), and
    a change made after the failover (retried while it answers 503) reaches the other."""
    from redis_procs import Client, is_primary, sentinel_set, sentinels_ready, wait_for
    primary, replica, sentinels = sentinel_set()
    a = b = None
    try:
        assert wait_for(lambda: sentinels_ready(sentinels), 20, 0.1), "sentinels did not discover each other"
        store = ("  timeout: 200ms\n  sentinel:\n    master: mymaster\n    addrs: [%s]\n"
                 % ", ".join("127.0.0.1:%d" % sn.port for sn in sentinels))
        cfg = (CONFIG % (TOKEN, "")).replace("  key_secret: shared-secret-of-the-test\n",
                                             "  key_secret: shared-secret-of-the-test\n" + store)
        a, b = (Server(config_text=cfg, test_clock=True) for _ in range(2))
        for s in (a, b):
            clock_set(s, T0_MS)
        assert put(a, "k1", {"block": True, "label": "before"}).status_code == 201
        until(lambda: get(b, "k1").status_code == 200, 2.0)

        def replicated():
            c = Client(replica.port)
            n = c.command("HLEN", "sl:{sluice-ovr}:data")
            c.close()
            return n == 1
        assert wait_for(replicated, 10, 0.05), "the replica did not get the override"
        primary.kill()
        assert wait_for(lambda: is_primary(replica), 30, 0.1), "no failover"
        t0 = time.monotonic()
        code = None
        while time.monotonic() - t0 < 20:
            code = put(b, "k2", {"block": True, "label": "after"}).status_code
            if code == 201:
                break
            assert code == 503, code  # refused while the instance finds the new primary
            time.sleep(0.2)
        assert code == 201, code
        print("\nPUT after the failover accepted %.1f s after the promotion" % (time.monotonic() - t0))
        until(lambda: get(a, "k2").status_code == 200, 5.0)
        for s in (a, b):
            assert get(s, "k1").json()["label"] == "before" and get(s, "k2").json()["label"] == "after"
            assert auth(s, "k1") == 429 and auth(s, "k2") == 429 and auth(s, "k3") == 200
    finally:
        for s in (a, b):
            if s:
                assert s.stop() == 0, s.output()  # clean exit (sanitizer builds: no leak)
        for p in [primary, replica] + sentinels:
            p.close()


def test_on_a_redis_cluster():
    from redis_procs import RedisProc, wait_for
    nodes = []
    a = b = None
    try:
        for _ in range(3):
            nodes.append(RedisProc(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"],
                                   bus=True))
        subprocess.run(["redis-cli", "--cluster", "create"] + ["127.0.0.1:%d" % n.port for n in nodes] +
                       ["--cluster-yes"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)

        def ok():
            return all("cluster_state:ok" in subprocess.run(
                ["redis-cli", "-p", str(n.port), "CLUSTER", "INFO"], capture_output=True, text=True,
                timeout=10).stdout for n in nodes)
        assert wait_for(ok, 20, 0.1)
        slot = int(subprocess.run(["redis-cli", "-p", str(nodes[0].port), "CLUSTER", "KEYSLOT",
                                   "sl:{sluice-ovr}:data"], capture_output=True, text=True).stdout)

        def inst(seed):
            s = Server(config_text=CONFIG % (TOKEN, ""), test_clock=True,
                       extra=["--store", "redis-cluster://127.0.0.1:%d?timeout_ms=1000" % seed.port])
            clock_set(s, T0_MS)
            return s
        # each instance seeded by a different node: at least one is not the slot's owner
        a, b = inst(nodes[0]), inst(nodes[2])
        assert put(a, "k-cl", {"limits": [{"rate": "10/min", "burst": 10}], "label": "c"}).status_code == 201
        t = until(lambda: get(b, "k-cl").status_code == 200, 1.0)
        print("cluster (slot %d): PUT on A seen by B after %.0f ms" % (slot, t * 1000))
        assert admitted(b, "k-cl", 12) == 10
        assert delete(b, "k-cl").status_code == 204
        until(lambda: get(a, "k-cl").status_code == 404, 1.0)
        assert admitted(a, "k-cl2", 5) == 3
    finally:
        for s in (a, b):
            if s:
                assert s.stop() == 0, s.output()  # clean exit (sanitizer builds: no leak)
        for n in nodes:
            n.close()
