# SPDX-License-Identifier: Apache-2.0
"""Shaping over gRPC (grpcio as Envoy's rate limit filter would call): Envoy cannot hold a
request, so a leaky bucket's delayed admission is answered OK at once and says how long it
was meant to wait (X-Sluice-Delay-Ms in response_headers_to_add); an on_exceed delay is
answered OVER_LIMIT with Retry-After and the same problem body as a rejection; config check
says both for policies reachable over gRPC."""
import json
import os
import subprocess
import tempfile

from conftest import BIN, Client

CONFIG = """
workers: 1
policies:
  - name: shaper
    match: { domain: edge }
    key: [descriptor.k]
    algorithm: leaky_bucket
    limits: [ { rate: 2/s, burst: 3, max_delay: 2s } ]
  - name: waiter
    match: { domain: wait }
    key: [descriptor.k]
    algorithm: fixed_window
    limits: [ { rate: 2/10s } ]
    on_exceed: { delay: 20s }
  - name: plain
    match: { domain: plain }
    key: [descriptor.k]
    algorithm: fixed_window
    limits: [ { rate: 1/10s } ]
"""

OK, OVER = 1, 2


def headers(r):
    return {h.key: h.value for h in r.response_headers_to_add}


def test_shaped_admission_says_its_delay(make_server, pb):
    srv = make_server(config_text=CONFIG)
    srv.clock_set(1767225600000)
    c = Client(pb, srv)
    got = [c.check("edge", [[("k", "a")]]) for _ in range(4)]
    # 3 fit the bucket: at once, then 500 ms and 1000 ms behind; the 4th would wait 1.5 s
    # but the bucket is full: refused
    assert [r.overall_code for r in got] == [OK, OK, OK, OVER], got
    assert "X-Sluice-Delay-Ms" not in headers(got[0])
    assert headers(got[1])["X-Sluice-Delay-Ms"] == "500", headers(got[1])
    assert headers(got[2])["X-Sluice-Delay-Ms"] == "1000"
    assert got[1].raw_body == b""
    refused = json.loads(got[3].raw_body)
    assert refused["status"] == 429 and refused["violated-policies"] == ["shaper"], refused
    c.close()


def test_delay_reaction_has_the_problem_body(make_server, pb):
    srv = make_server(config_text=CONFIG)
    srv.clock_set(1767225600000)
    c = Client(pb, srv)
    got = [c.check("wait", [[("k", "a")]]) for _ in range(3)]
    assert [r.overall_code for r in got] == [OK, OK, OVER]
    assert headers(got[2])["Retry-After"] == "10", headers(got[2])
    body = json.loads(got[2].raw_body)  # was: empty, while a rejection had one
    assert body["type"].endswith("#quota-exceeded") and body["status"] == 429, body
    assert body["violated-policies"] == ["waiter"] and "retry after 10 s" in body["detail"], body
    # the same shape as a plain rejection's
    plain = [c.check("plain", [[("k", "a")]]) for _ in range(2)]
    assert plain[1].overall_code == OVER
    assert set(json.loads(plain[1].raw_body)) == set(body), (plain[1].raw_body, body)
    c.close()


def test_config_check_says_it():
    d = tempfile.mkdtemp(prefix="sluice-gs-")
    p = os.path.join(d, "c.yaml")
    with open(p, "w") as f:
        f.write(CONFIG)
    r = subprocess.run([BIN, "config", "check", p], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert ":4:5: warning: policy 'shaper' (domain 'edge') shapes with a leaky_bucket: over gRPC Envoy " \
           "cannot hold a request, so a delayed admission is answered OK at once" in r.stderr, r.stderr
    assert ":9:5: warning: policy 'waiter' (domain 'wait') delays with on_exceed: delay" in r.stderr
    assert "'plain'" not in r.stderr
    # an HTTP-only shaper (no domain) is held by sluice: no warning
    with open(p, "w") as f:
        f.write("policies:\n  - { name: h, objective: protection, key: [header.x-k], algorithm: leaky_bucket,"
                " limits: [ { rate: 2/s, burst: 3, max_delay: 2s } ] }\n")
    r = subprocess.run([BIN, "config", "check", p], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
