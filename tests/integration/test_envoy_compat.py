# SPDX-License-Identifier: Apache-2.0
"""`sluice serve --compat envoy-ratelimit` as a drop-in for envoyproxy/ratelimit: the
behaviours its README and its own tests describe, re-expressed against a real sluice
started the way its container is (environment variables only, a runtime directory of
YAML files), driven by a real gRPC client and the HTTP /json endpoint:

- the config directory: several domains across files, a duplicate domain refused unless
  MERGE_DOMAIN_CONFIG, dotfiles skipped with RUNTIME_IGNOREDOTFILES, errors naming the file;
- answers: descriptor matching (exact value, wildcard, bare key, depth), hits_addend (a
  check-only 0 included, with duration_until_reset), shadow_mode and SHADOW_MODE,
  unlimited, replaces, share_threshold, quota_mode, a limit override in an unknown domain
  ignored, rejected hits counted (and STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), headers
  only with LIMIT_RESPONSE_HEADERS_ENABLED, no body, unnamed limits with an empty name,
  dynamic metadata with RESPONSE_DYNAMIC_METADATA;
- statistics: upstream's Prometheus families and labels (detailed_metric per value), and
  statsd lines over UDP (gostats tags and DogStatsD tags);
- the environment: one warning naming what is not acted on, bad values refused.
Redis, watching, TLS and unix sockets: test_envoy_compat_store.py.
"""
import json
import os
import re
import socket
import subprocess
import tempfile
import time

import pytest
import requests

from conftest import BIN, Client, ServerProcess, await_ports, free_port

OK, OVER = 1, 2
SECOND, MINUTE, HOUR = 1, 2, 3
UINT32_MAX = 4294967295

# the environment a test server gets: these from ours, the rest from the test
KEEP_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZDIR", "TMPDIR", "ASAN_OPTIONS", "UBSAN_OPTIONS",
            "LSAN_OPTIONS", "LD_LIBRARY_PATH")


class Compat(ServerProcess):
    """A `sluice serve --compat envoy-ratelimit` on free loopback ports, configured by
    environment variables only; its rules in RUNTIME_ROOT/config/*.yaml."""

    def __init__(self, files, env=None, workers=2, root=None, memory=True, wait=True, extra=()):
        self.dir = tempfile.mkdtemp(prefix="sluice-compat-")
        self.root = root or os.path.join(self.dir, "runtime")
        self.config = os.path.join(self.root, "config")
        os.makedirs(self.config, exist_ok=True)
        for name, text in (files or {}).items():
            with open(os.path.join(self.config, name), "w") as f:
                f.write(text)
        self.log_path = os.path.join(self.dir, "server.log")
        for attempt in range(5):
            self.http_port, self.grpc_port, self.debug_port = free_port(), free_port(), free_port()
            e = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
            e.update({"RUNTIME_ROOT": self.root, "HOST": "127.0.0.1", "PORT": str(self.http_port),
                      "GRPC_HOST": "127.0.0.1", "GRPC_PORT": str(self.grpc_port),
                      "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": str(self.debug_port),
                      "USE_STATSD": "false"})
            if memory:
                e["BACKEND_TYPE"] = "memory"
            e.update(env or {})
            self.env = e
            self.log = open(self.log_path, "w")
            self.proc = subprocess.Popen([BIN, "serve", "--compat", "envoy-ratelimit", "--workers",
                                          str(workers)] + list(extra), cwd=self.dir, env=e,
                                         stdout=self.log, stderr=subprocess.STDOUT)
            if not wait or self._await():
                break
            out = self.output()
            self.stop()
            if "address already in use" in out and attempt < 4:
                continue
            raise AssertionError("server did not start: " + out)
        self.http = "http://127.0.0.1:%d" % self.http_port
        self.debug = "http://127.0.0.1:%d" % self.debug_port
        self.grpc = "127.0.0.1:%d" % self.grpc_port

    def _await(self, timeout=10.0):
        ports = [self.http_port, self.debug_port]
        if not self.env.get("GRPC_UDS"):
            ports.append(self.grpc_port)
        return await_ports(self.proc, ports, timeout)

    def metrics(self, path="/metrics", base=None):
        return requests.get((base or self.debug) + path, timeout=5).text

    def json(self, body):
        r = requests.post(self.http + "/json", data=json.dumps(body), timeout=5)
        return r.status_code, r.json()


