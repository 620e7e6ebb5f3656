# SPDX-License-Identifier: Apache-2.0
"""Failover under load, with credentials everywhere:

- sentinels (three, with their own password) watching a primary and a replica (with a
  password): `sluice serve` finds the primary through the sentinels, then a SENTINEL
  FAILOVER and later a killed primary: decisions resume on the new primary, the counters
  kept (replicated state), the failover counted; the time decisions were unavailable is
  measured and printed;
- a Redis Cluster (three masters, one with a replica): its master killed, the replica
  promoted: decisions for its slots resume (the client asks a live node for the new map);
  the time is printed.
"""
import subprocess
import threading
import time

import requests

from conftest import Server
from redis_procs import Client, RedisProc, metric, sentinels_ready, wait_for

PASS = "hunter2-it-data"
SENT_PASS = "hunter2-it-sentinel"

POLICIES = """
policies:
  - name: closed
    objective: protection
    match: { path_prefix: /closed/ }
    key: [header.x-api-key]
    on_missing_key: skip
    on_store_error: closed
    algorithm: token_bucket
    limits:
      - { rate: 1/h, burst: 1000000 }
  - name: kept
    objective: fairness
    match: { path_prefix: /kept/ }
    key: [header.x-api-key]
    on_missing_key: skip
    on_store_error: closed
    algorithm: token_bucket
    limits:
      - { rate: 1/h, burst: 1000 }
"""


def auth(s, srv, path, key):
    return s.get(srv.http + "/v1/auth", headers={"X-Api-Key": key, "X-Original-URI": path}, timeout=5)


def remaining(s, srv, key, cost=0):
    r = s.post(srv.http + "/v1/check", json={"policy": "kept", "key": key, "cost": cost}, timeout=5)
    return r.json()["limits"][0]["remaining"] if r.status_code == 200 else None


class Load:
    """Requests on fail-closed policies from two threads, each answer recorded with its
    time: 200 decided, 503 store unavailable."""

    def __init__(self, srv, keys):
        self.srv, self.keys = srv, keys
        self.log = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(2)]
        for t in self.threads:
            t.start()

    def run(self, i):
        s = requests.Session()
        n = 0
        deadline = time.time() + 60
        while not self.stop.is_set() and time.time() < deadline:
            k = self.keys[(n * 2 + i) % len(self.keys)]
            n += 1
            try:
                code = auth(s, self.srv, "/closed/x", k).status_code
            except requests.ConnectionError:
                code = -1  # (counted: the server must never drop a request)
                s = requests.Session()
            self.log.append((time.time(), k, code))

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def outage(self, since, keys=None):
        """(first failure, recovery) after `since`: the time from the first non-200 to the
        first 200 after the last non-200, over the keys given (None: all)."""
        rows = [r for r in self.log if r[0] >= since and (keys is None or r[1] in keys)]
        bad = [r[0] for r in rows if r[2] != 200]
        if not bad:
            return None
        after = [r[0] for r in rows if r[2] == 200 and r[0] > bad[-1]]
        return bad[0], (after[0] if after else None), len(bad)


def offset(node, field):
    """A replication offset (-1 while the node is unreachable or changing roles)."""
    try:
        c = Client(node.port, password=PASS, timeout=1)
        try:
            lines = [l for l in c.command("INFO", "replication").splitlines() if l.startswith(field + ":")]
            return int(lines[0].split(":")[1]) if lines else -1
        finally:
            c.close()
    except (OSError, ConnectionError):
        return -1


def replicated(primary, replica, timeout=10):
    """The replica has everything the primary had written when this was called."""
    want = -1
    deadline = time.time() + timeout
    while want < 0 and time.time() < deadline:
        want = offset(primary, "master_repl_offset")
    return want >= 0 and wait_for(lambda: offset(replica, "slave_repl_offset") >= want, timeout)


def role(node):
    try:
        c = Client(node.port, password=PASS, timeout=1)
        r = c.command("ROLE")
        c.close()
        return r[0]
    except (OSError, ConnectionError, TypeError):
        return None


