# SPDX-License-Identifier: Apache-2.0
"""Envoy's rate limit service over gRPC, driven by a real gRPC client (python3-grpcio) with
stubs generated at test time from the project's own .proto files (src/api/grpc/*.proto):
ShouldRateLimit on the envoyproxy/ratelimit README examples (examples/envoy/), one status
per descriptor with its limit, Health/Check, gRPC errors answered with the right status
while the server stays up, the HTTP /json endpoint, metrics, and GOAWAY on drain.
"""
import signal
import json
import os
import subprocess
import time
import socket

import grpc
import pytest
import requests

from conftest import SRC, Client

EXAMPLES = os.path.join(SRC, "examples", "envoy")
RLS_PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OK, OVER = 1, 2
UINT32_MAX = 4294967295


def start(make_server, pb, example):
    s = make_server(config_path=os.path.join(EXAMPLES, example))
    return s, Client(pb, s)


def codes(resp):
    return [s.code for s in resp.statuses]


# ---- the envoyproxy/ratelimit README examples ---------------------------------------

def test_example1_values_each_500_per_second(make_server, pb):
    s, c = start(make_server, pb, "01-mongo-cps.yaml")
    r = c.check("mongo_cps", [[("database", "users")]], hits=499)
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 1
    lim = r.statuses[0].current_limit
    assert (lim.requests_per_unit, lim.unit) == (500, 1)  # SECOND
    assert lim.name == "mongo_cps/database=users"
    assert 0 < r.statuses[0].duration_until_reset.seconds <= 1
    assert c.check("mongo_cps", [[("database", "users")]]).overall_code == OK
    r = c.check("mongo_cps", [[("database", "users")]])
    assert r.overall_code == OVER and codes(r) == [OVER] and r.statuses[0].limit_remaining == 0
    # the other value has its own counter; an unknown value and domain are not limited
    assert c.check("mongo_cps", [[("database", "default")]]).statuses[0].limit_remaining == 499
    r = c.check("mongo_cps", [[("database", "other")]], hits=10000)
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    assert c.check("nosuch", [[("database", "users")]]).overall_code == OK
    c.close()


def test_example2_nested_rule_and_top_level_rule(make_server, pb):
    s, c = start(make_server, pb, "02-messaging.yaml")
    both = [[("message_type", "marketing"), ("to_number", "2061111111")], [("to_number", "2061111111")]]
    for i in range(5):
        r = c.check("messaging", both)
        assert r.overall_code == OK, i
        assert r.statuses[0].current_limit.requests_per_unit == 5
        assert r.statuses[1].current_limit.requests_per_unit == 100
        assert r.statuses[0].current_limit.unit == 4  # DAY
    r = c.check("messaging", both)
    assert r.overall_code == OVER and codes(r) == [OVER, OK]
    # any message to the number: 100 a day, 5 already counted
    r = c.check("messaging", [[("to_number", "2061111111")]])
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 94
    c.close()


def test_example3_exact_value_beats_bare_key(make_server, pb):
    s, c = start(make_server, pb, "03-edge-proxy-per-ip.yaml")
    r = c.check("edge_proxy_per_ip", [[("remote_address", "50.0.0.5")]])
    assert r.overall_code == OVER and r.statuses[0].current_limit.requests_per_unit == 0
    assert c.check("edge_proxy_per_ip", [[("remote_address", "10.0.0.1")]], hits=10).overall_code == OK
    assert c.check("edge_proxy_per_ip", [[("remote_address", "10.0.0.1")]]).overall_code == OVER
    assert c.check("edge_proxy_per_ip", [[("remote_address", "10.0.0.2")]]).overall_code == OK
    # the window is one second of the server's (test) clock
    s.clock_advance(1000)
    assert c.check("edge_proxy_per_ip", [[("remote_address", "10.0.0.1")]], hits=10).overall_code == OK
    c.close()