@pytest.fixture
def compat():
    started = []

    def make(files, **kw):
        s = Compat(files, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
    for s in started:
        s.assert_clean()


def run_once(files, env=None, timeout=10):
    """Starts a compat server expecting it to refuse: (exit status, output)."""
    d = tempfile.mkdtemp(prefix="sluice-compat-")
    cfg = os.path.join(d, "runtime", "config")
    os.makedirs(cfg)
    for name, text in files.items():
        with open(os.path.join(cfg, name), "w") as f:
            f.write(text)
    e = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    e.update({"RUNTIME_ROOT": os.path.join(d, "runtime"), "HOST": "127.0.0.1", "PORT": str(free_port()),
              "GRPC_HOST": "127.0.0.1", "GRPC_PORT": str(free_port()), "DEBUG_HOST": "127.0.0.1",
              "DEBUG_PORT": str(free_port()), "USE_STATSD": "false", "BACKEND_TYPE": "memory"})
    e.update(env or {})
    p = subprocess.run([BIN, "serve", "--compat", "envoy-ratelimit", "--workers", "1"], env=e,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def codes(resp):
    return [s.code for s in resp.statuses]


BASIC = """
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 5, name: vip}
  - key: path
    value: "/api/*"
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1000}
"""


# ---- the config directory --------------------------------------------------------------

def test_domains_across_files_and_their_errors(compat, pb):
    s = compat({"a.yaml": BASIC, "b.yml": "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                "c.yaml": "domain: empty\ndescriptors:\n", "notes.txt": "not a rule file"})
    c = Client(pb, s)
    assert c.check("rl", [[("user", "a")]]).statuses[0].current_limit.requests_per_unit == 3
    assert c.check("other", [[("k", "x")]]).statuses[0].current_limit.requests_per_unit == 1
    r = c.check("empty", [[("k", "x")]])  # `descriptors:` left empty: a domain without rules
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    c.close()
    # the same domain in two files: refused, naming the second file, line and column
    rc, out = run_once({"a.yaml": BASIC, "b.yaml": "domain: rl\ndescriptors:\n  - key: x\n"})
    assert rc == 1 and re.search(r"/b\.yaml:1:9: duplicate domain 'rl'", out), out
    # a broken file: its own name, line and column
    rc, out = run_once({"a.yaml": BASIC, "z.yaml": "domain: z\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"})
    assert rc == 1 and re.search(r"/z\.yaml:4:\d+: invalid rate limit unit 'fortnight'", out), out
    rc, out = run_once({"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    bogus: 1\n"})
    assert rc == 1 and "unknown field 'bogus'" in out, out


def test_merge_domain_config_and_dotfiles(compat, pb):
    part1 = "domain: shop\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
    part2 = "domain: shop\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
    s = compat({"1.yaml": part1, "2.yaml": part2}, env={"MERGE_DOMAIN_CONFIG": "true"})
    c = Client(pb, s)
    r = c.check("shop", [[("a", "x")], [("b", "x")]])
    assert [st.current_limit.requests_per_unit for st in r.statuses] == [1, 2]
    c.close()
    # merging joins files of a domain; a rule in both is still a duplicate
    rc, out = run_once({"1.yaml": part1, "2.yaml": part1}, env={"MERGE_DOMAIN_CONFIG": "true"})
    assert rc == 1 and "duplicate descriptor 'a'" in out and "/2.yaml:" in out, out
    # a dotfile is a config file unless RUNTIME_IGNOREDOTFILES (as upstream)
    broken = {"a.yaml": part1, ".hidden.yaml": "nonsense: ["}
    rc, out = run_once(broken)
    assert rc == 1 and ".hidden.yaml" in out, out
    s2 = compat(broken, env={"RUNTIME_IGNOREDOTFILES": "true"})
    c = Client(pb, s2)
    assert c.check("shop", [[("a", "x")]]).statuses[0].current_limit.requests_per_unit == 1
    c.close()


# ---- answers ---------------------------------------------------------------------------

def test_descriptor_matching_and_counting(compat, pb):
    s = compat({"a.yaml": BASIC})
    c = Client(pb, s)
    # exact value beats the bare key; each value has its own counter
    r = c.check("rl", [[("user", "vip")]])
    assert (r.statuses[0].current_limit.requests_per_unit, r.statuses[0].current_limit.name) == (5, "vip")
    # an unnamed limit has an empty name, as upstream
    r = c.check("rl", [[("user", "bob")]])
    assert r.statuses[0].current_limit.name == "" and r.statuses[0].limit_remaining == 2
    # wildcard before the bare key; values matching the wildcard each count alone
    assert c.check("rl", [[("path", "/api/x")]]).statuses[0].current_limit.requests_per_unit == 2
    assert c.check("rl", [[("path", "/web")]]).statuses[0].current_limit.requests_per_unit == 10
    # depth: a two-entry descriptor reaches only the nested rule; one entry reaches nothing
    r = c.check("rl", [[("tenant", "t"), ("user", "u")]])
    assert r.statuses[0].current_limit.unit == SECOND
    r = c.check("rl", [[("tenant", "t")]])
    assert not r.statuses[0].HasField("current_limit") and r.overall_code == OK
    # every status carries duration_until_reset within its unit
    r = c.check("rl", [[("user", "carol")]])
    assert 0 < r.statuses[0].duration_until_reset.seconds <= 60
    # OVER_LIMIT: remaining 0, the overall code too, and no body (upstream sends none)
    for _ in range(2):
        c.check("rl", [[("user", "dave")]])
    r = c.check("rl", [[("user", "dave")], [("user", "erin")]])
    assert r.overall_code == OK and codes(r) == [OK, OK] and r.statuses[0].limit_remaining == 0
    r = c.check("rl", [[("user", "dave")], [("user", "erin")]])
    assert r.overall_code == OVER and codes(r) == [OVER, OK]
    assert r.statuses[0].limit_remaining == 0 and 0 < r.statuses[0].duration_until_reset.seconds <= 60
    assert r.raw_body == b"" and len(r.response_headers_to_add) == 0
    # the rejected hit was counted for both descriptors (upstream increments every one)
    r = c.check("rl", [{"entries": [("user", "erin")], "hits": 0}])
    assert r.statuses[0].limit_remaining == 1, r
    c.close()


def test_hits_addend(compat, pb):
    s = compat({"a.yaml": BASIC})
    c = Client(pb, s)
    r = c.check("rl", [[("user", "h")]], hits=2)
    assert r.statuses[0].limit_remaining == 1
    # a per-descriptor hits_addend wins over the request's; 0 only looks
    r = c.check("rl", [{"entries": [("user", "h")], "hits": 0}], hits=5)
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 1
    assert 0 < r.statuses[0].duration_until_reset.seconds <= 60
    r = c.check("rl", [{"entries": [("user", "h")], "hits": 2}])
    assert r.overall_code == OVER and r.statuses[0].limit_remaining == 0
    # a check-only look at a counter over its limit: OVER_LIMIT, nothing added
    r = c.check("rl", [{"entries": [("user", "h")], "hits": 0}])
    assert r.overall_code == OVER
    c.close()


SHADOW = """
domain: sh
descriptors:
  - key: k
    value: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    value: real
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: free_named
    rate_limit: {unlimited: true, name: free_named}
  - key: base
    rate_limit: {unit: minute, requests_per_unit: 1, name: base}
  - key: better
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: base}]}
"""


def test_shadow_unlimited_replaces(compat, pb):
    s = compat({"a.yaml": SHADOW})
    c = Client(pb, s)
    for _ in range(3):
        r = c.check("sh", [[("k", "shadow")]])
        assert r.overall_code == OK and codes(r) == [OK]
    r = c.check("sh", [[("free", "x")]], hits=1000000)
    st = r.statuses[0]
    assert r.overall_code == OK and st.limit_remaining == UINT32_MAX and not st.HasField("current_limit")
    # replaces: with both matched, the replaced rule is not evaluated nor counted
    for _ in range(3):
        r = c.check("sh", [[("base", "x")], [("better", "y")]])
        assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    assert c.check("sh", [[("base", "x")]]).statuses[0].limit_remaining == 0
    text = s.metrics()
    assert 'ratelimit_service_rate_limit_shadow_mode{domain="sh",key1="k_shadow"} 2' in text, text
    assert 'ratelimit_service_rate_limit_over_limit{domain="sh",key1="k_shadow"} 2' in text, text
    c.close()
    # SHADOW_MODE: every answer OK, counted as global_shadow_mode
    g = compat({"a.yaml": SHADOW}, env={"SHADOW_MODE": "true"})
    c = Client(pb, g)
    for _ in range(3):
        r = c.check("sh", [[("k", "real")]])
    assert r.overall_code == OK and codes(r) == [OVER]
    assert "ratelimit_service_global_shadow_mode 2" in g.metrics()
    c.close()


def test_share_threshold_and_quota_mode(compat, pb):
    cfg = """
domain: files
descriptors:
  - key: path
    value: "files/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: quota
    value: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    value: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
"""
    s = compat({"a.yaml": cfg})
    c = Client(pb, s)
    assert c.check("files", [[("path", "files/a.pdf")]]).overall_code == OK
    assert c.check("files", [[("path", "files/b.csv")]]).overall_code == OK
    r = c.check("files", [[("path", "files/c.txt")]])  # the third value, one shared counter
    assert r.overall_code == OVER
    # quota_mode: over limit only when every quota descriptor is
    c.check("files", [[("quota", "a")]])
    r = c.check("files", [[("quota", "a")], [("quota", "b")]])
    assert codes(r) == [OVER, OK] and r.overall_code == OK
    r = c.check("files", [[("quota", "a")], [("quota", "b")]])
    assert codes(r) == [OVER, OVER] and r.overall_code == OVER
    text = s.metrics()
    assert 'ratelimit_service_rate_limit_total_hits{domain="files",key1="path_files/*"} 3' in text, text
    c.close()
    rc, out = run_once({"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: plain\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"})
    assert rc == 1 and "share_threshold needs a wildcard" in out


def test_overrides_stop_increment_and_unknown_domain(compat, pb):
    s = compat({"a.yaml": BASIC})
    c = Client(pb, s)
    # a limit override: its own limit, counted under the descriptor
    d = {"entries": [("user", "o")], "limit": (2, MINUTE)}
    assert c.check("rl", [d]).statuses[0].limit_remaining == 1
    assert c.check("rl", [d]).statuses[0].limit_remaining == 0
    assert c.check("rl", [d]).overall_code == OVER
    # in a domain no file configures, an override limits nothing (upstream looks the domain up first)
    d2 = {"entries": [("user", "o")], "limit": (1, MINUTE)}
    for _ in range(3):
        r = c.check("nosuch", [d2])
        assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    assert 'ratelimit_service_rate_limit_nosuch_domain_not_found' in s.metrics()
    c.close()
    # STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a rejected request leaves the others alone
    t = compat({"a.yaml": BASIC}, env={"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"})
    c = Client(pb, t)
    for _ in range(3):
        c.check("rl", [[("user", "full")]])
    for _ in range(3):
        r = c.check("rl", [[("user", "full")], [("user", "spare")]])
        assert r.overall_code == OVER and codes(r) == [OVER, OK]
    assert c.check("rl", [{"entries": [("user", "spare")], "hits": 0}]).statuses[0].limit_remaining == 3
    c.close()


def test_headers_only_when_enabled(compat, pb):
    on = compat({"a.yaml": BASIC}, env={"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
                                         "LIMIT_REMAINING_HEADER": "X-Left"})
    c = Client(pb, on)
    r = c.check("rl", [[("user", "a")], [("path", "/api/1")]])
    h = {x.key: x.value for x in r.response_headers_to_add}
    # the descriptor closest to its limit speaks: path (2/hour, 1 left)
    assert h["RateLimit-Limit"] == "2" and h["X-Left"] == "1", h
    assert 0 < int(h["RateLimit-Reset"]) <= 3600
    c.check("rl", [[("path", "/api/1")]])
    r = c.check("rl", [[("path", "/api/1")], [("user", "a")]])
    h = {x.key: x.value for x in r.response_headers_to_add}
    assert r.overall_code == OVER and h["X-Left"] == "0" and h["RateLimit-Limit"] == "2"
    assert r.raw_body == b""
    code, body = on.json({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "j"}]}]})
    assert code == 200 and body["responseHeadersToAdd"][0]["key"] == "RateLimit-Limit"
    c.close()
    off = compat({"a.yaml": BASIC})
    c = Client(pb, off)
    for _ in range(4):
        r = c.check("rl", [[("user", "a")]])
    assert r.overall_code == OVER and len(r.response_headers_to_add) == 0 and r.raw_body == b""
    c.close()


