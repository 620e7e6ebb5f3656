# SPDX-License-Identifier: Apache-2.0
"""Who the client is, through nginx (examples/nginx started by its own run.sh): with nginx
appending to X-Forwarded-For ($proxy_add_x_forwarded_for), a client that sends its own
rotating X-Forwarded-For picks its key while sluice has no trusted proxy (and config check
says so), and is counted under its real address once `client_ip.trusted` (or `hops`) is
set; the route a location names reaches sluice in X-Sluice-Route and a client's own
never does; run.sh follows moved ports, and a fail-open is visible (a header on the
response, a line in nginx's log) instead of silent."""
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest
import requests

from conftest import BIN, SRC, Server, free_port
from gateway import App, replace_once, stop, wait_http

EXAMPLE = os.path.join(SRC, "examples", "nginx")

POLICIES = """
policies:
  - name: per-ip
    objective: fairness
    match: { path_prefix: /ip/ }
    key: [client_ip]
    algorithm: fixed_window
    limits: [ { rate: 3/min } ]
  - name: per-route
    objective: fairness
    match: { path_prefix: /r/ }
    key: [route]
    algorithm: fixed_window
    limits: [ { rate: 2/min } ]
"""


@pytest.fixture
def app():
    a = App()
    yield a
    a.close()


def run_recipe(sluice_http, app, edit=None, fail="open"):
    """examples/nginx through its run.sh on free ports; `edit(dir)` may change a copy of
    the recipe first. Returns (proc, base URL, stderr path, tmp dir)."""
    d = tempfile.mkdtemp(prefix="sluice-nginx-trust-")
    src = os.path.join(d, "recipe")
    shutil.copytree(EXAMPLE, src)
    if edit:
        edit(src)
    listen = "127.0.0.1:%d" % free_port()
    err = os.path.join(d, "stderr")
    env = dict(os.environ, HTTP=sluice_http, APP=app.addr, LISTEN=listen, FAIL=fail, TMPDIR=d)
    proc = subprocess.Popen(["bash", os.path.join(src, "run.sh")], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(err, "w"))
    base = "http://" + listen
    wait_http(base + "/", proc)
    return proc, base, err, d


def get_from(base, path, source, headers=None):
    """A GET from a chosen loopback source address (the client nginx sees)."""
    host, port = base[len("http://"):].rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), source_address=(source, 0), timeout=10)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def appending(src):
    """The recipe as it is behind another proxy: nginx appends to the chain."""
    p = os.path.join(src, "sluice-auth.conf")
    with open(p) as f:
        text = f.read()
    text = replace_once(text, "proxy_set_header X-Forwarded-For $remote_addr;",
                        "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;")
    with open(p, "w") as f:
        f.write(text)


def spoof_run(base, source, n=6):
    """n requests from `source`, each with its own X-Forwarded-For: their statuses."""
    return [get_from(base, "/ip/x", source, {"X-Forwarded-For": "198.51.100.%d" % i})[0] for i in range(n)]


def config_check(text):
    d = tempfile.mkdtemp(prefix="sluice-cc-")
    p = os.path.join(d, "c.yaml")
    with open(p, "w") as f:
        f.write(text)
    r = subprocess.run([BIN, "config", "check", p], capture_output=True, text=True, timeout=30)
    shutil.rmtree(d, ignore_errors=True)
    return r


@pytest.mark.parametrize("trust", ["client_ip: { header: X-Forwarded-For, trusted: [127.0.0.1] }\n",
                                   "client_ip: { header: X-Forwarded-For, hops: 1 }\n"])
def test_spoofed_forwarded_for(app, trust):
    # before: no trusted proxy. The left-most address is the client's own choice.
    r = config_check(POLICIES)
    assert r.returncode == 0, r.stderr
    assert "warning: policy 'per-ip' keys on client_ip" in r.stderr and "no trusted proxies" in r.stderr, r.stderr
    before = Server(config_text=POLICIES)
    gw = None
    try:
        gw = run_recipe("127.0.0.1:%d" % before.http_port, app, appending)
        assert spoof_run(gw[1], "127.0.0.2") == [200] * 6  # spoofable: never limited
    finally:
        if gw:
            stop(gw[0])
            shutil.rmtree(gw[3], ignore_errors=True)
        before.stop()
        before.assert_clean()
    # after: the gateway (127.0.0.1, the peer) is trusted; the client is the right-most
    # address that is not, the one nginx saw
    r = config_check(trust + POLICIES)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    after = Server(config_text=trust + POLICIES)
    gw = None
    try:
        gw = run_recipe("127.0.0.1:%d" % after.http_port, app, appending)
        assert spoof_run(gw[1], "127.0.0.2") == [200] * 3 + [429] * 3
        # another real client has its own count, whatever it claims to be
        assert get_from(gw[1], "/ip/x", "127.0.0.3", {"X-Forwarded-For": "127.0.0.2"})[0] == 200
        # sluice says whom it counted: 127.0.0.2 is exhausted, asked directly
        chk = requests.post(after.http + "/v1/check", json={"method": "GET", "path": "/ip/x",
                                                            "client_ip": "127.0.0.2"}, timeout=10).json()
        assert chk["allowed"] is False, chk
    finally:
        if gw:
            stop(gw[0])
            shutil.rmtree(gw[3], ignore_errors=True)
        after.stop()
        after.assert_clean()


def with_routes(src):
    """Two locations naming their route, as sluice-auth.conf says to."""
    p = os.path.join(src, "nginx.conf")
    with open(p) as f:
        text = f.read()
    loc = ("        location /r/%s/ {\n            set $sluice_route %s;\n"
           "            include sluice-protect.conf;\n            proxy_pass http://app;\n        }\n")
    text = replace_once(text, "        location / {\n", loc % ("a", "route-a") + loc % ("b", "route-b") +
                        "        location / {\n")
    with open(p, "w") as f:
        f.write(text)


