# SPDX-License-Identifier: Apache-2.0
"""`sluice serve` on Redis over TLS, with certificates the test makes (openssl):

- store.tls in the config (CA, client certificate for a server that requires one) and a
  password: decisions are made in Redis;
- rediss:// on the command line with a CA that did not sign the server's certificate:
  a clear log line (OpenSSL's reason, the node), the TLS failure counters, fail-closed
  answers 503; verify: false connects anyway and says so at start;
- a Redis Cluster with TLS (tls-cluster) and a password: every key decided exactly, the
  keys spread over the three masters.
"""
import os
import subprocess
import time

import requests

from conftest import Server
from redis_procs import Certs, Client, RedisProc, metric, wait_for

PASS = "hunter2-it-tls"

POLICIES = """
policies:
  - name: api
    objective: fairness
    match: { path_prefix: /x }
    key: [header.x-api-key]
    on_missing_key: { use: [client_ip] }
    algorithm: token_bucket
    limits:
      - { rate: 10/s, burst: 20 }
  - name: closed
    objective: protection
    match: { path_prefix: /closed/ }
    key: [header.x-api-key]
    on_missing_key: skip
    on_store_error: closed
    algorithm: token_bucket
    limits:
      - { rate: 1/h, burst: 1000 }
"""


def auth(s, srv, path, key="k"):
    return s.get(srv.http + "/v1/auth", headers={"X-Api-Key": key, "X-Original-URI": path}, timeout=5)


def check(s, srv, key):
    r = s.post(srv.http + "/v1/check", json={"policy": "api", "key": key}, timeout=5)
    return r.json()["allowed"]


def test_tls_store():
    certs = Certs()
    redis = RedisProc(certs.server_args(auth_clients="yes") + ["--requirepass", PASS])
    servers = []
    try:
        cfg = ("workers: 2\nstore:\n  type: redis\n  addr: 127.0.0.1:%d\n  timeout: 200ms\n"
               "  password: %s\n  tls:\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n"
               % (redis.port, PASS, certs.path("ca.crt"), certs.path("client.crt"), certs.path("client.key"))
               + POLICIES)
        srv = Server(config_text=cfg, test_clock=False)
        servers.append(srv)
        s = requests.Session()
        assert wait_for(lambda: requests.get(srv.admin + "/readyz", timeout=5).text == "ready\n", 5), srv.output()
        assert [auth(s, srv, "/closed/a").status_code for _ in range(3)] == [200] * 3
        c = Client(redis.port, password=PASS, certs=certs)
        assert len(c.command("KEYS", "sl:*")) >= 1
        c.close()
        assert "(TLS, password set)" in srv.output()
        m = requests.get(srv.admin + "/metrics", timeout=5).text
        assert metric(m, "sluice_redis_events_total", event="tls_failures") == 0

        # a CA that did not sign the server's certificate (and no client certificate)
        url = "rediss://127.0.0.1:%d?tls_ca_file=%s" % (redis.port, certs.path("other-ca.crt"))
        srv = Server(config_text="workers: 1\nstore:\n  type: memory\n" + POLICIES, test_clock=False,
                     extra=["--store", url])
        servers.append(srv)
        node = "127.0.0.1:%d" % redis.port
        assert wait_for(lambda: "certificate verify failed" in srv.output(), 5), srv.output()
        line = [l for l in srv.output().splitlines() if "certificate verify failed" in l][0]
        assert node in line, line
        print("log:", line)
        assert auth(s, srv, "/closed/a").status_code == 503
        m = requests.get(srv.admin + "/metrics", timeout=5).text
        assert metric(m, "sluice_redis_events_total", event="tls_failures") > 0, m
        assert metric(m, "sluice_redis_node_tls_failures_total", node=node, role="node") > 0, m
        assert metric(m, "sluice_redis_node_up", node=node, role="node") == 0, m

        # verification off: connects (the wrong CA does not matter), warned at start
        url = ("rediss://127.0.0.1:%d?tls_verify=0&tls_cert_file=%s&tls_key_file=%s"
               % (redis.port, certs.path("client.crt"), certs.path("client.key")))
        os.environ["SLUICE_IT_TLS_PW"] = PASS
        try:
            cfg = ("workers: 1\nstore:\n  type: redis\n  addr: 127.0.0.1:1\n  password_env: SLUICE_IT_TLS_PW\n"
                   + POLICIES)
            srv = Server(config_text=cfg, test_clock=False, extra=["--store", url])
        finally:
            del os.environ["SLUICE_IT_TLS_PW"]
        servers.append(srv)
        assert wait_for(lambda: requests.get(srv.admin + "/readyz", timeout=5).text == "ready\n", 5), srv.output()
        assert auth(s, srv, "/closed/a").status_code == 200
        assert "TLS certificate verification is off" in srv.output()
    finally:
        for srv in servers:
            assert srv.stop() == 0, srv.output()
        redis.close()
        certs.close()
    for srv in servers:
        with open(srv.log_path) as f:
            assert PASS not in f.read()


def test_tls_cluster_with_auth():
    certs = Certs()
    nodes = []
    srv = None
    try:
        for _ in range(3):
            nodes.append(RedisProc(certs.server_args() + [
                "--requirepass", PASS, "--masterauth", PASS, "--tls-cluster", "yes", "--tls-replication", "yes",
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"],
                bus=True))
        cli = ["redis-cli", "--tls", "--cacert", certs.path("ca.crt"), "--cert", certs.path("client.crt"),
               "--key", certs.path("client.key"), "-a", PASS, "--no-auth-warning"]
        subprocess.run(cli + ["--cluster", "create"] + ["127.0.0.1:%d" % n.port for n in nodes] + ["--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)

        def cluster_ok():
            outs = [subprocess.run(cli + ["-p", str(n.port), "cluster", "info"], capture_output=True, text=True,
                                   timeout=5).stdout for n in nodes]
            return all("cluster_state:ok" in o for o in outs)

        assert wait_for(cluster_ok, 15)
        pwfile = os.path.join(certs.dir, "pw")
        with open(pwfile, "w") as f:
            f.write(PASS)
        cfg = ("workers: 2\nstore:\n  type: redis-cluster\n  addr: 127.0.0.1:%d\n  timeout: 500ms\n"
               "  password_file: %s\n  tls: { ca_file: %s }\n  time: local\n"
               % (nodes[0].port, pwfile, certs.path("ca.crt")) + POLICIES)
        srv = Server(config_text=cfg, test_clock=True)
        srv.clock_set(1764000000000)
        s = requests.Session()
        assert wait_for(lambda: requests.get(srv.admin + "/readyz", timeout=5).text == "ready\n", 10), srv.output()
        keys = ["tenant-%d" % i for i in range(12)]
        got = {k: 0 for k in keys}
        for _ in range(25):
            for k in keys:
                got[k] += check(s, srv, k)
        assert got == {k: 20 for k in keys}
        sizes = []
        for n in nodes:
            c = Client(n.port, password=PASS, certs=certs)
            sizes.append(c.command("DBSIZE"))
            c.close()
        assert all(n > 0 for n in sizes), sizes  # spread over the three masters, over TLS
        m = requests.get(srv.admin + "/metrics", timeout=5).text
        assert metric(m, "sluice_redis_events_total", event="topology") > 0
        for n in nodes:
            assert metric(m, "sluice_redis_node_up", node="127.0.0.1:%d" % n.port, role="node") == 1, m
        assert PASS not in srv.output() and PASS not in m
    finally:
        code = srv.stop() if srv else 0
        for n in nodes:
            n.close()
        certs.close()
        assert code == 0, srv.output() if srv else ""
