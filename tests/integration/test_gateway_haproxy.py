# SPDX-License-Identifier: Apache-2.0
"""HAProxy 2.6 (Debian's, with Lua) running examples/haproxy (haproxy.cfg and
sluice.lua) unchanged, addresses and failure mode from the environment as the files
document: sluice's 429 goes to the client as sluice wrote it, admitted responses carry
the RateLimit fields, shaping up to max_delay passes, and with sluice stopped
SLUICE_FAIL=open lets requests through while SLUICE_FAIL=closed answers 503."""
import os
import subprocess

import pytest
import requests

from conftest import SRC
from gateway import (GATEWAY_CONFIG, App, check_admitted_and_limited, check_shaping,
                     check_sluice_down, free_addr, stop, wait_http)

EXAMPLE = os.path.join(SRC, "examples", "haproxy")


def start_haproxy(sluice_port, app, mode):
    bind = free_addr()
    env = dict(os.environ, SLUICE="127.0.0.1:%d" % sluice_port, HAPROXY_BIND=bind,
               APP=app.addr, SLUICE_FAIL=mode, SLUICE_GATE="sluice-test-%d-%s" % (os.getpid(), mode))
    check = subprocess.run(["haproxy", "-c", "-f", "haproxy.cfg"], cwd=EXAMPLE, env=env,
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and "ALERT" not in check.stderr + check.stdout, check.stderr
    proc = subprocess.Popen(["haproxy", "-db", "-f", "haproxy.cfg"], cwd=EXAMPLE, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = "http://" + bind
    wait_http(base + "/", proc)
    return proc, base


@pytest.fixture
def app():
    a = App()
    yield a
    a.close()


def test_haproxy_recipe(make_server, app):
    server = make_server(config_text=GATEWAY_CONFIG)
    gws = {}
    try:
        for mode in ("open", "closed"):
            gws[mode] = start_haproxy(server.http_port, app, mode)
        check_admitted_and_limited(gws["open"][1], app, key="alice")
        check_admitted_and_limited(gws["closed"][1], app, key="bob")
        r = requests.get(gws["open"][1] + "/api/x", headers={"X-Api-Key": "carol",
                         "RateLimit": '"api";r=999;t=1'}, timeout=10)
        assert r.status_code == 200 and r.headers["RateLimit"].startswith('"api";r=4;'), r.headers
        check_shaping(gws["open"][1], app)
        server.stop()
        for mode in ("open", "closed"):
            check_sluice_down(gws[mode][1], app, mode)
    finally:
        for proc, _ in gws.values():
            stop(proc)