def test_example4_depth(make_server, pb):
    s, c = start(make_server, pb, "04-depth.yaml")
    two = [[("key", "value"), ("subkey", "subvalue")]]
    r = c.check("example4", two, hits=300)
    assert r.overall_code == OK and r.statuses[0].current_limit.requests_per_unit == 300
    assert c.check("example4", two).overall_code == OVER
    # a one-entry descriptor does not reach the rule two levels down
    assert not c.check("example4", [[("key", "value")]]).statuses[0].HasField("current_limit")
    c.close()
    s, c = start(make_server, pb, "04-depth-shallow.yaml")
    r = c.check("example4", two, hits=1000)
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    assert c.check("example4", [[("key", "value")]], hits=301).overall_code == OVER
    c.close()


def test_example5_unlimited(make_server, pb):
    s, c = start(make_server, pb, "05-unlimited.yaml")
    r = c.check("internal", [[("ldap", "x")]], hits=1000000)
    assert r.overall_code == OK and codes(r) == [OK]
    assert r.statuses[0].limit_remaining == UINT32_MAX
    assert not r.statuses[0].HasField("current_limit")
    assert c.check("internal", [[("azure", "y")]], hits=100).overall_code == OK
    assert c.check("internal", [[("azure", "y")]]).overall_code == OVER
    c.close()


def test_example6_shadow_mode(make_server, pb):
    s, c = start(make_server, pb, "06-shadow.yaml")
    a = [[("service", "auth-service"), ("user", "user-a")]]
    for _ in range(12):
        r = c.check("example6", a)
        assert r.overall_code == OK and codes(r) == [OK]
    assert c.check("example6", [[("service", "auth-service"), ("user", "user-b")]], hits=21).overall_code == OVER
    c.close()


def test_example7_replaces(make_server, pb):
    s, c = start(make_server, pb, "07-replaces.yaml")
    both = [[("key_1", "value_1"), ("user", "bkthomps")], [("key_2", "value_2"), ("user", "bkthomps")]]
    assert c.check("example7", both, hits=10).overall_code == OK
    assert c.check("example7", both).overall_code == OVER
    # the replaced 5/s rule was left alone
    assert c.check("example7", [[("key_1", "value_1"), ("user", "bkthomps")]], hits=5).overall_code == OK
    c.close()


def test_example8_and_9_values_and_wildcards(make_server, pb):
    s, c = start(make_server, pb, "08-detailed-metric.yaml")
    assert c.check("example8", [[("key1", "value1")]]).statuses[0].current_limit.requests_per_unit == 20
    assert c.check("example8", [[("key1", "other")]]).statuses[0].current_limit.requests_per_unit == 10
    c.close()
    s, c = start(make_server, pb, "09-wildcard.yaml")
    assert c.check("example9", [[("key1", "value_1")]], hits=20).overall_code == OK
    assert c.check("example9", [[("key1", "value_1")]]).overall_code == OVER
    assert c.check("example9", [[("key1", "value_2")]]).overall_code == OK  # its own counter
    assert not c.check("example9", [[("key1", "other")]]).statuses[0].HasField("current_limit")
    c.close()


def test_sluice_extensions_token_bucket_burst(make_server, pb):
    s, c = start(make_server, pb, "10-sluice-extensions.yaml")
    ok = [c.check("edge", [[("remote_address", "1.2.3.4")]]).overall_code for _ in range(22)]
    assert ok == [OK] * 20 + [OVER] * 2
    c.close()


# ---- response shape ---------------------------------------------------------------------

