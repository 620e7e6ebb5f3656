# SPDX-License-Identifier: Apache-2.0
"""Forward-auth that finishes what it starts, with Debian's nginx: the shipped
examples/nginx snippets (auth_request + post_action to /v1/finish) in front of a small
upstream. A concurrency slot taken by /v1/auth is released when the response is over (not
when its lease runs out), a reserved cost is settled to what the upstream reported, and
the size a gateway forwards (X-Original-Length) is the body_bytes cost."""
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import time

import requests

from conftest import SRC, Server, free_port, wait_port

CONFIG = """
workers: 1
policies:
  - name: slots
    objective: protection
    match: { path_prefix: /slow/ }
    key: [header.x-tenant]
    on_missing_key: skip
    algorithm: concurrency
    limits:
      - { max: 2, lease: 60s }
  - name: tokens
    objective: cost
    match: { path_prefix: /ai/ }
    key: [header.x-tenant]
    on_missing_key: skip
    cost: { default: 100, settle: true }
    algorithm: fixed_window
    limits:
      - { rate: 1000/h }
  - name: upload
    objective: protection
    match: { path_prefix: /upload/ }
    key: [header.x-tenant]
    on_missing_key: skip
    cost: { from: body_bytes }
    algorithm: fixed_window
    limits:
      - { rate: 100/h }
"""


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path.startswith("/slow/"):
            time.sleep(0.3)
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if self.path.startswith("/ai/"):
            self.send_header("X-Usage", "7")  # what the request really cost
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        self.do_GET()

    def log_message(self, *a):
        pass


def start_nginx(sluice_port, up_port):
    """The shipped examples/nginx/nginx.conf (it includes the finish snippets), and one
    location forwarding the request's size (X-Original-Length)."""
    d = tempfile.mkdtemp(prefix="sluice-nginx-")
    ex = os.path.join(SRC, "examples", "nginx")
    for f in os.listdir(ex):
        shutil.copy(os.path.join(ex, f), d)
    port = free_port()
    with open(os.path.join(d, "nginx.conf")) as f:
        conf = f.read()
    assert "include sluice-finish.conf;" in conf and "include sluice-finish-location.conf;" in conf
    for old, new in (("listen 127.0.0.1:8000;", "listen 127.0.0.1:%d;" % port),
                     ("server 127.0.0.1:9000;", "server 127.0.0.1:%d;" % up_port),
                     ("http {\n", "http {\n" + "".join("    %s_temp_path %s/%s;\n" % (t, d, t) for t in
                                                    ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))),
                     ("        include sluice-fail-open.conf;\n",
                      "        include sluice-fail-open.conf;\n"
                      "        location = /_sluice_auth_len {\n"
                      "            internal;\n"
                      "            proxy_pass http://sluice_auth/v1/auth?status=403;\n"
                      "            proxy_pass_request_body off;\n"
                      "            proxy_set_header Content-Length \"\";\n"
                      "            proxy_set_header X-Original-URI $request_uri;\n"
                      "            proxy_set_header X-Original-Length $content_length;\n"
                      "        }\n"
                      "        location /upload/ {\n"
                      "            auth_request /_sluice_auth_len;\n"
                      "            error_page 403 = @sluice_limited;\n"
                      "            proxy_pass http://app;\n"
                      "        }\n")):
        assert conf.count(old) == 1, old
        conf = conf.replace(old, new)
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(conf)
    with open(os.path.join(d, "sluice-http.conf")) as f:
        http = f.read()
    with open(os.path.join(d, "sluice-http.conf"), "w") as f:
        f.write(http.replace("server 127.0.0.1:8080;", "server 127.0.0.1:%d;" % sluice_port))
    proc = subprocess.Popen(["nginx", "-p", d, "-c", os.path.join(d, "nginx.conf"),
                             "-g", "daemon off; pid %s/nginx.pid; error_log %s/error.log warn;" % (d, d)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_port(port)
    return proc, port, d


def test_nginx_finishes_slots_and_costs():
    srv = Server(config_text=CONFIG, test_clock=False, workers=1)
    up_port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", up_port), Upstream)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    proc, port, d = start_nginx(srv.http_port, up_port)
    try:
        base = "http://127.0.0.1:%d" % port

        def auth_remaining(path, tenant, **headers):
            """Another decision straight at sluice: what its RateLimit field says is left."""
            h = {"X-Original-URI": path, "X-Tenant": tenant}
            h.update(headers)
            r = requests.get(srv.http + "/v1/auth", headers=h, timeout=5)
            assert r.status_code == 200, r.text
            return int(r.headers["RateLimit"].split(";r=")[1].split(";")[0])

        # concurrency: 6 sequential slow requests through max 2 slots: each slot comes back
        # when its response is over (a 60 s lease would refuse the third)
        codes = [requests.get(base + "/slow/x", headers={"X-Tenant": "t"}, timeout=10).status_code
                 for _ in range(6)]
        assert codes == [200] * 6, codes
        # 3 at once: 2 admitted, the third limited (the slots really hold meanwhile)
        out = []
        th = [threading.Thread(target=lambda: out.append(
            requests.get(base + "/slow/y", headers={"X-Tenant": "u"}, timeout=10).status_code)) for _ in range(3)]
        for t in th:
            t.start()
        for t in th:
            t.join(10)
        assert sorted(out) == [200, 200, 429], out
        # settle: 100 reserved per request, 7 used: 93 come back (the next reservation of
        # 100 leaves 1000 - 7 - 100)
        assert requests.get(base + "/ai/q", headers={"X-Tenant": "a"}, timeout=5).status_code == 200
        time.sleep(0.3)  # post_action runs after the response
        assert auth_remaining("/ai/q", "a") == 893
        # the size nginx forwards is the cost: a 5-byte PUT costs 5, not a default
        r = requests.put(base + "/upload/f", data=b"hello", headers={"X-Tenant": "b"}, timeout=5)
        assert r.status_code == 200
        assert auth_remaining("/upload/f", "b", **{"X-Original-Length": "1"}) == 94
        # a replayed token is refused (single use): nothing given back twice
        r = requests.get(srv.http + "/v1/auth", headers={"X-Original-URI": "/ai/z", "X-Tenant": "c"},
                         timeout=5)
        tok = r.headers["X-Sluice-Token"]
        f1 = requests.post(srv.http + "/v1/finish", headers={"X-Sluice-Token": tok, "X-Sluice-Actual": "0"},
                           timeout=5)
        f2 = requests.post(srv.http + "/v1/finish", headers={"X-Sluice-Token": tok, "X-Sluice-Actual": "0"},
                           timeout=5)
        assert f1.status_code == 200 and f2.status_code == 404, (f1.text, f2.text)
        assert auth_remaining("/ai/z", "c") == 900  # the first 100 given back whole, once
    finally:
        proc.terminate()
        proc.wait(10)
        httpd.shutdown()
        srv.stop()
    err = open(os.path.join(d, "error.log")).read()
    assert "[emerg]" not in err, err
    srv.assert_clean()
