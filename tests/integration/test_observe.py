# SPDX-License-Identifier: Apache-2.0
"""Seeing and explaining every decision, end to end (issue 13): `sluice serve` on free
loopback ports, driven over HTTP and RESP (and redis-benchmark for load), watched through
/metrics, the logs, /v1/top, /v1/explain and SL.EXPLAIN, /v1/policies and /v1/audit.

- every policy's result is counted under its own series: enforced, shadow, rollout and,
  with Redis stopped, fail-open and fail-closed; the exposition passes promtool and
  prometheus_client's parser;
- a hot key among 100 000 others comes first in /v1/top with its share within 5 %;
- explanations for matched, unmatched, missing-key, fallback, plan and shadow requests,
  and explaining changes no counter and no state;
- the decision log under a flood of rejections stays within its rate, and every decision
  it did not write is counted;
- reloads are audited (source, caller by token name, checksum, what changed, outcome);
- no raw key in any log (conftest checks every server log of the session).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import BIN, Redis, Server, as_dict, note_raw_key

TOKEN = "s3cret-deploy-token"
AUTH = {"Authorization": "Bearer " + TOKEN}

CONFIG = """
workers: 2
admin:
  tokens:
    - { name: deploy-bot, token: %(token)s }
log:
  format: json
  file: sluice.log
observe:
  near_limit: 0.5
  hot_keys: { counters: 256, interval: 60s, top: 3 }
audit:
  file: audit.jsonl
policies:
  - name: enforced
    objective: fairness
    match: { path_prefix: /e/ }
    key: [header.x-key]
    algorithm: fixed_window
    limits: [ { rate: 3/min } ]
  - name: shadowed
    objective: protection
    match: { path_prefix: /e/ }
    key: [header.x-key]
    algorithm: fixed_window
    limits: [ { rate: 1/min } ]
    mode: shadow
  - name: rolled
    objective: protection
    match: { path_prefix: /r/ }
    key: [header.x-key]
    algorithm: fixed_window
    limits: [ { rate: 1/min } ]
    mode: { rollout: 50%% }
  - name: hot
    objective: fairness
    key: [header.x-hot]
    on_missing_key: skip
    algorithm: token_bucket
    limits: [ { rate: 1000000/s, burst: 10000000 } ]
  - name: api
    objective: fairness
    match: { path_prefix: /a/ }
    key: [header.x-api-key]
    on_missing_key: { use: [client_ip] }
    cost: { default: 1, "POST /a/export": 5 }
    algorithm: token_bucket
    limits:
      - { rate: 10/s, burst: 20 }
      - { rate: 1000/min }
  - name: strict
    objective: security
    match: { path_prefix: /s/ }
    key: [header.x-user]
    algorithm: gcra
    limits: [ { rate: 5/min, burst: 5 } ]
  - name: tenant
    objective: plan
    match: { path_prefix: /t/ }
    key: [header.x-tenant]
    plan_from: header.x-plan
    algorithm: fixed_window
    limits: [ { rate: 5/min } ]
    plans:
      pro: { limits: [ { rate: 50/min } ] }
"""


def config(**kw):
    d = {"token": TOKEN}
    d.update(kw)
    return CONFIG % d


def metrics(srv):
    r = requests.get(srv.admin + "/metrics", headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    return r.text


def samples(text):
    """{(name, ((label, value), ...)): value} through prometheus_client's parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text, name, **labels):
    return samples(text).get((name, tuple(sorted(labels.items()))), 0)


def auth(srv, path, **headers):
    h = {"X-Original-URI": path}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    return requests.get(srv.http + "/v1/auth", headers=h, timeout=5)


def log_lines(srv, event=None):
    path = os.path.join(srv.dir, "sluice.log")
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            d = json.loads(line)  # every line is one JSON object
            if event is None or d["event"] == event:
                out.append(d)
    return out