def test_dynamic_metadata(compat, pb):
    cfg = """
domain: md
descriptors:
  - key: k
    value: a
    metadata: {team: payments, tier: 3, nested: {x: 1}}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: k
    value: b
    metadata: {team: search, nested: {y: true}}
    rate_limit: {unit: minute, requests_per_unit: 10}
"""
    s = compat({"a.yaml": cfg}, env={"RESPONSE_DYNAMIC_METADATA": "true"})
    c = Client(pb, s)
    from google.protobuf import json_format
    r = c.check("md", [[("k", "a")], {"entries": [("k", "b")], "hits": 2}], hits=3)
    md = json_format.MessageToDict(r.dynamic_metadata)
    assert md["domain"] == "md" and md["hitsAddend"] == 3
    assert md["descriptors"][0] == {"entries": ["k=a"]}
    assert md["descriptors"][1] == {"entries": ["k=b"], "hitsAddend": 2}
    # the passed descriptors' metadata merged: the first value of a key wins, maps merge
    assert md["metadata"] == {"team": "payments", "tier": 3, "nested": {"x": 1, "y": True}}, md
    c.close()


# ---- statistics ------------------------------------------------------------------------

def test_prometheus_names_as_upstream(compat, pb):
    cfg = """
domain: stats
descriptors:
  - key: ip
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    value: a
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
"""
    s = compat({"a.yaml": cfg}, env={"USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "/prom",
                                      "PROMETHEUS_ADDR": "127.0.0.1:%d" % free_port(),
                                      "EXTRA_TAGS": "cluster:c1", "NEAR_LIMIT_RATIO": "0.5"})
    c = Client(pb, s)
    for ip in ("10.0.0.1", "10.0.0.1", "10.0.0.2"):
        c.check("stats", [[("ip", ip)]])
    for _ in range(3):
        c.check("stats", [[("route", "a"), ("user", "u1")]])
    prom = "http://%s" % s.env["PROMETHEUS_ADDR"]
    text = s.metrics("/prom", base=prom)
    # the families upstream's statsd_exporter mapping defines (src/stats/prom/default_mapper.yaml)
    for fam in ("total_hits", "over_limit", "near_limit", "within_limit"):
        assert "# TYPE ratelimit_service_rate_limit_%s counter" % fam in text, fam
    # detailed_metric: one series per value (an IPv4 address's dots become '_', as upstream)
    assert 'ratelimit_service_rate_limit_total_hits{domain="stats",key1="ip_10_0_0_1",cluster="c1"} 2' in text, text
    assert 'ratelimit_service_rate_limit_total_hits{domain="stats",key1="ip_10_0_0_2",cluster="c1"} 1' in text
    # two levels: key1 and key2; NEAR_LIMIT_RATIO 0.5 of 1 is 0: the first hit is near
    assert 'ratelimit_service_rate_limit_within_limit{domain="stats",key1="route_a",key2="user",cluster="c1"} 1' in text
    assert 'ratelimit_service_rate_limit_over_limit{domain="stats",key1="route_a",key2="user",cluster="c1"} 2' in text
    assert 'ratelimit_service_rate_limit_near_limit{domain="stats",key1="route_a",key2="user",cluster="c1"} 1' in text
    assert 'ratelimit_service_total_requests{grpc_method="ShouldRateLimit",cluster="c1"} 6' in text
    assert "ratelimit_service_config_load_success{cluster=\"c1\"} 1" in text
    assert "sluice_config_load_success_total 1" in text
    # the debug port serves the same families
    assert "ratelimit_service_rate_limit_total_hits" in s.metrics()
    c.close()


