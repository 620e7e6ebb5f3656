# SPDX-License-Identifier: Apache-2.0
# test_overrides.py -- per-key overrides (issue 21, docs/overrides.md) on the memory store:
# the admin API's contract, decisions under an override compared with the same numbers
# reached by a reload (counters carried exactly), plans by override vs plan_from, block and
# exempt, explain/metrics/audit, reloads, persistence (SIGTERM, kill -9) and import/export.
import itertools
import json
import os
import signal
import time

import requests

from conftest import Server, as_dict

TOKEN = "ovr-test-token-1234"

BASE = """
workers: 2
admin:
  tokens: [ { name: ops, token: %s } ]
store:
  type: memory
  max_keys: 100000
%s
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    algorithm: gcra
    limits: [ { rate: %s, burst: %d } ]
    plan_from: header.x-plan
    plans:
      enterprise: { limits: [ { name: ent, rate: 10/min, burst: 10 } ] }
%s
"""

T0_MS = 1767225600000  # 2026-01-01T00:00:00Z


def cfg(rate="3/min", burst=3, store_extra="", more=""):
    return BASE % (TOKEN, store_extra, rate, burst, more)


H = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}  # the admin listener asks JSON of state changes


def put(s, policy, key, body, token=True):
    return requests.put(s.admin + "/v1/overrides/%s/%s" % (policy, key), data=json.dumps(body),
                        headers=H if token else {}, timeout=10)


def get(s, policy, key):
    return requests.get(s.admin + "/v1/overrides/%s/%s" % (policy, key), headers=H, timeout=10)


def delete(s, policy, key):
    return requests.delete(s.admin + "/v1/overrides/%s/%s" % (policy, key), headers=H, timeout=10)


def auth(s, key, plan=None):
    h = {"x-api-key": key}
    if plan:
        h["x-plan"] = plan
    return requests.get(s.http + "/v1/auth", headers=h, timeout=10)


def check(c, key, cost=None):
    args = ["SL.CHECK", "api", key] + (["COST", str(cost)] if cost is not None else [])
    return as_dict(c.command(*args))


def peek(c, key):
    return as_dict(c.command("SL.PEEK", "api", key))["remaining"]


def clock_set(s, ms):
    r = requests.post(s.admin + "/v1/clock", json={"set_ms": ms}, headers=H, timeout=10)
    assert r.status_code == 200, r.text


def clock_advance(s, ms):
    r = requests.post(s.admin + "/v1/clock", json={"advance_ms": ms}, headers=H, timeout=10)
    assert r.status_code == 200, r.text


def resp(s):
    c = s.resp()
    assert c.command("AUTH", TOKEN) in (b"OK", "OK"), "AUTH"
    return c


def iso(ms):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".%03dZ" % (ms % 1000)


