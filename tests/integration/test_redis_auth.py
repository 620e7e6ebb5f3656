# SPDX-License-Identifier: Apache-2.0
"""`sluice serve` on a Redis that wants credentials (requirepass, ACL users), given the way
operators give them: a password file, an environment variable, the config file, a URL on
the command line (works, warned about: ps shows it).

- right credentials: decisions are made in Redis (counted there), the node gauge is 1;
- wrong or missing ones: a log line names the node and carries Redis's own error, the
  auth-failure counters and the node gauge say so, fail-open policies admit and
  fail-closed ones answer 503 (the policy's failure mode), nothing hangs;
- the password appears in no log line, metric, readiness body or response.
"""
import os

import requests

from conftest import Server
from redis_procs import Client, RedisProc, metric, wait_for

PASS = "hunter2-it-requirepass"
APP_PASS = "hunter2-it-app"
WRONG = "hunter2-it-wrong"

POLICIES = """
policies:
  - name: open
    objective: fairness
    match: { path_prefix: /open/ }
    key: [header.x-api-key]
    on_missing_key: skip
    on_store_error: open
    algorithm: token_bucket
    limits:
      - { rate: 1/h, burst: 1000 }
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


def store_config(addr, extra=""):
    return "workers: 2\nstore:\n  type: redis\n  addr: %s\n  timeout: 200ms\n%s" % (addr, extra) + POLICIES


def auth(s, srv, path, key="k"):
    return s.get(srv.http + "/v1/auth", headers={"X-Api-Key": key, "X-Original-URI": path}, timeout=5)


def everything_said(srv, responses):
    """Every byte the server showed: its log, metrics, readiness, the responses."""
    out = [srv.output(), requests.get(srv.admin + "/metrics", timeout=5).text,
           requests.get(srv.admin + "/readyz", timeout=5).text]
    out += [r.text + str(r.headers) for r in responses]
    return "\n".join(out)


def assert_refused(srv, port, words):
    """The failure mode applies, and the failure is explained and counted."""
    s = requests.Session()
    node = "127.0.0.1:%d" % port
    assert wait_for(lambda: node in srv.output() and words in srv.output(), 5), srv.output()
    r_open, r_closed = auth(s, srv, "/open/a"), auth(s, srv, "/closed/a")
    assert r_open.status_code == 200, r_open.text  # fail-open admits
    assert r_closed.status_code == 503, r_closed.text  # fail-closed refuses
    m = requests.get(srv.admin + "/metrics", timeout=5).text
    assert metric(m, "sluice_redis_events_total", event="auth_failures") > 0, m
    assert metric(m, "sluice_redis_node_up", node=node, role="node") == 0, m
    assert metric(m, "sluice_redis_node_auth_failures_total", node=node, role="node") > 0, m
    # still serving (fail-open policies admit): degraded, and the body names the node and why
    ready = requests.get(srv.admin + "/readyz", timeout=5)
    assert ready.status_code == 200 and ready.text.startswith("degraded"), ready.text
    assert node in ready.text and words in ready.text, ready.text
    line = [l for l in srv.output().splitlines() if words in l][0]
    assert node in line, line
    print("log:", line)
    return [r_open, r_closed]


def assert_working(srv, redis_port, password, user=None):
    s = requests.Session()
    assert wait_for(lambda: requests.get(srv.admin + "/readyz", timeout=5).text == "ready\n", 5), srv.output()
    codes = [auth(s, srv, "/closed/a", "counted").status_code for _ in range(5)]
    assert codes == [200] * 5
    c = Client(redis_port, password=password, user=user)
    keys = c.command("KEYS", "sl:*")
    c.close()
    assert len(keys) >= 1 and not any("counted" in k for k in keys)  # hashed keys in this Redis
    m = requests.get(srv.admin + "/metrics", timeout=5).text
    assert metric(m, "sluice_redis_node_up", node="127.0.0.1:%d" % redis_port, role="node") == 1, m
    assert metric(m, "sluice_redis_events_total", event="auth_failures") == 0, m


def test_requirepass(tmp_path):
    redis = RedisProc(["--requirepass", PASS])
    pwfile = tmp_path / "redis.pw"
    pwfile.write_text(PASS + "\n")
    servers, said = [], []
    try:
        # a password file
        srv = Server(config_text=store_config("127.0.0.1:%d" % redis.port, "  password_file: %s\n" % pwfile),
                     test_clock=False)
        servers.append(srv)
        assert_working(srv, redis.port, PASS)
        said.append(everything_said(srv, []))
        # an environment variable holding a wrong password
        os.environ["SLUICE_IT_REDIS_PASSWORD"] = WRONG
        try:
            srv = Server(config_text=store_config("127.0.0.1:%d" % redis.port,
                                                  "  password_env: SLUICE_IT_REDIS_PASSWORD\n"), test_clock=False)
        finally:
            del os.environ["SLUICE_IT_REDIS_PASSWORD"]
        servers.append(srv)
        said.append(everything_said(srv, assert_refused(srv, redis.port, "WRONGPASS")))
        # no password at all
        srv = Server(config_text=store_config("127.0.0.1:%d" % redis.port), test_clock=False)
        servers.append(srv)
        said.append(everything_said(srv, assert_refused(srv, redis.port, "NOAUTH")))
        # the password in a URL on the command line: works, warned, never echoed
        srv = Server(config_text="workers: 1\nstore:\n  type: memory\n" + POLICIES, test_clock=False,
                     extra=["--store", "redis://:%s@127.0.0.1:%d" % (PASS, redis.port)])
        servers.append(srv)
        assert_working(srv, redis.port, PASS)
        out = srv.output()
        assert "warn store_redis: the store URL holds a password" in out and " ps " in out, out
        assert "redis 127.0.0.1:%d (password set)" % redis.port in out, out
        said.append(everything_said(srv, []))
    finally:
        for srv in servers:
            assert srv.stop() == 0, srv.output()
        redis.close()
    for text in said:
        assert "hunter2" not in text, text


def test_acl_user():
    redis = RedisProc(["--user", "default", "off", "--user", "app", "on", ">" + APP_PASS, "~*", "&*", "+@all"])
    servers, said = [], []
    try:
        srv = Server(config_text=store_config("127.0.0.1:%d" % redis.port,
                                              "  username: app\n  password: %s\n" % APP_PASS), test_clock=False)
        servers.append(srv)
        assert_working(srv, redis.port, APP_PASS, user="app")
        said.append(everything_said(srv, []))
        srv = Server(config_text=store_config("127.0.0.1:%d" % redis.port,
                                              "  username: app\n  password: %s\n" % WRONG), test_clock=False)
        servers.append(srv)
        said.append(everything_said(srv, assert_refused(srv, redis.port, "WRONGPASS")))
        # the operator fixes the ACL: the running server recovers by itself (the
        # failure is retried with backoff, not given up)
        c = Client(redis.port, password=APP_PASS, user="app")
        assert c.command("ACL", "SETUSER", "app", ">" + WRONG) == "OK"
        c.close()
        assert wait_for(lambda: requests.get(srv.admin + "/readyz", timeout=5).text == "ready\n", 5), srv.output()
        assert auth(requests.Session(), srv, "/closed/a").status_code == 200
        assert "127.0.0.1:%d: connected" % redis.port in srv.output()
        said.append(everything_said(srv, []))
    finally:
        for srv in servers:
            assert srv.stop() == 0, srv.output()
        redis.close()
    for text in said:
        assert "hunter2" not in text, text


def test_config_errors_never_show_the_password(tmp_path):
    """A config with a password and a mistake, and a URL with a password and a mistake:
    refused at start with the position, without the password."""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(store_config("127.0.0.1:1", "  password: %s\n  db: lots\n" % PASS))
    import subprocess
    from conftest import BIN
    r = subprocess.run([BIN, "serve", "-c", str(cfg)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "bad number 'lots'" in r.stderr, r.stderr
    assert PASS not in r.stderr
    cfg.write_text("store:\n  type: memory\n" + POLICIES)
    r = subprocess.run([BIN, "serve", "-c", str(cfg), "--store", "redis://:%s@127.0.0.1:x" % PASS],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "bad store URL: column" in r.stderr, r.stderr
    assert PASS not in r.stderr
    r = subprocess.run([BIN, "serve", "-c", str(cfg), "--store", "mongodb://u:%s@h" % PASS],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "unknown store 'mongodb'" in r.stderr, r.stderr
    assert PASS not in r.stderr
