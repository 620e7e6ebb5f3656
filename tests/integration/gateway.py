# SPDX-License-Identifier: Apache-2.0
"""What every gateway recipe (examples/nginx, caddy, haproxy) must show with the real
gateway in front of a real application and the real sluice: admitted requests reach the
application and its response carries sluice's RateLimit fields; limited ones get sluice's
429 (Retry-After, RateLimit fields, problem+json naming the policy and the trace id) and
never reach the application; shaped requests are held by sluice up to max_delay and
still succeed (the gateway waits longer than max_delay); with sluice stopped, the
fail-open variant lets requests through (saying so: X-Sluice-Fail-Open) and the
fail-closed one answers a 503 problem.
The recipes' timeouts are written for MAX_DELAY_S; GATEWAY_CONFIG uses it."""
import http.server
import json
import os
import socket
import subprocess
import threading
import time

import requests

from conftest import free_port

MAX_DELAY_S = 2
# Token bucket of 5 with a slow refill (and the test clock: no refill at all), and a
# shaper: 2/s, at most 5 queued, held up to MAX_DELAY_S.
GATEWAY_CONFIG = """
workers: 2
store: { type: memory, max_keys: 10000 }
policies:
  - name: api
    objective: fairness
    match: { path_prefix: /api/ }
    key: [header.x-api-key]
    on_missing_key: { use: [client_ip] }
    algorithm: token_bucket
    limits: [ { rate: 1/min, burst: 5 } ]
  - name: shaped
    objective: protection
    match: { path_prefix: /shaped/ }
    key: [header.x-api-key]
    on_missing_key: { use: [client_ip] }
    algorithm: leaky_bucket
    limits: [ { rate: 2/s, burst: 5, max_delay: %ds } ]
""" % MAX_DELAY_S
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = "00-%s-00f067aa0ba902b7-01" % TRACE_ID


class App:
    """The protected application: answers 200 "app" and remembers every request."""

    def __init__(self):
        self.hits = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                hits.append((self.command, self.path, self.headers.get("X-Api-Key")))
                body = b"app\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-App", "yes")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_POST = do_HEAD = do_GET

            def log_message(self, *a):
                pass

        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.addr = "127.0.0.1:%d" % self.port

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_http(url, proc, timeout=15.0):
    """Until the gateway answers anything on `url` (bounded); fails if it exits."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError("gateway exited: %s" % proc.returncode)
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.05)
    raise AssertionError("gateway did not answer on " + url)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def check_admitted_and_limited(base, app, key="alice"):
    s = requests.Session()
    before = len(app.hits)
    for i in range(5):
        r = s.get(base + "/api/items?i=%d" % i, headers={"X-Api-Key": key}, timeout=10)
        assert r.status_code == 200 and r.text == "app\n", (i, r.status_code, r.text)
        assert r.headers.get("X-App") == "yes"
        assert "X-Sluice-Fail-Open" not in r.headers  # decided by sluice
        # sluice's fields on the application's response, counting down
        assert r.headers["RateLimit"].startswith('"api";r=%d;' % (4 - i)), r.headers
        assert r.headers["RateLimit-Policy"] == '"api";q=5;w=300', r.headers
    assert [h[1:] for h in app.hits[before:]] == [("/api/items?i=%d" % i, key) for i in range(5)]

    r = s.get(base + "/api/items?i=5", headers={"X-Api-Key": key, "traceparent": TRACEPARENT},
              timeout=10)
    assert r.status_code == 429, (r.status_code, r.text)
    assert r.headers["Retry-After"] == "60"
    assert r.headers["RateLimit"].startswith('"api";r=0;'), r.headers
    assert r.headers["RateLimit-Policy"] == '"api";q=5;w=300'
    assert r.headers["Content-Type"] == "application/problem+json"
    assert "X-App" not in r.headers
    problem = json.loads(r.text)
    assert problem["status"] == 429 and problem["violated-policies"] == ["api"], problem
    assert problem["type"].endswith("#quota-exceeded") and problem["trace_id"] == TRACE_ID
    assert "retry after 60 s" in problem["detail"], problem
    assert len(app.hits) == before + 5          # the limited request never reached the app

    r = s.get(base + "/api/items", headers={"X-Api-Key": key + "-other"}, timeout=10)
    assert r.status_code == 200 and r.headers["RateLimit"].startswith('"api";r=4;')


def check_shaping(base, app, key="shaper"):
    """Six requests at once on the shaper: five are held 0, 0.5, ... 2 s by sluice and
    all succeed through the gateway (its timeout exceeds max_delay); the sixth would wait
    longer than max_delay and is limited."""
    results = []

    def one():
        t0 = time.monotonic()
        try:
            r = requests.get(base + "/shaped/job", headers={"X-Api-Key": key},
                             timeout=MAX_DELAY_S + 5)
            results.append((r.status_code, time.monotonic() - t0))
        except requests.RequestException as e:
            results.append((repr(e), time.monotonic() - t0))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(MAX_DELAY_S + 10)
    statuses = sorted(str(s) for s, _ in results)
    assert statuses == ["200"] * 5 + ["429"], results
    held = sorted(t for s, t in results if s == 200)
    # the longest hold is max_delay (2 s), well inside the gateway's 3 s
    assert held[-1] >= MAX_DELAY_S - 0.3 and held[-1] < MAX_DELAY_S + 1, results


def check_sluice_down(base, app, mode):
    """sluice stopped (connections refused): decided at once (no retries for seconds),
    open or closed as the recipe's variant says."""
    before = len(app.hits)
    t0 = time.monotonic()
    r = requests.get(base + "/api/items", headers={"X-Api-Key": "when-down"}, timeout=10)
    assert time.monotonic() - t0 < 1.5, time.monotonic() - t0
    if mode == "open":
        assert r.status_code == 200 and r.text == "app\n", (r.status_code, r.text)
        assert "RateLimit" not in r.headers
        assert r.headers.get("X-Sluice-Fail-Open") == "sluice unreachable", r.headers  # never silent
        assert len(app.hits) == before + 1
    else:
        assert r.status_code == 503, (r.status_code, r.text)
        assert r.headers["Content-Type"] == "application/problem+json"
        assert json.loads(r.text)["type"].endswith("#temporary-reduced-capacity")
        assert len(app.hits) == before


def free_addr():
    return "127.0.0.1:%d" % free_port()


def read_example(*parts):
    from conftest import SRC
    with open(os.path.join(SRC, "examples", *parts)) as f:
        return f.read()


def replace_once(text, old, new):
    """The examples are run as shipped, with only their addresses changed: each address
    must appear exactly once, so the test notices when an example changes shape."""
    assert text.count(old) == 1, (old, text.count(old))
    return text.replace(old, new)


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def wait_closed(port, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                time.sleep(0.05)
        except OSError:
            return
    raise AssertionError("port %d still open" % port)
