# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 against the real server with curl, python requests and http.client: the
decision endpoints, the headers a gateway relies on, keep-alive and pipelining, and
malformed requests answered with problem+json (the server keeps serving)."""
import http.client
import json
import socket
import subprocess

import requests


def raw(port, data, read_until_close=True, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
            if not read_until_close:
                break
    except socket.timeout:
        pass
    s.close()
    return out


def test_check_json(server):
    r = requests.post(server.http + "/v1/check", json={"policy": "api", "key": "alice"}, timeout=5)
    assert r.status_code == 200
    body = r.json()
    assert body["allowed"] is True
    assert body["deciding"] == "api"
    assert body["limits"][0]["limit"] == 20 and body["limits"][0]["remaining"] == 19
    assert "RateLimit" in body["headers"] and "RateLimit-Policy" in body["headers"]
    assert r.headers["RateLimit"] == body["headers"]["RateLimit"]
    import email.utils
    assert abs(email.utils.parsedate_to_datetime(r.headers["Date"]).timestamp() - __import__("time").time()) < 5
    # cost 25 can never fit a bucket of 20: rejected, nothing consumed
    r = requests.post(server.http + "/v1/check", json={"policy": "api", "key": "alice", "cost": 25}, timeout=5)
    assert r.status_code == 429 and r.json()["allowed"] is False
    r = requests.post(server.http + "/v1/check", json={"policy": "api", "key": "alice", "cost": 0}, timeout=5)
    assert r.json()["limits"][0]["remaining"] == 19
    # the attribute form runs the matching pipeline
    r = requests.post(server.http + "/v1/check",
                      json={"request": {"method": "GET", "path": "/x", "client_ip": "10.0.0.1",
                                        "headers": {"x-api-key": "bob"}}}, timeout=5)
    assert r.status_code == 200 and r.json()["deciding"] == "api"
    r = requests.post(server.http + "/v1/check", json={"policy": "nope", "key": "k"}, timeout=5)
    assert r.status_code == 404
    assert r.headers["Content-Type"] == "application/problem+json"
    r = requests.post(server.http + "/v1/check", data=b"not json", timeout=5)
    assert r.status_code == 400 and r.json()["status"] == 400


def test_auth_curl_headers_and_429(server):
    url = server.http + "/v1/auth"
    for i in range(20):
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "X-Api-Key: k-curl", url],
                             capture_output=True, text=True, timeout=10).stdout
        assert out == "200", (i, out)
    out = subprocess.run(["curl", "-si", "-H", "X-Api-Key: k-curl", url], capture_output=True,
                         timeout=10).stdout.decode()
    head, _, body = out.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 429 Too Many Requests")
    hdrs = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in head.split("\r\n")[1:]}
    assert hdrs["retry-after"] == "1"  # 1 token per 100 ms: 0.1 s rounds up to 1 s
    assert hdrs["ratelimit"].startswith('"api";r=0')
    assert hdrs["ratelimit-policy"] == '"api";q=20;w=2'
    assert hdrs["content-type"] == "application/problem+json"
    problem = json.loads(body)
    assert problem["status"] == 429 and problem["violated-policies"] == ["api"]
    # deny status for nginx auth_request
    r = requests.get(url + "?status=403", headers={"X-Api-Key": "k-curl"}, timeout=5)
    assert r.status_code == 403 and "Retry-After" in r.headers
    assert r.json()["status"] == 403  # the problem body states the status sent
    # forwarded attributes: the login rule matches the original method and URI, keyed by XFF
    h = {"X-Original-Method": "POST", "X-Original-URI": "/login?next=/", "X-Forwarded-For": "203.0.113.9, 10.0.0.1"}
    codes = [requests.get(url, headers=h, timeout=5).status_code for _ in range(7)]
    assert codes == [200] * 5 + [429] * 2
    h["X-Forwarded-For"] = "203.0.113.10"
    assert requests.get(url, headers=h, timeout=5).status_code == 200
    # after 100 ms of test clock one more api token exists
    server.clock_advance(100)
    assert requests.get(url, headers={"X-Api-Key": "k-curl"}, timeout=5).status_code == 200


def test_keep_alive_and_pipelining(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=5)
    for i in range(5):
        conn.request("GET", "/v1/auth", headers={"X-Api-Key": "ka"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        assert r.getheader("RateLimit") == '"api";r=%d;t=1' % (19 - i) or r.getheader("RateLimit").startswith('"api";r=%d' % (19 - i))
    conn.close()
    req = b"GET /v1/auth HTTP/1.1\r\nHost: x\r\nX-Api-Key: pipe\r\n\r\n"
    out = raw(server.http_port, req * 3 + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK") == 4
    assert out.index(b'r=19') < out.index(b'r=18') < out.index(b'r=17')
    assert out.endswith(b"ok\n")
    # HTTP/1.0 closes by default
    out = raw(server.http_port, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert out.startswith(b"HTTP/1.0 200 OK") and b"Connection: close" in out


def test_malformed_requests(server):
    p = server.http_port
    cases = [
        (b"GET / HTTP/1.1\r\n\r\n", 400),                                   # no Host
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505),
        (b"BREW /pot HTTP/1.1\r\nHost: a\r\n\r\n", 501),
        (b"GET /" + b"a" * 6000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"b" * 9000 + b"\r\n\r\n", 431),
        (b"POST /v1/check HTTP/1.1\r\nHost: a\r\nContent-Length: 10000000\r\n\r\n", 413),
        (b"POST /v1/check HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    ]
    for data, status in cases:
        out = raw(p, data)
        assert out.startswith(b"HTTP/1.1 %d " % status), (data[:40], out[:80])
        head, _, body = out.partition(b"\r\n\r\n")
        assert b"Content-Type: application/problem+json" in head
        assert b"Connection: close" in head
        assert json.loads(body)["status"] == status
    r = requests.get(server.http + "/nope", timeout=5)
    assert r.status_code == 404
    r = requests.get(server.http + "/v1/check", timeout=5)
    assert r.status_code == 405 and r.headers["Allow"] == "POST"
    # a chunked body and Expect: 100-continue (curl sends it for large bodies)
    body = json.dumps({"policy": "api", "key": "chunky", "pad": "x" * 2000})
    out = subprocess.run(["curl", "-s", "-H", "Transfer-Encoding: chunked", "-H", "Content-Type: application/json",
                          "--data-binary", body, server.http + "/v1/check"], capture_output=True, text=True,
                         timeout=10).stdout
    assert json.loads(out)["allowed"] is True
    assert requests.get(server.http + "/healthz", timeout=5).text == "ok\n"


def test_settle_and_release_over_http(server):
    r = requests.post(server.http + "/v1/acquire", json={"policy": "slots", "key": "t1"}, timeout=5)
    assert r.status_code == 200
    tok = r.json()["token"]
    r2 = requests.post(server.http + "/v1/acquire", json={"policy": "slots", "key": "t1"}, timeout=5)
    assert r2.status_code == 200
    assert requests.post(server.http + "/v1/acquire", json={"policy": "slots", "key": "t1"}, timeout=5).status_code == 429
    assert requests.post(server.http + "/v1/release", json={"token": tok}, timeout=5).status_code == 200
    assert requests.post(server.http + "/v1/acquire", json={"policy": "slots", "key": "t1"}, timeout=5).status_code == 200
    assert requests.post(server.http + "/v1/release", json={"token": "x"}, timeout=5).status_code in (400, 404)
    assert requests.post(server.http + "/v1/settle", json={"token": "x"}, timeout=5).status_code == 400


def test_admin(server):
    a = server.admin
    assert requests.get(a + "/healthz", timeout=5).text == "ok\n"
    assert requests.get(a + "/readyz", timeout=5).status_code == 200
    pol = requests.get(a + "/v1/policies", timeout=5).json()
    assert [p["name"] for p in pol["policies"]] == ["api", "big", "login", "tokens", "slots"]
    requests.post(server.http + "/v1/check", json={"policy": "api", "key": "secret-key-123", "cost": 30}, timeout=5)
    requests.post(server.http + "/v1/check", json={"policy": "api", "key": "secret-key-123"}, timeout=5)
    m = requests.get(a + "/metrics", timeout=5).text
    assert 'sluice_decisions_total{policy="api",result="allowed",window="api"} 1' in m
    assert 'sluice_decisions_total{policy="api",result="limited",window="api"} 1' in m
    assert "sluice_request_duration_seconds_bucket" in m and 'sluice_keys{policy="api"} ' in m
    assert "sluice_evictions_total" in m
    assert "secret-key-123" not in m  # never a raw key
    t = requests.post(a + "/v1/clock", json={"set_ms": 1_800_000_000_000}, timeout=5).json()
    assert t["wall_ms"] == 1_800_000_000_000
    # the decision endpoints are not on the admin listener and vice versa
    assert requests.get(a + "/v1/auth", timeout=5).status_code == 404
    assert requests.get(server.http + "/metrics", timeout=5).status_code == 404


def test_admin_token(make_server):
    from conftest import TEST_CONFIG
    s = make_server(config_text="admin:\n  token: s3cret\n" + TEST_CONFIG)
    assert requests.get(s.admin + "/metrics", timeout=5).status_code == 401
    assert requests.get(s.admin + "/metrics", headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 401
    assert requests.get(s.admin + "/metrics", headers={"Authorization": "Bearer s3cret"}, timeout=5).status_code == 200
    assert requests.get(s.admin + "/healthz", timeout=5).status_code == 200  # probes stay open


def test_reserve_then_settle_over_http(server):
    r = requests.post(server.http + "/v1/check", json={"policy": "tokens", "key": "u2"}, timeout=5)
    j = r.json()
    assert r.status_code == 200 and j["limits"][0]["remaining"] == 900 and j["token"]
    r = requests.post(server.http + "/v1/settle", json={"token": j["token"], "actual": 250}, timeout=5)
    assert r.status_code == 200
    peek = requests.post(server.http + "/v1/check", json={"policy": "tokens", "key": "u2", "cost": 0}, timeout=5)
    assert peek.json()["limits"][0]["remaining"] == 750  # charged the real 250, not the 100 reserved
    # a token settles once: a replay would refund or charge again
    r = requests.post(server.http + "/v1/settle", json={"token": j["token"], "actual": 0}, timeout=5)
    assert r.status_code == 404
    assert r.headers["Content-Type"] == "application/problem+json"
    assert "already used" in r.json()["detail"]
    peek = requests.post(server.http + "/v1/check", json={"policy": "tokens", "key": "u2", "cost": 0}, timeout=5)
    assert peek.json()["limits"][0]["remaining"] == 750


def test_release_token_is_single_use(server):
    toks = [requests.post(server.http + "/v1/acquire", json={"policy": "slots", "key": "r1"},
                          timeout=5).json()["token"] for _ in range(2)]
    assert requests.post(server.http + "/v1/acquire", json={"policy": "slots", "key": "r1"}, timeout=5).status_code == 429
    assert requests.post(server.http + "/v1/release", json={"token": toks[0]}, timeout=5).status_code == 200
    # releasing the same lease again must not free the other lease's slot
    assert requests.post(server.http + "/v1/release", json={"token": toks[0]}, timeout=5).status_code == 404
    assert requests.post(server.http + "/v1/acquire", json={"policy": "slots", "key": "r1"}, timeout=5).status_code == 200
    assert requests.post(server.http + "/v1/acquire", json={"policy": "slots", "key": "r1"}, timeout=5).status_code == 429


def test_traefik_style_forward_auth_headers(server):
    """Traefik and Caddy send X-Forwarded-Method/-Uri/-For instead of nginx's names."""
    h = {"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-For": "198.51.100.7"}
    codes = [requests.get(server.http + "/v1/auth", headers=h, timeout=5).status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]
    r = requests.get(server.http + "/v1/auth", headers=h, timeout=5)
    assert r.headers["Retry-After"] == "12"  # one request per 12 s (5/min)
    assert r.headers["Content-Type"] == "application/problem+json"