def test_route_through_nginx(make_server, app):
    server = make_server(config_text="client_ip: peer\n" + POLICIES)
    proc, base, err, d = run_recipe("127.0.0.1:%d" % server.http_port, app, with_routes)
    try:
        s = requests.Session()
        # a client's own X-Sluice-Route never reaches sluice: each location counts its route
        got = [s.get(base + "/r/a/x", headers={"X-Sluice-Route": "mine-%d" % i}, timeout=10).status_code
               for i in range(3)]
        assert got == [200, 200, 429], got
        r = s.get(base + "/r/b/x", headers={"X-Sluice-Route": "route-a"}, timeout=10)
        assert r.status_code == 200 and r.headers["RateLimit"].startswith('"per-route";r=1;'), r.headers
        # a location without a route sends none (sluice then counts the policy's path
        # pattern, a fresh key: r=1), never the client's (route-b has one used: r=0)
        r = s.get(base + "/r/other", headers={"X-Sluice-Route": "route-b"}, timeout=10)
        assert r.status_code == 200 and r.headers["RateLimit"].startswith('"per-route";r=1;'), r.headers
    finally:
        stop(proc)
        shutil.rmtree(d, ignore_errors=True)


def test_route_on_auth(make_server):
    server = make_server(config_text=POLICIES)
    h = {"X-Original-URI": "/r/x"}
    got = [requests.get(server.http + "/v1/auth", headers=dict(h, **{"X-Sluice-Route": "orders"}),
                        timeout=10).status_code for _ in range(3)]
    assert got == [200, 200, 429]
    r = requests.get(server.http + "/v1/auth", headers=dict(h, **{"X-Sluice-Route": "users"}), timeout=10)
    assert r.status_code == 200 and r.headers["RateLimit"].startswith('"per-route";r=1;')
    # the header's name is configurable (auth.route_header); then X-Sluice-Route is no route
    other = make_server(config_text="auth: { route_header: X-Route-Name }\n" + POLICIES)
    got = [requests.get(other.http + "/v1/auth", headers=dict(h, **{"X-Route-Name": "orders"}),
                        timeout=10).status_code for _ in range(3)]
    assert got == [200, 200, 429]
    # X-Sluice-Route is then no route: the policy's path pattern is counted (a fresh key)
    r = requests.get(other.http + "/v1/auth", headers=dict(h, **{"X-Sluice-Route": "orders"}), timeout=10)
    assert r.status_code == 200 and r.headers["RateLimit"].startswith('"per-route";r=1;'), r.headers
    bad = config_check("auth: { route_header: \"X Route\" }\n" + POLICIES)
    assert bad.returncode != 0 and ":1:23: bad auth.route_header" in bad.stderr, bad.stderr


def test_moved_ports_and_visible_fail_open(make_server, app):
    """getting-started with every port moved: run.sh follows them (limits hold), and once
    sluice is gone the answers say they were not limited, in a header and in nginx's log."""
    server = make_server(config_text="client_ip: peer\n" + POLICIES)
    proc, base, err, d = run_recipe("127.0.0.1:%d" % server.http_port, app)
    try:
        s = requests.Session()
        got = [s.get(base + "/ip/x", timeout=10) for _ in range(4)]
        assert [r.status_code for r in got] == [200, 200, 200, 429], [r.status_code for r in got]
        assert got[0].headers["RateLimit"].startswith('"per-ip";r=2;')
        assert all("X-Sluice-Fail-Open" not in r.headers for r in got)
        with open(err) as f:
            quiet = f.read()
        assert "[warn]" not in quiet and "[error]" not in quiet, quiet
        server.stop()
        r = s.get(base + "/ip/x", timeout=10)
        assert r.status_code == 200 and r.text == "app\n"
        assert r.headers.get("X-Sluice-Fail-Open") == "sluice unreachable", r.headers
        # and nginx's log says so, once, naming sluice's address (with the finish snippets
        # included, nginx logs the request in @sluice_finish and drops the subrequest's line)
        deadline = time.time() + 5
        log = ""
        while time.time() < deadline and "fail-open" not in log:
            with open(err) as f:
                log = f.read()
            time.sleep(0.05)
        assert "sluice unreachable at 127.0.0.1:%d " % server.http_port in log, log
        assert "GET /ip/x from 127.0.0.1 passed unlimited (fail-open)" in log, log
        assert log.count("passed unlimited (fail-open)") == 1, log
    finally:
        stop(proc)
        shutil.rmtree(d, ignore_errors=True)
    # a wrong sluice address: run.sh says so before nginx starts, and each answer says it
    wrong = "127.0.0.1:%d" % free_port()
    proc, base, err, d = run_recipe(wrong, app)
    try:
        with open(err) as f:
            assert "warning: nothing answers at %s" % wrong in f.read()
        r = requests.get(base + "/ip/x", timeout=10)
        assert r.status_code == 200 and r.headers.get("X-Sluice-Fail-Open") == "sluice unreachable"
    finally:
        stop(proc)
        shutil.rmtree(d, ignore_errors=True)
    # the fail-closed variant answers 503, as before
    proc, base, err, d = run_recipe(wrong, app, fail="closed")
    try:
        r = requests.get(base + "/ip/x", timeout=10)
        assert r.status_code == 503 and json.loads(r.text)["status"] == 503
    finally:
        stop(proc)
        shutil.rmtree(d, ignore_errors=True)
