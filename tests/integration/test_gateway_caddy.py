# SPDX-License-Identifier: Apache-2.0
"""Caddy (Debian's caddy, forward_auth) running examples/caddy/Caddyfile unchanged, its
addresses and failure mode from the environment as the file documents: sluice's 429
reaches the client as sluice wrote it (policy, trace id), admitted responses carry the
RateLimit fields (forward_auth alone would only put them on the upstream request, and a
client cannot inject its own), shaping up to max_delay passes, and with sluice stopped
SLUICE_FAIL=open lets requests through while SLUICE_FAIL=closed answers 503."""
import os
import shutil
import subprocess
import tempfile

import pytest
import requests

from conftest import SRC
from gateway import (GATEWAY_CONFIG, App, check_admitted_and_limited, check_shaping,
                     check_sluice_down, free_addr, stop, wait_http)

CADDYFILE = os.path.join(SRC, "examples", "caddy", "Caddyfile")


def start_caddy(sluice_port, app, mode):
    d = tempfile.mkdtemp(prefix="sluice-caddy-")
    site = free_addr()
    env = dict(os.environ, CADDY_SITE="http://" + site, SLUICE_HTTP="127.0.0.1:%d" % sluice_port,
               APP=app.addr, SLUICE_FAIL=mode, XDG_DATA_HOME=d, XDG_CONFIG_HOME=d, HOME=d)
    proc = subprocess.Popen(["caddy", "run", "--config", CADDYFILE, "--adapter", "caddyfile"],
                            env=env, cwd=d, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(d, "caddy.log"), "w"))
    base = "http://" + site
    wait_http(base + "/", proc)
    return proc, base, d


@pytest.fixture
def app():
    a = App()
    yield a
    a.close()


def test_caddy_recipe(make_server, app):
    server = make_server(config_text=GATEWAY_CONFIG)
    gws = {}
    try:
        for mode in ("open", "closed"):
            gws[mode] = start_caddy(server.http_port, app, mode)
        check_admitted_and_limited(gws["open"][1], app, key="alice")
        check_admitted_and_limited(gws["closed"][1], app, key="bob")
        # a client's own RateLimit field never passes for sluice's
        r = requests.get(gws["open"][1] + "/api/x", headers={"X-Api-Key": "carol",
                         "RateLimit": '"api";r=999;t=1'}, timeout=10)
        assert r.status_code == 200 and r.headers["RateLimit"].startswith('"api";r=4;'), r.headers
        check_shaping(gws["open"][1], app)
        server.stop()
        for mode in ("open", "closed"):
            check_sluice_down(gws[mode][1], app, mode)
    finally:
        for proc, _, d in gws.values():
            stop(proc)
            shutil.rmtree(d, ignore_errors=True)