def test_api_contract(make_server):
    s = make_server(config_text=cfg())
    clock_set(s, T0_MS)
    r = put(s, "api", "k1", {"limits": [{"rate": "10/min", "burst": 10}], "label": "acme",
                             "reason": "launch week"})
    assert r.status_code == 201, r.text
    o = r.json()
    assert o["limits"] == [{"rate": "10/min", "burst": 10}] and o["label"] == "acme"
    assert o["set_by"] == "ops" and o["kind"] == "limits" and len(o["key_hash"]) == 32
    assert "key" not in o  # raw keys are not kept unless log.raw_keys allows it
    assert put(s, "api", "k1", {"limits": [{"rate": "20/min", "burst": 20}]}).status_code == 200
    assert get(s, "api", "k1").json()["limits"] == [{"rate": "20/min", "burst": 20}]
    assert get(s, "api", "nobody").status_code == 404
    # bad input: 400 naming the field, 404 for an unknown policy, 401 without the token
    cases = [
        ({"limits": [{"rate": "0/min"}]}, "limits[0].rate"),
        ({"limits": [{"rate": "-3/min"}]}, "limits[0].rate"),
        ({"limits": [{"rate": "10/min", "algorithm": "token_bucket"}]}, "limits[0].algorithm"),
        ({"plan": "platinum"}, "plan"),
        ({"plan": "enterprise", "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
        ({"plan": "enterprise", "expires_at": "tomorrow"}, "expires_at"),
        ({"plan": "enterprise", "block": True}, "plan"),
        ({"plans": "enterprise"}, "plans"),
        ({"limits": [{"rate": "1/s"}, {"rate": "2/s"}]}, "limits"),
    ]
    for body, field in cases:
        r = put(s, "api", "k2", body)
        assert r.status_code == 400, (body, r.text)
        assert r.headers["Content-Type"].startswith("application/problem+json")
        assert r.json()["field"] == field, (body, r.json())
    assert put(s, "nope", "k2", {"plan": "enterprise"}).status_code == 404
    assert put(s, "api", "k2", {"plan": "enterprise"}, token=False).status_code == 401
    r = requests.put(s.admin + "/v1/overrides/api/k2", data="{not json", headers=H, timeout=10)
    assert r.status_code == 400
    assert get(s, "api", "k2").status_code == 404  # nothing refused was stored
    r = delete(s, "api", "k1")
    assert r.status_code == 204 and r.text == ""
    assert delete(s, "api", "k1").status_code == 404
    assert get(s, "api", "k1").status_code == 404


def test_list_pages_in_a_stable_order(make_server):
    s = make_server(config_text=cfg())
    for i in range(25):
        assert put(s, "api", "key-%d" % i, {"plan": "enterprise", "label": "c%d" % i}).status_code == 201
    seen, cursor, pages = [], None, 0
    while pages < 10:
        url = s.admin + "/v1/overrides?policy=api&limit=10" + ("&cursor=" + cursor if cursor else "")
        r = requests.get(url, headers=H, timeout=10)
        assert r.status_code == 200, r.text
        page = r.json()
        assert set(page) == {"items", "next_cursor"}
        seen += [it["label"] for it in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and sorted(seen) == sorted("c%d" % i for i in range(25))
    again = requests.get(s.admin + "/v1/overrides?limit=10", headers=H, timeout=10).json()
    assert [it["label"] for it in again["items"]] == seen[:10]  # the same order every time
    assert requests.get(s.admin + "/v1/overrides?limit=0", headers=H, timeout=10).status_code == 400
    assert requests.get(s.admin + "/v1/overrides?cursor=zz", headers=H, timeout=10).status_code == 400


def test_override_then_expiry_carries_counters_as_a_reload_does(make_server, tmp_path):
    """Key limited at 3/min, admitted 10/min under its override, back to 3/min after
    expires_at on the test clock; at each step the same as a second server reaching those
    numbers by reloads (the reference for "counters carry over as on a reload")."""
    a = make_server(config_text=cfg())
    path_b = tmp_path / "b.yaml"
    path_b.write_text(cfg())
    b = make_server(config_path=str(path_b))
    ca, cb = resp(a), resp(b)
    for s in (a, b):
        clock_set(s, T0_MS)
    # 2 of 3 used
    for _ in range(2):
        assert check(ca, "k")["allowed"] == 1 and check(cb, "k")["allowed"] == 1
    assert peek(ca, "k") == peek(cb, "k") == 1
    # the override on a, a reload to the same numbers on b
    r = put(a, "api", "k", {"limits": [{"rate": "10/min", "burst": 10}],
                            "expires_at": iso(T0_MS + 31000)})
    assert r.status_code == 201, r.text
    path_b.write_text(cfg("10/min", 10))
    assert requests.post(b.admin + "/v1/reload", headers=H, timeout=10).status_code == 200
    got_a = [check(ca, "k")["allowed"] for _ in range(10)]
    got_b = [check(cb, "k")["allowed"] for _ in range(10)]
    assert got_a == got_b and sum(got_a) == 8, (got_a, got_b)  # 2 carried, 8 more
    for s in (a, b):
        clock_advance(s, 30000)  # half the window back: 5 units
    assert peek(ca, "k") == peek(cb, "k") == 5
    # expiry on a; b peeks at the same instant (a reload carries at the latest decision)
    # and reloads back to 3/min
    for s in (a, b):
        clock_advance(s, 2000)
    assert peek(cb, "k") == 5
    path_b.write_text(cfg())
    assert requests.post(b.admin + "/v1/reload", headers=H, timeout=10).status_code == 200
    ra, rb = peek(ca, "k"), peek(cb, "k")
    assert ra == rb, (ra, rb)
    got_a = [check(ca, "k")["allowed"] for _ in range(4)]
    got_b = [check(cb, "k")["allowed"] for _ in range(4)]
    assert got_a == got_b, (got_a, got_b)
    assert get(a, "api", "k").status_code == 404  # expired: gone from GET and lists
    items = requests.get(a.admin + "/v1/overrides", headers=H, timeout=10).json()["items"]
    assert items == []
    # an untouched key never saw the override
    assert [check(ca, "other")["allowed"] for _ in range(4)] == [1, 1, 1, 0]


def test_delete_carries_back(make_server):
    s = make_server(config_text=cfg())
    clock_set(s, T0_MS)
    c = resp(s)
    assert put(s, "api", "k", {"limits": [{"rate": "10/min", "burst": 10}]}).status_code == 201
    assert sum(check(c, "k")["allowed"] for _ in range(12)) == 10
    clock_advance(s, 30000)  # 5 of the 10 back
    assert delete(s, "api", "k").status_code == 204
    # 5 used carried to 3/min: nothing left (the state read raw under 3/min, or a fresh
    # start, would admit)
    assert check(c, "k")["allowed"] == 0
    assert get(s, "api", "k").status_code == 404


def test_plan_by_override_equals_plan_from(make_server):
    s = make_server(config_text=cfg())
    clock_set(s, T0_MS)
    assert put(s, "api", "by-override", {"plan": "enterprise", "label": "acme"}).status_code == 201
    ra = [auth(s, "by-header", plan="enterprise") for _ in range(12)]
    rb = [auth(s, "by-override") for _ in range(12)]
    assert [r.status_code for r in ra] == [r.status_code for r in rb]
    assert [r.status_code for r in rb].count(200) == 10
    assert ra[0].headers["RateLimit-Policy"] == rb[0].headers["RateLimit-Policy"]
    assert ra[3].headers["RateLimit"] == rb[3].headers["RateLimit"]
    # without either, the policy's own 3/min
    assert [auth(s, "plain").status_code for _ in range(4)] == [200, 200, 200, 429]


def test_block_exempt_and_what_answers_show(make_server):
    s = make_server(config_text=cfg())
    clock_set(s, T0_MS)
    assert put(s, "api", "bad", {"block": True, "label": "k-91", "reason": "review"}).status_code == 201
    assert put(s, "api", "vip", {"exempt": True}).status_code == 201
    assert put(s, "api", "big", {"limits": [{"rate": "100/min", "burst": 100}]}).status_code == 201
    r = auth(s, "bad")
    assert r.status_code == 429
    p = r.json()
    assert "blocked by an override" in p["detail"] and "k-91" in p["detail"]
    assert p["source"] == "override" and p["override"]["kind"] == "block"
    assert all(auth(s, "vip").status_code == 200 for _ in range(20))
    r = requests.post(s.http + "/v1/check", json={"policy": "api", "key": "big"}, timeout=10)
    assert r.status_code == 200
    j = r.json()
    assert j["source"] == "override" and j["override"]["kind"] == "limits"
    assert j["limits"][0]["remaining"] == 99
    # RateLimit-Policy carries the effective quota
    r = auth(s, "big")
    assert ";q=100;" in r.headers["RateLimit-Policy"] and ";w=60" in r.headers["RateLimit-Policy"]
    r = requests.post(s.http + "/v1/check", json={"policy": "api", "key": "plain"}, timeout=10)
    assert "source" not in r.json()
    m = requests.get(s.admin + "/metrics", headers=H, timeout=10).text
    assert 'sluice_overrides{policy="api"} 3' in m
    assert 'sluice_override_decisions_total{kind="block"} 1' in m
    assert 'sluice_override_decisions_total{kind="exempt"} 20' in m
    assert "big" not in m.replace("sluice", "")  # no key in any series
    audit = requests.get(s.admin + "/v1/audit", headers=H, timeout=10).json()["entries"]
    ov = [e for e in audit if e.get("source") == "override"]
    assert len(ov) == 3 and all(e["caller"] == "ops" for e in ov)
    assert any("k-91" in json.dumps(e) and '\\"block\\":true' in json.dumps(e) for e in ov)


def test_reload_keeps_overrides_dormant_when_the_policy_goes(make_server, tmp_path):
    path = tmp_path / "c.yaml"
    extra = """  - name: other
    objective: fairness
    match: { path_prefix: /other/ }
    key: [header.x-api-key]
    algorithm: gcra
    limits: [ { rate: 1/min, burst: 1 } ]
"""
    path.write_text(cfg(more=extra))
    s = make_server(config_path=str(path))
    assert put(s, "other", "k", {"limits": [{"rate": "5/min", "burst": 5}], "label": "L"}).status_code == 201
    path.write_text(cfg())
    assert requests.post(s.admin + "/v1/reload", headers=H, timeout=10).status_code == 200
    orph = requests.get(s.admin + "/v1/overrides?orphaned=1", headers=H, timeout=10).json()["items"]
    assert [o["label"] for o in orph] == ["L"] and orph[0]["orphaned"] is True
    m = requests.get(s.admin + "/metrics", headers=H, timeout=10).text
    assert "sluice_overrides_orphaned 1" in m
    path.write_text(cfg(more=extra))
    assert requests.post(s.admin + "/v1/reload", headers=H, timeout=10).status_code == 200
    assert requests.get(s.admin + "/v1/overrides?orphaned=1", headers=H, timeout=10).json()["items"] == []
    c = resp(s)
    got = [as_dict(c.command("SL.CHECK", "other", "k"))["allowed"] for _ in range(6)]
    assert got == [1, 1, 1, 1, 1, 0]  # active again: 5/min, not the policy's 1/min


def test_survives_sigterm_and_kill9(make_server, tmp_path):
    state = tmp_path / "s.state"
    text = cfg(store_extra="  snapshot: { path: %s, every: 1s }" % state)
    text = text.replace("  max_keys: 100000\n\n", "  max_keys: 100000\n")
    s = make_server(config_text=text)
    assert put(s, "api", "a", {"plan": "enterprise", "label": "A"}).status_code == 201
    assert put(s, "api", "b", {"limits": [{"rate": "10/min", "burst": 10}]}).status_code == 201
    s.signal(signal.SIGTERM)
    assert s.proc.wait(10) == 0
    s2 = Server(config_text=text)
    try:
        assert get(s2, "api", "a").json()["label"] == "A"
        assert get(s2, "api", "b").json()["limits"] == [{"rate": "10/min", "burst": 10}]
        before = state.stat().st_mtime_ns
        assert put(s2, "api", "c", {"block": True}).status_code == 201
        deadline = time.time() + 10
        while time.time() < deadline and state.stat().st_mtime_ns == before:
            time.sleep(0.1)
        time.sleep(1.5)  # a periodic snapshot written after the PUT
    finally:
        s2.proc.send_signal(signal.SIGKILL)
        s2.proc.wait(10)
        s2.log.close()
    s3 = make_server(config_text=text)
    assert get(s3, "api", "c").json()["kind"] == "block"
    assert auth(s3, "c").status_code == 429


def test_import_export_round_trip_and_hostile_lines(make_server):
    s = make_server(config_text=cfg())
    lines = [
        {"policy": "api", "key": "i1", "plan": "enterprise", "label": "one"},
        "this is not json",
        {"policy": "api", "key": "i2", "limits": [{"rate": "7/min", "burst": 7}], "reason": "r"},
        {"policy": "nope", "key": "i3", "block": True},
        {"policy": "api", "key": "i4", "limits": [{"rate": "0/min"}]},
        {"policy": "api", "key": "i5", "exempt": True, "expires_at": "2200-01-01T00:00:00Z"},
        {"policy": "api"},
        "",
        "[1,2]",
    ]
    body = "\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines) + "\n"
    r = requests.post(s.admin + "/v1/overrides/import", data=body, headers=H, timeout=30)
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["applied"] == 3, j
    assert [x["line"] for x in j["refused"]] == [2, 4, 5, 7, 9], j
    assert "404" in j["refused"][1]["reason"] and "rate" in j["refused"][2]["reason"]
    exp = requests.get(s.admin + "/v1/overrides/export", headers=H, timeout=30)
    assert exp.status_code == 200 and exp.headers["Content-Type"] == "application/x-ndjson"
    out = [json.loads(l) for l in exp.text.splitlines()]
    assert len(out) == 3 and all("key_hash" in o and "key" not in o for o in out)

    def state(srv):
        items = requests.get(srv.admin + "/v1/overrides?limit=1000", headers=H, timeout=10).json()["items"]
        return sorted((json.dumps({k: v for k, v in it.items() if k not in ("set_at",)}, sort_keys=True)
                       for it in items))

    before = state(s)
    # the export re-imports unchanged: every line applies (replacing itself by key_hash)
    # and the set is the same
    r = requests.post(s.admin + "/v1/overrides/import", data=exp.text, headers=H, timeout=30)
    assert r.json() == {"applied": 3, "refused": []}
    assert state(s) == before
    # decisions follow the imported overrides
    assert [auth(s, "i2").status_code for _ in range(8)].count(200) == 7


def test_resp_override_commands(make_server):
    s = make_server(config_text=cfg())
    c = s.resp()
    r = c.command("SL.OVERRIDE", "GET", "api", "r1")
    assert isinstance(r, str) and r.startswith("NOAUTH"), r  # behind AUTH when tokens are set
    assert c.command("AUTH", TOKEN) in (b"OK", "OK")
    got = c.command("SL.OVERRIDE", "SET", "api", "r1", json.dumps({"limits": [{"rate": "10/min", "burst": 10}],
                                                                   "label": "resp"}))
    o = json.loads(got)
    assert o["label"] == "resp" and o["set_by"] == "ops"
    assert json.loads(c.command("SL.OVERRIDE", "GET", "api", "r1"))["kind"] == "limits"
    assert sum(as_dict(c.command("SL.CHECK", "api", "r1"))["allowed"] for _ in range(12)) == 10
    err = c.command("SL.OVERRIDE", "SET", "api", "r1", json.dumps({"limits": [{"rate": "0/s"}]}))
    assert isinstance(err, str) and err.startswith("ERR limits[0].rate"), err
    assert c.command("SL.OVERRIDE", "SET", "api", "r1", "{nope").startswith("ERR")
    assert c.command("SL.OVERRIDE", "DEL", "api", "r1") == 1
    assert c.command("SL.OVERRIDE", "DEL", "api", "r1") == 0
    assert c.command("SL.OVERRIDE", "GET", "api", "r1") is None
    assert c.command("SL.OVERRIDE", "FROB", "api", "r1").startswith("ERR syntax")
    # the HTTP API sees what RESP set, and the other way round
    assert put(s, "api", "r2", {"block": True}).status_code == 201
    assert json.loads(c.command("SL.OVERRIDE", "GET", "api", "r2"))["kind"] == "block"


def test_cli_override_commands(make_server, tmp_path):
    import subprocess
    from conftest import BIN
    s = make_server(config_text=cfg())
    tokf = tmp_path / "token"
    tokf.write_text(TOKEN + "\n")
    env = dict(os.environ, SLUICE_ADMIN="127.0.0.1:%d" % s.admin_port)
    env.pop("SLUICE_ADMIN_TOKEN", None)

    def run(*args, token="file", stdin=None):
        e = dict(env)
        a = [BIN, "override"]
        if token == "file":
            a += ["--token-file", str(tokf)]
        elif token == "env":
            e["SLUICE_ADMIN_TOKEN"] = TOKEN
        return subprocess.run(a + list(args), env=e, capture_output=True, text=True, timeout=30,
                              input=stdin)

    r = run("set", "api", "acme|4711", '{"plan": "enterprise", "label": "Acme"}')
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["label"] == "Acme"
    # the key's '|' joins parts: the same identity the API's path names
    import http.client

    def raw_get(path):  # requests would encode the '|' that joins the parts
        c = http.client.HTTPConnection("127.0.0.1", s.admin_port, timeout=10)
        c.request("GET", path, headers=H)
        st = c.getresponse().status
        c.close()
        return st

    assert raw_get("/v1/overrides/api/acme%7C4711") == 404  # one part holding a '|'
    assert raw_get("/v1/overrides/api/acme|4711") == 200
    r = run("get", "api", "acme|4711", token="env")
    assert r.returncode == 0 and json.loads(r.stdout)["kind"] == "plan"
    r = run("get", "api", "acme|4711", token=None)
    assert r.returncode == 1 and "token was refused" in r.stderr
    r = run("set", "api", "k", "-", stdin='{"limits": [{"rate": "0/min"}]}')
    assert r.returncode == 1 and "limits[0].rate" in r.stderr
    f = tmp_path / "in.ndjson"
    f.write_text('{"policy": "api", "key": "b1", "block": true}\nnot json\n')
    r = run("import", str(f))
    assert r.returncode == 1 and "applied: 1, refused: 1" in r.stdout and "in.ndjson:2:" in r.stderr
    r = run("ls")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2
    r = run("export")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2
    assert run("rm", "api", "b1").returncode == 0
    assert run("get", "api", "b1").returncode == 1
    assert run("frob").returncode == 2
    assert run("get", "api").returncode == 2


def _post_stream(s, chunks, total, path="/v1/overrides/import", timeout=120):
    """POST with a Content-Length body sent chunk by chunk (never held whole here)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", s.admin_port, timeout=timeout)
    c.putrequest("POST", path)
    c.putheader("Authorization", "Bearer " + TOKEN)
    c.putheader("Content-Length", str(total))
    c.endheaders()
    for ch in chunks:
        c.send(ch)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def test_import_streams_beyond_the_body_limit_in_bounded_memory(make_server):
    s = make_server(config_text=cfg(store_extra="overrides: { max: 1000 }"))
    # 3000 good lines against overrides.max 1000: 1000 applied, 2000 refused with 507
    lines = "".join(json.dumps({"policy": "api", "key": "m%d" % i, "block": True}) + "\n"
                    for i in range(3000)).encode()
    st, body = _post_stream(s, [lines[i:i + 65536] for i in range(0, len(lines), 65536)], len(lines))
    assert st == 200, body
    j = json.loads(body)
    assert j["applied"] == 1000 and j["refused_total"] == 2000 and len(j["refused"]) == 1000
    assert j["refused"][0]["line"] == 1001 and "507" in j["refused"][0]["reason"]
    r = put(s, "api", "one-more", {"block": True})
    assert r.status_code == 507 and r.headers["Content-Type"].startswith("application/problem+json")
    # a 1 GiB body (one endless line, then a good line): streamed, never buffered
    before = _rss_kib(s.proc.pid)
    junk = b"x" * (1 << 20)
    tail = b"\n" + json.dumps({"policy": "api", "key": "m0", "exempt": True}).encode() + b"\n"
    total = (1 << 30) + len(tail)
    t0 = time.time()
    st, body = _post_stream(s, itertools.chain((junk for _ in range(1024)), [tail]), total, timeout=300)
    print("1 GiB import body streamed in %.1f s" % (time.time() - t0))
    assert st == 200, body
    j = json.loads(body)
    assert j["applied"] == 1 and j["refused"] == [{"line": 1, "reason": "a line longer than 1 MiB"}]
    assert _rss_kib(s.proc.pid) - before < 64 * 1024, (before, _rss_kib(s.proc.pid))
    assert get(s, "api", "m0").json()["kind"] == "exempt"
    # PUT keeps the body limit
    try:  # the server answers 413 and may close while the body is still being sent
        r = requests.put(s.admin + "/v1/overrides/api/big", data=b"{" + b" " * (2 << 20) + b"}",
                         headers=H, timeout=30)
        assert r.status_code == 413
    except requests.exceptions.ConnectionError:
        pass
    assert get(s, "api", "big").status_code == 404


def test_keys_of_64_kib(make_server):
    s = make_server(config_text=cfg())
    key = "k" * 65536
    try:  # beyond the admin listener's target limit: 414 (the server may close while we send)
        r = put(s, "api", key, {"limits": [{"rate": "10/min", "burst": 10}]})
        assert r.status_code in (414, 431), r.status_code
    except requests.exceptions.ConnectionError:
        pass
    assert requests.get(s.admin + "/healthz", timeout=10).status_code == 200
    # through import (no URL limit) the same key is taken, and decides
    line = json.dumps({"policy": "api", "key": key, "block": True})
    st, body = _post_stream(s, [line.encode()], len(line))
    assert st == 200 and json.loads(body)["applied"] == 1, body


def test_a_read_token_may_not_change_overrides_on_any_path(make_server):
    """admin.tokens role: read reads overrides but changes none: HTTP PUT/DELETE, the
    streamed import and RESP SL.OVERRIDE SET/DEL (each path asked the same check, which
    allowed every token before roles reached it)."""
    ro = "ovr-read-token-5678"
    text = cfg().replace("tokens: [ { name: ops, token: %s } ]" % TOKEN,
                         "tokens: [ { name: ops, token: %s }, { name: dash, token: %s, role: read } ]"
                         % (TOKEN, ro))
    s = make_server(config_text=text)
    R = {"Authorization": "Bearer " + ro}
    assert put(s, "api", "k1", {"block": True}).status_code == 201
    r = requests.put(s.admin + "/v1/overrides/api/k2", data=json.dumps({"block": True}),
                     headers=dict(R, **{"Content-Type": "application/json"}), timeout=10)
    assert r.status_code == 403, r.text
    assert requests.delete(s.admin + "/v1/overrides/api/k1", headers=R, timeout=10).status_code == 403
    r = requests.post(s.admin + "/v1/overrides/import", data=json.dumps({"policy": "api", "key": "k3",
                                                                         "block": True}) + "\n",
                      headers=dict(R, **{"Content-Type": "application/x-ndjson"}), timeout=10)
    assert r.status_code == 403, r.text
    assert requests.get(s.admin + "/v1/overrides/api/k1", headers=R, timeout=10).status_code == 200
    c = s.resp()
    assert c.command("AUTH", ro) in (b"OK", "OK")
    err = c.command("SL.OVERRIDE", "SET", "api", "k4", json.dumps({"block": True}))
    assert isinstance(err, str) and err.startswith("NOPERM"), err
    err = c.command("SL.OVERRIDE", "DEL", "api", "k1")
    assert isinstance(err, str) and err.startswith("NOPERM"), err
    assert json.loads(c.command("SL.OVERRIDE", "GET", "api", "k1"))["kind"] == "block"
    for k in ("k2", "k3", "k4"):
        assert get(s, "api", k).status_code == 404, k


def test_delete_reason_is_audited(make_server):
    s = make_server(config_text=cfg())
    assert put(s, "api", "kr", {"block": True, "label": "k-91"}).status_code == 201
    bad = requests.delete(s.admin + "/v1/overrides/api/kr", data=json.dumps({"why": 1}), headers=H, timeout=10)
    assert bad.status_code == 400 and bad.json()["field"] == "reason", bad.text
    r = requests.delete(s.admin + "/v1/overrides/api/kr", data=json.dumps({"reason": "review done"}),
                        headers=H, timeout=10)
    assert r.status_code == 204, r.text
    audit = requests.get(s.admin + "/v1/audit", headers=H, timeout=10).json()["entries"]
    text = json.dumps([e for e in audit if e.get("source") == "override"])
    assert "reason: review done" in text and "k-91" in text, text


def test_the_curl_examples_of_docs_overrides_md_work(make_server, tmp_path):
    """The curl block of docs/overrides.md, run as written against a server (its admin
    address put in): every call answers 2xx (the PUTs lacked a JSON Content-Type and
    answered 415; the DELETE named a key never set and answered 404)."""
    import re
    import subprocess
    with open(os.path.join(os.environ["SLUICE_SRC"], "docs", "overrides.md")) as f:
        doc = f.read()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", doc, re.S) if "/v1/overrides/" in b)
    s = make_server(config_text=cfg())
    clock_set(s, T0_MS)  # the examples' expiry (2026-12-31) lies ahead
    script = ("set -e\ncurl() { command curl -sS --fail-with-body \"$@\"; echo; }\n" +
              re.sub(r"(?m)^A=.*$", "A=" + s.admin, block))
    got = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, SLUICE_ADMIN_TOKEN=TOKEN))
    assert got.returncode == 0, (got.stdout, got.stderr)
    assert '"applied":3' in got.stdout.replace(" ", ""), got.stdout
    left = requests.get(s.admin + "/v1/overrides?policy=api", headers=H, timeout=10).json()
    assert [o.get("label") for o in left["items"]] == ["Acme"], left