def recv_lines(sock, want, timeout=5.0):
    """statsd datagrams until every wanted prefix appeared (bounded in time)."""
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline and not all(any(l.startswith(w) for l in got) for w in want):
        sock.settimeout(max(0.05, deadline - time.time()))
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        got += data.decode().split("\n")
    return got


@pytest.mark.parametrize("dog", [False, True])
def test_statsd_lines_over_udp(compat, pb, dog):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    env = {"USE_STATSD": "false" if dog else "true", "USE_DOG_STATSD": "true" if dog else "false",
           "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(u.getsockname()[1]),
           "STATS_FLUSH_INTERVAL": "200ms", "EXTRA_TAGS": "env:test,app:rl"}
    s = compat({"a.yaml": BASIC}, env=env)
    c = Client(pb, s)
    for _ in range(4):
        c.check("rl", [[("user", "s")]])
    want = ["ratelimit.service.rate_limit.rl.user.total_hits", "ratelimit.service.rate_limit.rl.user.over_limit",
            "ratelimit.service.rate_limit.rl.user.within_limit", "ratelimit.service.config_load_success"]
    lines = recv_lines(u, want)
    c.close()
    u.close()
    hits = [l for l in lines if l.startswith("ratelimit.service.rate_limit.rl.user.total_hits")]
    assert hits, lines
    if dog:
        # DogStatsD: name:delta|c|#tags
        assert re.fullmatch(r"ratelimit\.service\.rate_limit\.rl\.user\.total_hits:\d+\|c\|#app:rl,env:test", hits[0]), hits
    else:
        # gostats: the tags serialised into the name, keys in order
        assert re.fullmatch(r"ratelimit\.service\.rate_limit\.rl\.user\.total_hits\.__app=rl\.__env=test:\d+\|c", hits[0]), hits
    total = sum(int(re.search(r":(\d+)\|c", l).group(1)) for l in hits)
    assert total == 4, lines
    over = [l for l in lines if l.startswith("ratelimit.service.rate_limit.rl.user.over_limit")]
    assert sum(int(re.search(r":(\d+)\|c", l).group(1)) for l in over) == 1