def test_sentinel_failover_under_load():
    primary = RedisProc(["--requirepass", PASS, "--masterauth", PASS])
    replica = RedisProc(["--requirepass", PASS, "--masterauth", PASS, "--replicaof", "127.0.0.1", str(primary.port)])
    conf = ("sentinel monitor mymaster 127.0.0.1 %d 2\nsentinel auth-pass mymaster %s\n"
            "sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 10000\n"
            "requirepass %s\nsentinel sentinel-pass %s\n" % (primary.port, PASS, SENT_PASS, SENT_PASS))
    sentinels = [RedisProc([], sentinel_conf=conf) for _ in range(3)]
    data = {primary.port: primary, replica.port: replica}
    srv = load = None
    try:
        assert wait_for(lambda: sentinels_ready(sentinels, password=SENT_PASS), 20, 0.1), \
            "sentinels did not discover each other"
        cfg = ("workers: 2\nstore:\n  type: redis\n  timeout: 200ms\n  password: %s\n  sentinel:\n"
               "    master: mymaster\n    addrs: [%s]\n    password: %s\n"
               % (PASS, ", ".join("127.0.0.1:%d" % sn.port for sn in sentinels), SENT_PASS) + POLICIES)
        srv = Server(config_text=cfg, test_clock=False)
        s = requests.Session()
        assert wait_for(lambda: requests.get(srv.admin + "/readyz", timeout=5).text == "ready\n", 5), srv.output()
        assert "redis-sentinel primary 'mymaster' via" in srv.output()
        for i in range(10):
            assert remaining(s, srv, "kept", cost=1) == 999 - i
        assert remaining(s, srv, "kept") == 990
        assert replicated(primary, replica)
        load = Load(srv, ["load-%d" % i for i in range(20)])
        time.sleep(0.5)

        # 1. an operator's failover: the primary becomes a replica of the other
        t0 = time.time()
        c = Client(sentinels[0].port, password=SENT_PASS)
        assert c.command("SENTINEL", "FAILOVER", "mymaster") == "OK"
        c.close()
        assert wait_for(lambda: role(replica) == "master", 15)
        new = replica
        adm = requests.Session()

        def on_new():
            try:
                m = adm.get(srv.admin + "/metrics", timeout=5).text
            except requests.ConnectionError as e:
                raise AssertionError("admin: %s; server %s\n%s" % (e, srv.proc.poll(), srv.output()))
            return metric(m, "sluice_redis_node_up", node="127.0.0.1:%d" % new.port, role="primary") == 1

        assert wait_for(on_new, 10, 0.01), adm.get(srv.admin + "/metrics", timeout=5).text
        t_switch = time.time()
        assert wait_for(lambda: auth(s, srv, "/closed/x", "probe").status_code == 200, 5)
        time.sleep(0.5)
        o1 = load.outage(t0)
        print("sentinel SENTINEL FAILOVER: %s; every worker on the new primary %.0f ms after the command" % (
            "no decision failed" if o1 is None else "%d decisions failed, unavailable %.0f ms" % (
                o1[2], ((o1[1] or time.time()) - o1[0]) * 1000), (t_switch - t0) * 1000))
        assert o1 is None or o1[1] is not None
        assert remaining(s, srv, "kept") == 990  # the counters moved with the data
        assert replicated(replica, primary, 30)  # (the sentinel reconfigures the old primary)

        # 2. the primary dies: the sentinels notice (down-after 1 s) and promote the other
        t1 = time.time()
        old = new
        old.kill()
        other = primary
        assert wait_for(lambda: role(other) == "master", 20, 0.01)
        t_promoted = time.time()
        assert wait_for(lambda: auth(s, srv, "/closed/x", "probe").status_code == 200, 10), srv.output()
        time.sleep(0.3)
        o2 = load.outage(t1)
        assert o2 is not None and o2[1] is not None
        print("sentinel primary killed: %d decisions failed, unavailable %.0f ms (down-after 1000 ms): replica "
              "promoted %.0f ms after the kill, decisions back %.0f ms after the promotion"
              % (o2[2], (o2[1] - o2[0]) * 1000, (t_promoted - t1) * 1000, (o2[1] - t_promoted) * 1000))
        load.end()
        dropped = [r for r in load.log if r[2] == -1]
        assert not dropped, "%d requests dropped without an answer" % len(dropped)
        assert remaining(s, srv, "kept") == 990
        assert remaining(s, srv, "kept", cost=1) == 989
        m = requests.get(srv.admin + "/metrics", timeout=5).text
        assert metric(m, "sluice_redis_events_total", event="failovers") >= 2, m
        assert metric(m, "sluice_redis_node_up", node="127.0.0.1:%d" % other.port, role="primary") == 1, m
        out = srv.output()
        assert "the primary moved to 127.0.0.1:%d" % other.port in out or "connected" in out, out
        assert "hunter2" not in out and "hunter2" not in m
    finally:
        if load:
            load.end()
        code = srv.stop() if srv else 0
        for p in list(data.values()) + sentinels:
            p.close()
        assert code == 0, srv.output() if srv else ""


