# SPDX-License-Identifier: Apache-2.0
"""nginx (Debian's nginx-light, auth_request) running examples/nginx as shipped (only
its addresses changed) in front of an application: admitted requests carry sluice's
RateLimit fields, limited ones get a 429 with the policy and the trace id and never
reach the application, shaping up to max_delay passes (no 500), and with sluice stopped
the fail-open server lets requests through while the fail-closed one answers 503."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import SRC
from gateway import (GATEWAY_CONFIG, App, check_admitted_and_limited, check_shaping,
                     check_sluice_down, free_addr, replace_once, stop, wait_http)

EXAMPLE = os.path.join(SRC, "examples", "nginx")


def start_nginx(sluice_port, app, mode):
    d = tempfile.mkdtemp(prefix="sluice-nginx-")
    for f in os.listdir(EXAMPLE):
        shutil.copy(os.path.join(EXAMPLE, f), d)
    listen = free_addr()
    with open(os.path.join(d, "nginx.conf")) as f:
        conf = f.read()
    conf = replace_once(conf, "listen 127.0.0.1:8000;", "listen %s;" % listen)
    conf = replace_once(conf, "server 127.0.0.1:9000;", "server %s;" % app.addr)
    conf = replace_once(conf, "include sluice-fail-open.conf;", "include sluice-fail-%s.conf;" % mode)
    # Only for running unprivileged from a scratch directory: temp files there.
    conf = replace_once(conf, "http {\n", "http {\n" + "".join(
        "    %s_temp_path %s/%s;\n" % (t, d, t) for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")))
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(conf)
    with open(os.path.join(d, "sluice-http.conf")) as f:
        http = f.read()
    with open(os.path.join(d, "sluice-http.conf"), "w") as f:
        f.write(replace_once(http, "server 127.0.0.1:8080;", "server 127.0.0.1:%d;" % sluice_port))
    proc = subprocess.Popen(["nginx", "-p", d, "-c", os.path.join(d, "nginx.conf"),
                             "-g", "daemon off; pid %s/nginx.pid;" % d],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "err.log"), "w"))
    base = "http://" + listen
    wait_http(base + "/", proc)
    return proc, base, d


@pytest.fixture
def app():
    a = App()
    yield a
    a.close()


def test_nginx_recipe(make_server, app):
    server = make_server(config_text=GATEWAY_CONFIG)
    gws = {}
    try:
        for mode in ("open", "closed"):
            gws[mode] = start_nginx(server.http_port, app, mode)
        check_admitted_and_limited(gws["open"][1], app, key="alice")
        check_admitted_and_limited(gws["closed"][1], app, key="bob")
        check_shaping(gws["open"][1], app)
        server.stop()
        for mode in ("open", "closed"):
            check_sluice_down(gws[mode][1], app, mode)
    finally:
        for proc, _, d in gws.values():
            stop(proc)
            shutil.rmtree(d, ignore_errors=True)