# ---- the environment ---------------------------------------------------------------------

def test_environment_warnings_and_errors(compat):
    s = compat({"a.yaml": BASIC}, env={"REDIS_POOL_SIZE": "20", "TRACING_ENABLED": "true",
                                        "GRPC_MAX_CONNECTION_AGE": "1h", "LOG_LEVEL": "info"})
    time.sleep(0.2)
    warn = [l for l in s.output().splitlines() if "not acted on" in l]
    assert len(warn) == 1, s.output()
    for name in ("REDIS_POOL_SIZE", "TRACING_ENABLED", "GRPC_MAX_CONNECTION_AGE"):
        assert name in warn[0]
    assert "LOG_LEVEL" not in warn[0]  # honoured (test_log_level_and_format)
    quiet = compat({"a.yaml": BASIC})
    time.sleep(0.2)
    assert "not acted on" not in quiet.output()
    # malformed values stop the start, as upstream's envconfig panics
    rc, out = run_once({"a.yaml": BASIC}, env={"SHADOW_MODE": "maybe"})
    assert rc == 1 and "SHADOW_MODE=maybe" in out
    rc, out = run_once({"a.yaml": BASIC}, env={"USE_PROMETHEUS": "true", "USE_STATSD": "true"})
    assert rc == 1 and "more than one stats sink" in out
    # a store sluice cannot reach as configured is an error, never a silent fallback
    rc, out = run_once({"a.yaml": BASIC}, env={"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "unix",
                                               "REDIS_URL": "relative.sock"})
    assert rc == 1 and "REDIS_URL" in out and "absolute socket path" in out
    rc, out = run_once({"a.yaml": BASIC}, env={"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp",
                                               "REDIS_TYPE": "sentinel", "REDIS_URL": "127.0.0.1:26379"})
    assert rc == 1 and "REDIS_URL" in out and "master name" in out
    # a malformed credential is named, never shown
    rc, out = run_once({"a.yaml": BASIC}, env={"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp",
                                               "REDIS_URL": "127.0.0.1:1", "REDIS_AUTH": "s3cr3t-user:"})
    assert rc == 1 and "REDIS_AUTH" in out and "s3cr3t" not in out
    rc, out = run_once({"a.yaml": BASIC}, env={"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp",
                                               "REDIS_URL": "127.0.0.1:1", "REDIS_TLS_CACERT": "/x.pem"})
    assert rc == 1 and "REDIS_TLS is not true" in out