def test_cluster_master_failover_under_load():
    nodes = []
    srv = load = None
    try:
        for _ in range(4):
            nodes.append(RedisProc(["--requirepass", PASS, "--masterauth", PASS, "--cluster-enabled", "yes",
                                    "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
                                    # (a replica that joined seconds ago may take over)
                                    "--cluster-replica-validity-factor", "0"],
                                   bus=True))
        cli = ["redis-cli", "-a", PASS, "--no-auth-warning"]
        subprocess.run(cli + ["--cluster", "create"] + ["127.0.0.1:%d" % n.port for n in nodes[:3]] +
                       ["--cluster-yes"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
        c = Client(nodes[0].port, password=PASS)
        id0 = c.command("CLUSTER", "MYID")
        c.close()
        subprocess.run(cli + ["--cluster", "add-node", "127.0.0.1:%d" % nodes[3].port, "127.0.0.1:%d" % nodes[0].port,
                              "--cluster-slave", "--cluster-master-id", id0],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)

        def ok():
            for n in nodes:
                c = Client(n.port, password=PASS)
                info = c.command("CLUSTER", "INFO")
                c.close()
                if "cluster_state:ok" not in info:
                    return False
            return role(nodes[3]) == "slave" and replicated(nodes[0], nodes[3], 1)

        assert wait_for(ok, 20, 0.1)
        cfg = ("workers: 2\nstore:\n  type: redis-cluster\n  addr: 127.0.0.1:%d\n  timeout: 200ms\n"
               "  password: %s\n" % (nodes[1].port, PASS) + POLICIES)
        srv = Server(config_text=cfg, test_clock=False)
        s = requests.Session()
        assert wait_for(lambda: requests.get(srv.admin + "/readyz", timeout=5).text == "ready\n", 10), srv.output()
        keys = ["load-%d" % i for i in range(40)]
        load = Load(srv, keys)
        time.sleep(0.5)
        t0 = time.time()
        nodes[0].kill()
        assert wait_for(lambda: role(nodes[3]) == "master", 20, 0.01)
        t_promoted = time.time()
        assert wait_for(lambda: all(auth(s, srv, "/closed/x", k).status_code == 200 for k in keys), 10), srv.output()
        time.sleep(0.3)
        load.end()
        # which keys were on the killed master: those that failed
        hit = {r[1] for r in load.log if r[0] >= t0 and r[2] != 200}
        assert hit  # the dead master's keys
        # one breaker per node: the other masters' keys were decided all along
        assert len(hit) < len(keys), hit
        o = load.outage(t0)
        print("cluster master killed: %d decisions failed on %d of %d keys, unavailable %.0f ms (cluster-node-timeout "
              "1000 ms): replica promoted %.0f ms after the kill, decisions back %.0f ms after the promotion"
              % (o[2], len(hit), len(keys), (o[1] - o[0]) * 1000, (t_promoted - t0) * 1000, (o[1] - t_promoted) * 1000))
        m = requests.get(srv.admin + "/metrics", timeout=5).text
        print("  (breaker_open %d, node_down %d)" % (metric(m, "sluice_redis_events_total", event="breaker_open"),
                                          metric(m, "sluice_redis_events_total", event="node_down")))
        assert metric(m, "sluice_redis_node_up", node="127.0.0.1:%d" % nodes[3].port, role="node") == 1, m
        assert metric(m, "sluice_redis_node_up", node="127.0.0.1:%d" % nodes[0].port, role="node") == 0, m
        assert "hunter2" not in srv.output() and "hunter2" not in m
    finally:
        if load:
            load.end()
        code = srv.stop() if srv else 0
        for n in nodes:
            n.close()
        assert code == 0, srv.output() if srv else ""