def test_statuses_headers_body_overrides_and_hits(make_server, pb):
    s, c = start(make_server, pb, "05-unlimited.yaml")
    r = c.check("internal", [[("nomatch", "1")], [("ldap", "x")], [("azure", "y")]], hits=40)
    assert codes(r) == [OK, OK, OK] and r.overall_code == OK
    assert [x.limit_remaining for x in r.statuses] == [0, UINT32_MAX, 60]
    hdr = {h.key: h.value for h in r.response_headers_to_add}
    assert "RateLimit" in hdr and "RateLimit-Policy" in hdr and "Retry-After" not in hdr
    assert r.raw_body == b""
    # per-descriptor hits_addend overrides the request's; explicit 0 only reads
    r = c.check("internal", [{"entries": [("azure", "y")], "hits": 0}], hits=50)
    assert r.statuses[0].limit_remaining == 60
    r = c.check("internal", [{"entries": [("azure", "y")], "hits": 61}])
    assert r.overall_code == OVER
    hdr = {h.key: h.value for h in r.response_headers_to_add}
    assert int(hdr["Retry-After"]) >= 1
    body = json.loads(r.raw_body)
    assert body["status"] == 429 and "quota-exceeded" in body["type"]
    # a limit override bypasses the config: 2 per HOUR of its own
    ov = {"entries": [("azure", "y")], "limit": (2, 3)}
    got = [c.check("internal", [ov]) for _ in range(3)]
    assert [g.overall_code for g in got] == [OK, OK, OVER]
    assert got[0].statuses[0].current_limit.requests_per_unit == 2
    assert got[0].statuses[0].current_limit.unit == 3
    # every unit of rls.proto, WEEK (7) included, as the config's `unit: week` is
    ov = {"entries": [("azure", "w")], "limit": (1, 7)}
    got = [c.check("internal", [ov]) for _ in range(2)]
    assert [g.overall_code for g in got] == [OK, OVER]
    assert got[0].statuses[0].current_limit.unit == 7
    assert got[1].statuses[0].duration_until_reset.seconds <= 7 * 86400
    # an unknown unit is the caller's error, not a limit
    with pytest.raises(grpc.RpcError) as e:
        c.check("internal", [{"entries": [("azure", "v")], "limit": (1, 9)}])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    c.close()


def test_many_concurrent_calls_on_one_connection(make_server, pb):
    s, c = start(make_server, pb, "05-unlimited.yaml")  # azure: 100/minute
    req = c.request("internal", [[("azure", "z")]])
    fs = [c.rls.ShouldRateLimit.future(req, timeout=10) for _ in range(150)]
    got = [f.result().overall_code for f in fs]
    assert got.count(OK) == 100 and got.count(OVER) == 50
    c.close()


# ---- health ---------------------------------------------------------------------------

def test_health_check(make_server, pb):
    s, c = start(make_server, pb, "01-mongo-cps.yaml")
    assert c.serving("") and c.serving("ratelimit")
    with pytest.raises(grpc.RpcError) as e:
        c.serving("nosuch")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        c.raw("/grpc.health.v1.Health/Watch", b"")
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    c.close()


# ---- errors: the right status, the server stays up ------------------------------------------