# ---- LOG_LEVEL, LOG_FORMAT, /rlconfig, YAML anchors -------------------------------------

ANCHORS = """
domain: anch
descriptors:
  - key: a
    rate_limit: &rl
      unit: minute
      requests_per_unit: 2
  - key: b
    rate_limit: *rl
  - key: c
    shadow_mode: true
    rate_limit:
      <<: *rl
      requests_per_unit: 5
  - key: d
    rate_limit: {unlimited: true}
"""


def test_log_level_and_format(compat):
    # upstream's default level is WARN: the info lines (start, config) are not written
    quiet = compat({"a.yaml": BASIC})
    time.sleep(0.2)
    quiet.stop()
    assert "sluice serve started" not in quiet.output() and "config loaded" not in quiet.output()
    # LOG_LEVEL=info (any case) and LOG_FORMAT=json: the info lines, every one JSON
    s = compat({"a.yaml": BASIC}, env={"LOG_LEVEL": "Info", "LOG_FORMAT": "JSON",
                                        "REDIS_POOL_SIZE": "1"})
    time.sleep(0.2)
    s.stop()
    lines = [json.loads(l) for l in s.output().splitlines() if l.strip()]
    events = {x["event"] for x in lines}
    assert {"start", "config", "compat_env"} <= events, lines
    assert [x for x in lines if x["event"] == "compat_env"][0]["level"] == "warn"
    # LOG_LEVEL=error: not even the warning about what is not acted on
    e = compat({"a.yaml": BASIC}, env={"LOG_LEVEL": "error", "REDIS_POOL_SIZE": "1"})
    time.sleep(0.2)
    e.stop()
    assert "not acted on" not in e.output()
    # a level logrus would not parse stops the start (upstream: "Could not parse log level")
    rc, out = run_once({"a.yaml": BASIC}, env={"LOG_LEVEL": "loud", "LOG_FORMAT": "json"})
    assert rc == 1 and "LOG_LEVEL=loud" in out
    assert json.loads(out.strip().splitlines()[-1])["level"] == "error"


def test_rlconfig_and_yaml_anchors(compat, pb):
    s = compat({"a.yaml": ANCHORS})
    c = Client(pb, s)
    assert [codes(c.check("anch", [[("b", "x")]]))[0] for _ in range(3)] == [OK, OK, OVER]
    assert [codes(c.check("anch", [[("a", "x")]]))[0] for _ in range(3)] == [OK, OK, OVER]
    r = requests.get(s.debug + "/rlconfig", timeout=5)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    assert sorted(r.text.splitlines()) == [
        "anch.a: unit=MINUTE requests_per_unit=2, shadow_mode: false",
        "anch.b: unit=MINUTE requests_per_unit=2, shadow_mode: false",
        "anch.c: unit=MINUTE requests_per_unit=5, shadow_mode: true",
        "anch.d: unit=UNKNOWN requests_per_unit=0, shadow_mode: false",
    ], r.text
    # an alias bomb is refused with the file named, not expanded
    bomb = "domain: boom\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        "l%d: &l%d [%s]\n" % (i, i, ", ".join(["*l%d" % (i - 1)] * 10)) for i in range(1, 10))
    rc, out = run_once({"a.yaml": bomb})
    assert rc == 1 and "a.yaml" in out and "aliases expand to more than" in out, out