def wait_for(pred, timeout=10.0, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


@pytest.fixture
def srv():
    s = Server(config_text=config(), workers=2)
    yield s
    s.stop()
    s.assert_clean()


# ---- every policy under its own series ------------------------------------------------------


def test_enforced_shadow_and_rollout_each_counted_under_their_own_series(srv):
    note_raw_key("obs-user-1")
    codes = [auth(srv, "/e/x", x_key="obs-user-1").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    m = metrics(srv)
    # the enforced policy decided: 3 admitted, 2 limited, by its 3/min window
    assert value(m, "sluice_decisions_total", policy="enforced", result="allowed", window="enforced") == 3
    assert value(m, "sluice_decisions_total", policy="enforced", result="limited", window="enforced") == 2
    # the shadow policy beside it has its own series: its first request fitted, every
    # later one would have been limited (counted whatever the enforced one did)
    assert value(m, "sluice_decisions_total", policy="shadowed", result="allowed", window="shadowed") == 1
    assert value(m, "sluice_decisions_total", policy="shadowed", result="shadow_limited",
                 window="shadowed") == 4
    assert 'policy="(no rule)",result="shadow_limited"' not in m
    # near limit (ratio 0.5): the 2nd and 3rd admissions used >= 50 % of 3
    assert value(m, "sluice_near_limit_total", policy="enforced", window="enforced") == 2
    assert value(m, "sluice_admitted_cost_total", policy="enforced") == 3

    # rollout 50 %: inside the rollout a key is limited, outside it is rollout_limited;
    # which keys are inside is what SL.EXPLAIN says for each
    c = srv.resp()
    inside = 0
    for i in range(40):
        key = "obs-roll-%d" % i
        note_raw_key(key)
        assert auth(srv, "/r/x", x_key=key).status_code == 200
        second = auth(srv, "/r/x", x_key=key).status_code
        x = json.loads(c.command("SL.EXPLAIN", "PATH", "/r/x", "HEADER", "x-key", key))
        in_rollout = pol(x, "rolled")["in_rollout"]
        assert second == (429 if in_rollout else 200)
        inside += in_rollout
    c.close()
    m = metrics(srv)
    assert 0 < inside < 40
    assert value(m, "sluice_decisions_total", policy="rolled", result="allowed", window="rolled") == 40
    assert value(m, "sluice_decisions_total", policy="rolled", result="limited", window="rolled") == inside
    assert value(m, "sluice_decisions_total", policy="rolled", result="rollout_limited",
                 window="rolled") == 40 - inside
    # the hot policy (no match condition, skip without its header) saw nothing
    assert value(m, "sluice_decisions_total", policy="hot", result="allowed", window="hot") == 0


def test_exposition_passes_promtool_and_prometheus_client(srv):
    for i in range(30):
        auth(srv, "/e/x", x_key="obs-expo-%d" % (i % 4))
        auth(srv, "/a/x", x_api_key="obs-expo-a")
    note_raw_key("obs-expo-a", *["obs-expo-%d" % i for i in range(4)])
    m = metrics(srv)
    r = subprocess.run(["promtool", "check", "metrics"], input=m, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    fams = list(text_string_to_metric_families(m))
    names = {f.name for f in fams}  # the parser names counter families without _total
    for f in fams:
        assert f.documentation, "no HELP for " + f.name
        assert f.type in ("counter", "gauge", "histogram", "untyped"), f.name
    for want in ("sluice_decisions", "sluice_near_limit", "sluice_admitted_cost",
                 "sluice_store_latency_seconds", "sluice_store_errors", "sluice_keys",
                 "sluice_evictions", "sluice_hot_key_share", "sluice_log_dropped",
                 "sluice_reloads", "sluice_connections_refused", "sluice_build_info",
                 "process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"):
        assert want in names, want
    # every sample names a policy, window, store or listener from the config: the series
    # count does not grow with keys (4 keys above, 1 series per policy and result)
    dec = [s for f in fams if f.name == "sluice_decisions" for s in f.samples]
    assert len(dec) <= 8, dec
    assert "obs-expo" not in m
    # the store latency histogram counted sampled decisions (1 in 16)
    assert value(m, "sluice_store_latency_seconds_count", store="memory", op="decide") >= 1
    assert value(m, "sluice_keys", policy="enforced") == 4


# ---- hot keys -----------------------------------------------------------------------------


def resp_pipeline(port, commands, chunk=5000):
    """Sends RESP commands in pipelined chunks; returns when every reply was read."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    marker, tail, seen = b"$5\r\ntoken\r\n", b"", 0
    for i in range(0, len(commands), chunk):
        part = commands[i:i + chunk]
        out = bytearray()
        for args in part:
            out += b"*%d\r\n" % len(args)
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        want = seen + len(part)
        while seen < want:
            data = tail + s.recv(1 << 20)
            assert data, "connection closed"
            seen += data.count(marker)
            tail = data[-(len(marker) - 1):]
    s.close()


def test_a_hot_key_among_100k_others_comes_first_with_its_share(srv):
    note_raw_key("obs-hot-key-7")
    cmds = []
    for i in range(100_000):
        cmds.append(("SL.CHECK", "hot", "obs-cold-%d" % i))
        if i % 4 == 0:
            cmds.append(("SL.CHECK", "hot", "obs-hot-key-7"))
    hot_n = 25_000
    resp_pipeline(srv.resp_port, cmds)
    r = requests.get(srv.admin + "/v1/top?policy=hot&n=5", headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    top = r.json()
    assert top["total_cost"] == 125_000
    first = top["keys"][0]
    want = hot_n / 125_000
    assert abs(first["share"] - want) <= 0.05 * want, first
    assert first["share_min"] <= want <= first["share_max"], first
    # it is the hot key: the hash explain shows for it
    c = srv.resp()
    x = json.loads(c.command("SL.EXPLAIN", "hot", "obs-hot-key-7"))
    c.close()
    assert first["key_hash"] == x["request"]["key_hash"]
    assert "key" not in first  # raw keys are not allowed here
    assert first["remaining"][0]["remaining"] == 10_000_000 - hot_n
    # the bounded gauge: top 3, hashed
    m = metrics(srv)
    assert value(m, "sluice_hot_key_share", policy="hot", rank="1", key=first["key_hash"]) == \
        pytest.approx(first["share"], abs=1e-5)
    assert len(re.findall(r'^sluice_hot_key_share\{policy="hot"', m, re.M)) == 3
    assert "obs-hot-key" not in m and "obs-hot-key" not in r.text
    assert requests.get(srv.admin + "/v1/top?policy=nope", headers=AUTH, timeout=5).status_code == 404


# ---- explain ------------------------------------------------------------------------------


def explain(srv, body):
    r = requests.post(srv.http + "/v1/explain", json=body, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def pol(x, name):
    return next(p for p in x["policies"] if p["policy"] == name)


def test_explain_cases_and_explaining_changes_nothing(srv):
    note_raw_key("obs-x-user", "obs-x-tenant", "198.51.100.23")
    c = srv.resp()
    for _ in range(5):
        c.command("SL.CHECKREQ", "PATH", "/s/login", "HEADER", "x-user", "obs-x-user")
    peek_before = as_dict(c.command("SL.PEEK", "strict", "obs-x-user"))
    before = metrics(srv)

    # matched and limited: the window's state, the answer, the deciding window
    x = explain(srv, {"request": {"method": "POST", "path": "/s/login",
                                  "headers": {"x-user": "obs-x-user"}}})
    s = pol(x, "strict")
    assert s["matched"] and s["result"] == "limited"
    assert s["windows"][0]["remaining"] == 0 and not s["windows"][0]["would_admit"]
    assert x["answer"]["action"] == "reject" and x["answer"]["deciding"]["policy"] == "strict"
    assert not x["consumed"]
    # unmatched, and which condition decided
    assert not pol(x, "tenant")["matched"]
    assert pol(x, "tenant")["why"] == "path /s/login does not match /t/ as a prefix"
    # missing key: api takes x-api-key, else the client address; none given
    x = explain(srv, {"request": {"path": "/a/x"}})
    a = pol(x, "api")
    assert a["result"] == "missing_key" and a["key"]["missing"]
    assert x["answer"]["status"] == 400
    # fallback: the address stands in for the missing header
    x = explain(srv, {"request": {"method": "POST", "path": "/a/export", "client_ip": "198.51.100.23"}})
    a = pol(x, "api")
    assert a["key"]["fallback"] and a["key"]["chains"][0]["missing"] == "header.x-api-key"
    assert a["cost"] == {"units": 5, "from": "operation POST /a/export"}
    assert "198.51.100.23" not in json.dumps(x)
    # plan
    x = explain(srv, {"request": {"path": "/t/x", "headers": {"x-tenant": "obs-x-tenant", "x-plan": "pro"}}})
    t = pol(x, "tenant")
    assert t["plan"] == "pro" and t["windows"][0]["window"] == "50/min"
    # shadow
    x = explain(srv, {"request": {"path": "/e/x", "headers": {"x-key": "obs-x-user"}}})
    assert pol(x, "shadowed")["mode"] == "shadow" and pol(x, "enforced")["mode"] == "enforce"
    # the explicit form, on RESP both forms
    x = explain(srv, {"policy": "strict", "key": "obs-x-user", "cost": 2})
    assert x["policies"][0]["cost"]["units"] == 2
    y = json.loads(c.command("SL.EXPLAIN", "PATH", "/t/x", "HEADER", "x-tenant", "obs-x-tenant"))
    assert pol(y, "tenant")["matched"] and pol(y, "tenant")["plan"] is None
    assert isinstance(c.command("SL.EXPLAIN", "PATH"), str)  # a syntax error

    # nothing changed: counters (decisions, near limit, cost, hot keys) and the state
    after = metrics(srv)
    keep = ("sluice_decisions", "sluice_near_limit", "sluice_admitted_cost", "sluice_hot_key_share",
            "sluice_keys")
    sb = {k: v for k, v in samples(before).items() if k[0].startswith(keep)}
    sa = {k: v for k, v in samples(after).items() if k[0].startswith(keep)}
    assert sb == sa
    assert as_dict(c.command("SL.PEEK", "strict", "obs-x-user")) == peek_before
    x = explain(srv, {"request": {"path": "/s/login", "headers": {"x-user": "obs-x-user"}}})
    assert pol(x, "strict")["windows"][0]["remaining"] == 0
    c.close()


def test_explain_offline():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "sluice.yaml")
    r = subprocess.run([BIN, "explain", "-c", path, "--method", "POST", "--path", "/login",
                        "--ip", "203.0.113.5", "--header", "x-api-key: obs-offline-key"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    x = json.loads(r.stdout)
    assert any(p["matched"] for p in x["policies"]) and x["answer"]["action"] == "allow"
    assert "obs-offline-key" not in r.stdout and "203.0.113.5" not in r.stdout
    r = subprocess.run([BIN, "explain", "-c", path, "--policy"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2


# ---- effective configuration and audit trail -------------------------------------------------


def test_the_audit_names_the_checksum_of_what_was_loaded(srv):
    """A deploy rewriting the file while sluice reloads: each audit entry's checksum is the
    one of the version the reload loaded (it hashed the file again when writing the entry,
    naming whatever was there by then: the ASan run of CI caught the startup entry naming
    the test's next version)."""
    import hashlib
    import threading
    a = config()
    b = a.replace("rate: 5/min, burst: 5", "rate: 10/min, burst: 10")
    sha = {"5/min": hashlib.sha256(a.encode()).hexdigest(), "10/min": hashlib.sha256(b.encode()).hexdigest()}
    stop = threading.Event()

    def writer():  # bounded by the test: stops when the reloads are done
        i = 0
        while not stop.is_set() and i < 200000:
            tmp = srv.config_path + ".tmp"
            with open(tmp, "w") as f:
                f.write(a if i % 2 == 0 else b)
            os.replace(tmp, srv.config_path)  # atomic, as a deploy (or a ConfigMap) does
            i += 1
    t = threading.Thread(target=writer)
    t.start()
    checked = 0
    try:
        for _ in range(40):
            r = requests.post(srv.admin + "/v1/reload", headers=AUTH, timeout=10)
            if r.status_code != 200:
                continue
            p = requests.get(srv.admin + "/v1/policies", headers=AUTH, timeout=5).json()
            rate = next(x for x in p["policies"] if x["name"] == "strict")["windows"][0]["rate"]
            e = requests.get(srv.admin + "/v1/audit", headers=AUTH, timeout=5).json()["entries"][0]
            assert e["source"] == "admin-api" and e["outcome"] == "ok", e
            assert e["sha256"] in (None, sha[rate]), (rate, e["sha256"])
            checked += e["sha256"] is not None
    finally:
        stop.set()
        t.join()
    assert checked >= 10, checked


def test_policies_and_audit_of_reloads(srv):
    r = requests.get(srv.admin + "/v1/policies", timeout=5)
    assert r.status_code == 401  # a token is configured
    p = requests.get(srv.admin + "/v1/policies", headers=AUTH, timeout=5).json()
    strict = next(x for x in p["policies"] if x["name"] == "strict")
    assert strict["windows"][0]["rate"] == "5/min" and strict["windows"][0]["burst"] == 5
    assert strict["source"] == srv.config_path + ":%d" % (config().splitlines().index("  - name: strict") + 1)
    assert strict["mode"] == "enforce" and strict["on_store_error"] == "open"
    assert next(x for x in p["policies"] if x["name"] == "rolled")["rollout_percent"] == 50
    assert next(x for x in p["policies"] if x["name"] == "tenant")["plans"][0]["name"] == "pro"

    text = config()
    with open(srv.config_path, "w") as f:
        f.write(text.replace("rate: 5/min, burst: 5", "rate: 10/min, burst: 10")
                    .replace("    mode: shadow\n", ""))
    r = requests.post(srv.admin + "/v1/reload", headers=AUTH, timeout=10)
    assert r.status_code == 200
    with open(srv.config_path, "w") as f:
        f.write(text.replace("algorithm: gcra", "algorithm: gcrx"))
    assert requests.post(srv.admin + "/v1/reload", headers=AUTH, timeout=10).status_code == 422
    with open(srv.config_path, "w") as f:
        f.write(text)
    srv.signal(signal.SIGHUP)
    a = wait_for(lambda: (lambda j: j if j["total"] >= 4 else None)(
        requests.get(srv.admin + "/v1/audit", headers=AUTH, timeout=5).json()))
    assert a["total"] == 4
    sighup, refused, api, start = a["entries"]  # newest first
    assert start["source"] == "startup" and start["outcome"] == "ok" and "strict" in start["added"]
    assert api["source"] == "admin-api" and api["caller"] == "deploy-bot" and api["outcome"] == "ok"
    how = {c["policy"]: c["how"] for c in api["changed"]}
    assert how["strict"] == "limits: 5/min (gcra) -> 10/min (gcra)"
    assert how["shadowed"] == "mode: shadow -> enforce"
    assert refused["outcome"] == "refused" and "gcrx" in refused["error"]
    assert sighup["source"] == "sighup" and sighup["caller"] is None
    assert set(sighup["sha256"]) <= set("0123456789abcdef") and len(sighup["sha256"]) == 64
    assert sighup["sha256"] == start["sha256"] != api["sha256"]
    assert TOKEN not in json.dumps(a)
    # the audit file holds the same entries, oldest first, one JSON object per line
    with open(os.path.join(srv.dir, "audit.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    assert [l["source"] for l in lines] == ["startup", "admin-api", "admin-api", "sighup"]
    # the reloads as log events and metrics
    assert wait_for(lambda: len(log_lines(srv, "reload")) == 2)
    assert len(log_lines(srv, "reload_refused")) == 1
    m = metrics(srv)
    assert value(m, "sluice_reloads_total", source="admin-api", outcome="ok") == 1
    assert value(m, "sluice_reloads_total", source="admin-api", outcome="refused") == 1
    assert value(m, "sluice_reloads_total", source="sighup", outcome="ok") == 1


# ---- logs ---------------------------------------------------------------------------------


def test_log_lines_reopen_and_refused_connections():
    s = Server(config_text=config(), workers=1, extra=["--max-conns", "3"])
    try:
        start = wait_for(lambda: log_lines(s, "start"))
        assert start and start[0]["level"] == "info" and start[0]["http"].startswith("127.0.0.1:")
        assert start[0]["workers"] == 1 and start[0]["store"] == "memory"
        # logrotate: rename, SIGUSR1, the next lines go to a new file at the same path
        path = os.path.join(s.dir, "sluice.log")
        os.rename(path, path + ".1")
        s.signal(signal.SIGUSR1)
        assert wait_for(lambda: os.path.exists(path))
        requests.post(s.admin + "/v1/reload", headers=AUTH, timeout=10)
        assert wait_for(lambda: log_lines(s, "reload"))
        # refused connections are counted, never one line each (3 at most: 8 tried)
        held = [socket.create_connection(("127.0.0.1", s.resp_port)) for _ in range(8)]
        time.sleep(0.3)
    finally:
        for h in locals().get("held", []):
            h.close()
    time.sleep(0.3)
    m = metrics(s)
    assert value(m, "sluice_connections_refused_total", listener="resp") >= 4
    assert s.stop() == 0
    s.assert_clean()
    summary = log_lines(s, "conn_refused")
    assert len(summary) == 1 and summary[0]["count"] >= 4, summary
    assert "connections refused in the last" in summary[0]["msg"]
    assert log_lines(s, "stop")


def test_decision_log_under_a_flood_of_rejections_stays_within_its_rate():
    per_s, burst = 200, 50
    text = config().replace("log:\n  format: json\n", "log:\n  format: json\n  decisions: "
                            "{ enabled: true, max_per_s: %d, burst: %d }\n" % (per_s, burst))
    text = text.replace("policies:\n", "policies:\n  - name: tiny\n    objective: protection\n"
                        "    match: { path_prefix: /none/ }\n    key: []\n    algorithm: fixed_window\n"
                        "    limits: [ { rate: 1/h } ]\n", 1)
    s = Server(config_text=text, workers=2, test_clock=False)
    try:
        c = s.resp()
        assert as_dict(c.command("SL.CHECK", "tiny", "obs-flood"))["allowed"] == 1
        c.close()
        note_raw_key("obs-flood")
        # rounds of 400 000 pipelined rejections for about 2 s (at most 6 rounds)
        t0, rounds = time.time(), 0
        while rounds < 6 and (rounds == 0 or time.time() - t0 < 2.0):
            r = subprocess.run(["redis-benchmark", "-p", str(s.resp_port), "-c", "16", "-P", "64",
                                "-n", "400000", "-q", "SL.CHECK", "tiny", "obs-flood"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            rounds += 1
        elapsed = time.time() - t0
        m = metrics(s)
        rejected = value(m, "sluice_decisions_total", policy="tiny", result="limited", window="tiny")
        assert rejected == 400_000 * rounds
        logged = value(m, "sluice_log_decisions_total", outcome="logged")
        over = value(m, "sluice_log_decisions_total", outcome="rate_limited")
        # every eligible decision is either written or counted as dropped
        assert logged + over == rejected, (logged, over, rejected)
        assert value(m, "sluice_log_dropped_total") >= over > 0
        print("flood: %d rejections in %.2f s (%.0f/s), %d decision lines" %
              (rejected, elapsed, rejected / elapsed, logged))
    finally:
        s.stop()
    s.assert_clean()
    lines = log_lines(s, "decision")
    assert len(lines) == logged
    # within the rate: the limiter's burst plus per_s for each second of the flood
    assert 1 <= len(lines) <= burst + per_s * (elapsed + 1), (len(lines), elapsed)
    d = lines[0]
    assert d["policy"] == "tiny" and d["verdict"] == "limited" and d["window"] == "tiny"
    assert re.fullmatch(r"k:[0-9a-f]{16}", d["key_hash"]) and "key" not in d
    # the suppressed lines are summarised, not lost silently
    summary = log_lines(s, "decision_log")
    assert summary and sum(x["suppressed"] for x in summary) == over


def test_raw_keys_only_when_configured():
    text = config().replace("log:\n  format: json\n", "log:\n  format: json\n  raw_keys: true\n"
                            "  decisions: { enabled: true }\n")
    s = Server(config_text=text, workers=1)
    try:
        for _ in range(8):  # 5 admitted, 3 rejected: the decision log takes rejections
            auth(s, "/s/x", x_user="raw-visible-user")
        top = requests.get(s.admin + "/v1/top?policy=strict", headers=AUTH, timeout=5).json()
        assert top["keys"][0]["key"] == "raw-visible-user"
        x = explain(s, {"policy": "strict", "key": "raw-visible-user"})
        assert x["policies"][0]["key"]["raw"] == "raw-visible-user"
        assert "raw-visible-user" not in metrics(s)  # metrics never carry one
    finally:
        s.stop()
    lines = log_lines(s, "decision")
    assert lines and all(l["key"] == "raw-visible-user" for l in lines)


# ---- the shared store down: fail-open and fail-closed under their own series ----------------


REDIS_CONFIG = """
workers: 1
admin:
  tokens: [ { name: deploy-bot, token: %s } ]
log: { format: json, file: sluice.log }
policies:
  - name: lenient
    objective: fairness
    match: { path_prefix: /o/ }
    key: [header.x-key]
    algorithm: gcra
    limits: [ { rate: 100/s, burst: 100 } ]
    on_store_error: open
  - name: careful
    objective: security
    match: { path_prefix: /c/ }
    key: [header.x-key]
    algorithm: gcra
    limits: [ { rate: 100/s, burst: 100 } ]
    on_store_error: closed
""" % TOKEN


def test_fail_open_and_fail_closed_with_redis_stopped():
    redis = Redis()
    s = Server(config_text=REDIS_CONFIG, test_clock=False, workers=1,
               extra=["--store", "redis://127.0.0.1:%d?timeout_ms=200" % redis.port])
    note_raw_key("obs-redis-key")
    try:
        assert auth(s, "/o/x", x_key="obs-redis-key").status_code == 200
        assert auth(s, "/c/x", x_key="obs-redis-key").status_code == 200
        redis.kill()
        codes_o = [auth(s, "/o/x", x_key="obs-redis-key").status_code for _ in range(5)]
        codes_c = [auth(s, "/c/x", x_key="obs-redis-key").status_code for _ in range(5)]
        assert codes_o == [200] * 5 and codes_c == [503] * 5
        m = metrics(s)
        assert value(m, "sluice_decisions_total", policy="lenient", result="fail_open", window="") == 5
        assert value(m, "sluice_decisions_total", policy="careful", result="fail_closed", window="") == 5
        assert value(m, "sluice_decisions_total", policy="lenient", result="allowed", window="lenient") == 1
        assert 'policy="(no rule)",result="fail_open"' not in m
        errs = sum(v for (n, l), v in samples(m).items() if n == "sluice_store_errors_total")
        assert errs >= 10
        assert value(m, "sluice_redis_node_up", node="127.0.0.1:%d" % redis.port) == 0
        r = subprocess.run(["promtool", "check", "metrics"], input=m, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        down = wait_for(lambda: log_lines(s, "store_down"), timeout=10)
        assert down and down[0]["node"] == "127.0.0.1:%d" % redis.port
        redis.start()
        assert wait_for(lambda: log_lines(s, "store_up"), timeout=15)
        assert wait_for(lambda: auth(s, "/c/x", x_key="obs-redis-key").status_code == 200, timeout=10)
    finally:
        s.stop()
        redis.close()
    s.assert_clean()


def test_eviction_pressure_is_logged_and_counted():
    text = """
workers: 1
store: { type: memory, max_keys: 100, shards: 1 }
log: { format: json, file: sluice.log }
policies:
  - name: many
    objective: fairness
    key: [header.x-key]
    algorithm: fixed_window
    limits: [ { rate: 10/min } ]
  - name: quiet
    objective: fairness
    key: [header.x-key]
    algorithm: fixed_window
    limits: [ { rate: 10/min } ]
"""
    s = Server(config_text=text, workers=1)
    try:
        resp_pipeline(s.resp_port, [("SL.CHECK", "quiet", "obs-quiet-%d" % i) for i in range(5)])
        resp_pipeline(s.resp_port, [("SL.CHECK", "many", "obs-evict-%d" % i) for i in range(1000)])
        note_raw_key(*["obs-evict-%d" % i for i in range(0, 1000, 97)])
        m = metrics(s)
        # counted per policy: the flooded one evicts its own keys, the other keeps its five
        assert value(m, "sluice_evictions_total", policy="many", kind="lru") >= 800
        assert value(m, "sluice_evictions_total", policy="quiet", kind="lru") == 0
        assert value(m, "sluice_keys", policy="many") <= 100
        assert value(m, "sluice_keys", policy="quiet") == 5
        # the watcher compares the store's counters every 10 s: one line, not one per key
        ev = wait_for(lambda: log_lines(s, "eviction_pressure"), timeout=15)
        assert len(ev) == 1 and ev[0]["evicted"] >= 800 and ev[0]["capacity"] == 100
    finally:
        s.stop()
    s.assert_clean()