def test_malformed_calls_get_statuses_and_the_server_stays_up(make_server, pb):
    s, c = start(make_server, pb, "01-mongo-cps.yaml")
    cases = [
        (lambda: c.check("", [[("database", "users")]]), grpc.StatusCode.INVALID_ARGUMENT),
        (lambda: c.check("mongo_cps", []), grpc.StatusCode.INVALID_ARGUMENT),
        (lambda: c.raw(RLS_PATH, b"\x0a\x7f\x72"), grpc.StatusCode.INTERNAL),
        (lambda: c.raw(RLS_PATH, b"\x12\x00"), grpc.StatusCode.INVALID_ARGUMENT),  # entry-less descriptor
        (lambda: c.raw(RLS_PATH, b"\x0a" + b"\xff" * 3 + b"\x03" + b"x" * 70000), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (lambda: c.raw("/envoy.service.ratelimit.v3.RateLimitService/Other", b""), grpc.StatusCode.UNIMPLEMENTED),
        (lambda: c.raw("/nosuch.Service/Method", b""), grpc.StatusCode.UNIMPLEMENTED),
        (lambda: c.raw(RLS_PATH, b"\x0a\x02rl" * 50, compression=grpc.Compression.Gzip),
         grpc.StatusCode.UNIMPLEMENTED),
    ]
    for i, (call, want) in enumerate(cases):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == want, (i, e.value.code(), e.value.details())
        # the same connection still answers
        assert c.check("mongo_cps", [[("database", "users")]]).overall_code == OK, i
    # wrong content-type: HTTP 415 (curl speaks h2c with prior knowledge)
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge",
                          "-X", "POST", "-H", "content-type: text/plain",
                          "http://%s%s" % (s.grpc, RLS_PATH)], capture_output=True, text=True, timeout=10)
    assert out.stdout == "415", out
    # bytes that are not HTTP/2 at all: that connection is closed, nothing else is hurt
    with socket.create_connection(("127.0.0.1", s.grpc_port), timeout=5) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        raw.settimeout(5)
        data = b""
        while True:
            chunk = raw.recv(4096)
            if not chunk:
                break
            data += chunk
    assert c.serving("") and s.proc.poll() is None
    m = requests.get(s.admin + "/metrics", timeout=5).text
    assert 'sluice_grpc_calls_total{code="3"}' in m and 'sluice_grpc_calls_total{code="12"}' in m
    assert 'sluice_decisions_total{policy="mongo_cps/database=users",result="allowed",window=' in m
    c.close()


def test_deadline_is_honoured_and_a_timeout_header_is_accepted(make_server, pb):
    s, c = start(make_server, pb, "01-mongo-cps.yaml")
    assert c.check("mongo_cps", [[("database", "users")]], timeout=0.5).overall_code == OK
    c.close()


def test_http2_on_the_http_port_is_grpc_too(make_server, pb):
    s = make_server(config_path=os.path.join(EXAMPLES, "01-mongo-cps.yaml"))
    ch = grpc.insecure_channel("127.0.0.1:%d" % s.http_port)
    stub = pb.rls_pb2_grpc.RateLimitServiceStub(ch)
    D = pb.envoy_ratelimit_pb2.RateLimitDescriptor
    r = stub.ShouldRateLimit(pb.rls_pb2.RateLimitRequest(
        domain="mongo_cps", descriptors=[D(entries=[D.Entry(key="database", value="users")])]), timeout=5)
    assert r.overall_code == OK
    ch.close()
    assert requests.get(s.http + "/healthz", timeout=5).status_code == 200  # HTTP/1.1 still


# ---- /json ------------------------------------------------------------------------------

def test_json_endpoint(make_server):
    s = make_server(config_path=os.path.join(EXAMPLES, "03-edge-proxy-per-ip.yaml"))
    body = {"domain": "edge_proxy_per_ip",
            "descriptors": [{"entries": [{"key": "remote_address", "value": "10.1.1.1"}]}]}
    r = requests.post(s.http + "/json", json=body, timeout=5)
    assert r.status_code == 200
    j = r.json()
    assert j["overallCode"] == "OK"
    assert j["statuses"][0]["currentLimit"] == {"name": "edge_proxy_per_ip/remote_address",
                                                 "requestsPerUnit": 10, "unit": "SECOND"}
    assert j["statuses"][0]["limitRemaining"] == 9
    body["hitsAddend"] = 9
    assert requests.post(s.http + "/json", json=body, timeout=5).status_code == 200
    r = requests.post(s.http + "/json", json=body, timeout=5)
    assert r.status_code == 429 and r.json()["overallCode"] == "OVER_LIMIT"
    assert r.json()["statuses"][0]["code"] == "OVER_LIMIT"
    assert requests.post(s.http + "/json", data="{", timeout=5).status_code == 400
    assert requests.post(s.http + "/json", json={"domain": "x"}, timeout=5).status_code == 400
    h = requests.get(s.http + "/healthcheck", timeout=5)
    assert h.status_code == 200 and h.text == "OK"