def test_missing_key_rejected_with_400(make_server):
    cfg = """
policies:
  - name: keyed
    objective: security
    key: [header.x-api-key]
    on_missing_key: reject
    algorithm: gcra
    limits:
      - { rate: 10/s, burst: 10 }
"""
    s = make_server(config_text=cfg)
    r = requests.get(s.http + "/v1/auth", timeout=5)
    assert r.status_code == 400
    assert r.headers["Content-Type"] == "application/problem+json"
    assert r.json()["status"] == 400
    # for nginx the same rejection comes as the requested deny status, body in agreement
    r = requests.get(s.http + "/v1/auth?status=403", timeout=5)
    assert r.status_code == 403
    assert requests.get(s.http + "/v1/auth", headers={"X-Api-Key": "k"}, timeout=5).status_code == 200


def test_auth_shaping_holds_the_answer(make_server):
    """A shaping policy (leaky bucket with a delay bound) makes /v1/auth answer late by the
    delay, so the gateway forwards the request then; beyond the bound it rejects."""
    import time
    cfg = """
policies:
  - name: shaped
    objective: protection
    key: [header.x-tenant]
    on_missing_key: reject
    algorithm: leaky_bucket
    limits:
      - { rate: 20/s, burst: 5, max_delay: 1s }
"""
    s = make_server(config_text=cfg)
    sess = requests.Session()
    took = []
    for _ in range(5):
        t0 = time.time()
        r = sess.get(s.http + "/v1/auth", headers={"X-Tenant": "t"}, timeout=5)
        took.append(time.time() - t0)
        assert r.status_code == 200
    # the test clock stands still: delays of 0, 50, 100, 150, 200 ms
    assert took[0] < 0.045
    for i in range(1, 5):
        assert took[i] >= 0.05 * i - 0.005, took
    assert sum(took) < 2.0
    r = sess.get(s.http + "/v1/auth", headers={"X-Tenant": "t"}, timeout=5)
    assert r.status_code == 429 and "Retry-After" in r.headers
    # pipelined behind a held answer: answered in order, after it
    s.clock_advance(10_000)
    req = b"GET /v1/auth HTTP/1.1\r\nHost: x\r\nX-Tenant: p\r\n\r\n"
    out = raw(s.http_port, req * 3 + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK") == 4 and out.endswith(b"ok\n")