# ---- drain ------------------------------------------------------------------------------

def test_sigterm_sends_goaway_and_exits_promptly(make_server, pb):
    s, c = start(make_server, pb, "01-mongo-cps.yaml")
    assert c.serving("")  # an open HTTP/2 connection, idle
    t0 = time.time()
    assert s.stop() == 0
    assert time.time() - t0 < 5, "an idle gRPC connection held the drain"
    c.close()


def test_drain_goaway_frames_to_a_client_that_never_closes(make_server):
    """A raw HTTP/2 client that neither sends nor closes: on SIGTERM it gets the shutdown
    notice (GOAWAY, last stream 2^31-1) then the final GOAWAY (last stream 0), both
    NO_ERROR, and the server closes the connection and exits 0 well before the drain
    timeout."""
    s = make_server(config_path=os.path.join(EXAMPLES, "01-mongo-cps.yaml"))
    raw = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=10)
    raw.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    time.sleep(0.2)
    t0 = time.time()
    s.signal(signal.SIGTERM)
    buf = b""
    while True:
        chunk = raw.recv(65536)
        if not chunk:
            break
        buf += chunk
    closed_after = time.time() - t0
    raw.close()
    goaways, i = [], 0
    while i + 9 <= len(buf):
        n = int.from_bytes(buf[i:i + 3], "big")
        if buf[i + 3] == 7:
            p = buf[i + 9:i + 9 + n]
            goaways.append((int.from_bytes(p[0:4], "big") & 0x7FFFFFFF, int.from_bytes(p[4:8], "big")))
        i += 9 + n
    assert goaways == [(0x7FFFFFFF, 0), (0, 0)], goaways
    assert closed_after < 3, closed_after
    assert s.stop() == 0


def test_connection_error_gets_goaway_protocol_error(make_server, pb):
    """A frame no HTTP/2 peer may send (DATA on stream 0) ends that connection with
    GOAWAY(PROTOCOL_ERROR), written before the close; other connections carry on."""
    s, c = start(make_server, pb, "01-mongo-cps.yaml")
    raw = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=10)
    raw.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                + b"\x00\x00\x02\x00\x00\x00\x00\x00\x00xx")
    buf = b""
    while True:
        chunk = raw.recv(65536)
        if not chunk:
            break
        buf += chunk
    raw.close()
    codes, i = [], 0
    while i + 9 <= len(buf):
        n = int.from_bytes(buf[i:i + 3], "big")
        if buf[i + 3] == 7:
            codes.append(int.from_bytes(buf[i + 13:i + 17], "big"))
        i += 9 + n
    assert codes == [1], (codes, buf)  # PROTOCOL_ERROR
    assert c.check("mongo_cps", [[("database", "users")]]).overall_code == OK
    c.close()


def test_an_envoy_file_listens_on_8081_by_default(tmp_path):
    """Loaded unchanged, an envoyproxy/ratelimit file (it has no listen section) gets
    envoyproxy/ratelimit's gRPC port. Checked without depending on the port being free:
    with 127.0.0.1:8081 held, startup fails naming that gRPC address."""
    from conftest import BIN, free_port
    busy = socket.socket()
    try:
        busy.bind(("127.0.0.1", 8081))
        busy.listen(1)
    except OSError:
        pass  # someone else holds it: the server must fail on it just the same
    try:
        r = subprocess.run([BIN, "serve", "-c", os.path.join(EXAMPLES, "01-mongo-cps.yaml"),
                            "--http", "127.0.0.1:%d" % free_port(), "--resp", "127.0.0.1:%d" % free_port(),
                            "--admin", "127.0.0.1:%d" % free_port()],
                           capture_output=True, text=True, timeout=10)
    finally:
        busy.close()
    assert r.returncode == 1, r.stderr
    assert "grpc address 127.0.0.1:8081" in r.stderr and "in use" in r.stderr, r.stderr
