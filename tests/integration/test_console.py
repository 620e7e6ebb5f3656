# SPDX-License-Identifier: Apache-2.0
"""The operator console (issue 22): its data endpoints over HTTP (/v1/series,
/v1/rejections, POST /v1/state/reset, POST /v1/config/check, /v1/whoami) with hostile
input, token roles, the CSRF rules (Origin, Content-Type) and the security headers of
every admin response, the admin listener's connection budget, admin.ui: false; then the
page itself in Debian's chromium (headless, DevTools protocol: tests/integration/cdp.py)
against a server with live traffic: every view shows the right policy names and numbers
matching /metrics, /v1/series and /v1/top; a reset done through the page changes the next
decision and is in the audit trail; no request leaves for another origin; no console
error; an XSS key stays text; without the token only the prompt shows. Screenshots of
each view go to docs/img/ (docs/console.md shows them)."""
import json
import os
import random
import re
import socket
import threading
import time

import pytest
import requests

from conftest import Server

SRC = os.environ.get("SLUICE_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
IMG = os.path.join(SRC, "docs", "img")
TOKEN = "console-admin-token-1"
READ_TOKEN = "console-read-token-2"
AUTH = {"Authorization": "Bearer " + TOKEN}
RAUTH = {"Authorization": "Bearer " + READ_TOKEN}

CONFIG = """
workers: 2
admin:
  token: %s
  tokens:
    - {name: oncall, token: console-act-token-3}
    - {name: viewer, token: %s, role: read}
log:
  decisions: {enabled: true}
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    algorithm: token_bucket
    limits:
      - { rate: 10/s, burst: 20 }
      - { rate: 6000/min }
  - name: login
    objective: security
    mode: shadow
    match: { method: POST, path: /login }
    key: [client_ip]
    algorithm: gcra
    on_store_error: closed
    limits:
      - { rate: 5/min, burst: 5 }
  - name: beta
    objective: fairness
    mode: { rollout: 50%% }
    match: { path_prefix: /beta/ }
    key: [header.x-api-key]
    algorithm: fixed_window
    limits:
      - { rate: 3/s }
  - name: strict
    objective: security
    match: { path_prefix: /strict/ }
    key: [header.x-api-key]
    algorithm: token_bucket
    limits:
      - { rate: 1/h, burst: 3 }
""" % (TOKEN, READ_TOKEN)

SECURITY = {
    "Content-Security-Policy": "default-src 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def check(srv, policy, key, **kw):
    return requests.post(srv.http + "/v1/check", json={"policy": policy, "key": key}, timeout=5, **kw)


def advance(srv, ms):
    r = requests.post(srv.admin + "/v1/clock", json={"advance_ms": ms}, headers=AUTH, timeout=5)
    assert r.status_code == 200, r.text


def metrics(srv):
    out = {}
    for line in requests.get(srv.admin + "/metrics", headers=AUTH, timeout=5).text.splitlines():
        m = re.match(r'^(\w+)\{([^}]*)\} (\S+)$', line)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def decisions(met, policy):
    return sum(v for (n, l), v in met.items() if n == "sluice_decisions_total" and 'policy="%s"' % policy in l)


def assert_security_headers(r):
    for h, v in SECURITY.items():
        assert v in r.headers.get(h, ""), (h, r.headers)
    assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert "'unsafe-inline'" not in r.headers["Content-Security-Policy"]


# ---- the data endpoints ----------------------------------------------------------------------


def test_series_counts_and_hostile_input(make_server):
    srv = make_server(config_text=CONFIG)  # the test clock: nothing moves unless told
    for _ in range(30):
        check(srv, "api", "k1")
    r = requests.get(srv.admin + "/v1/series?policy=api&seconds=5", headers=AUTH, timeout=5)
    assert r.status_code == 200
    assert_security_headers(r)
    j = r.json()
    assert set(j) == {"policy", "step_ms", "end_ms", "windows"}
    assert j["policy"] == "api" and j["step_ms"] == 1000 and j["end_ms"] % 1000 == 0
    assert [w["window"] for w in j["windows"]] == ["api.0", "api.1"]  # as the metrics name them
    names = {"allowed", "limited", "shadow_limited", "fail_open", "error", "rollout_limited",
             "fail_closed", "delayed", "recheck", "local", "local_limited"}
    for w in j["windows"]:
        assert set(w["series"]) == names
        assert all(len(a) == 5 for a in w["series"].values())
    s10 = j["windows"][0]["series"]
    # 20 admitted (burst), 10 limited, all in the current second (last element)
    assert s10["allowed"][-1] + j["windows"][1]["series"]["allowed"][-1] == 20
    assert s10["limited"][-1] == 10
    met = metrics(srv)
    assert decisions(met, "api") == 30
    # the next second: its own bucket; the totals still match /metrics
    advance(srv, 1000)
    for _ in range(4):
        check(srv, "api", "k2")
    j = requests.get(srv.admin + "/v1/series?policy=api&window=api.0&seconds=3", headers=AUTH, timeout=5).json()
    assert len(j["windows"]) == 1 and j["windows"][0]["window"] == "api.0"
    w = j["windows"][0]["series"]
    tot = sum(sum(a) for a in w.values())
    j2 = requests.get(srv.admin + "/v1/series?policy=api&seconds=3", headers=AUTH, timeout=5).json()
    tot2 = sum(sum(sum(a) for a in x["series"].values()) for x in j2["windows"])
    assert tot2 == decisions(metrics(srv), "api") == 34
    assert w["limited"] == [0, 10, 0] and tot <= tot2
    # hostile input: clear 4xx problems, never a crash
    for q, status in [("policy=nope", 404), ("", 400), ("policy=api&seconds=0", 400),
                      ("policy=api&seconds=-5", 400), ("policy=api&seconds=abc", 400),
                      ("policy=api&window=7/h", 404), ("policy=" + "x" * 1000, 400), ("policy=" + "x" * 50000, 414),
                      ("policy=api&seconds=" + "9" * 200, 200), ("policy=%00%ff", 404)]:
        r = requests.get(srv.admin + "/v1/series?" + q, headers=AUTH, timeout=5)
        assert r.status_code == status, (q, r.status_code, r.text[:200])
        if status != 200:
            assert r.headers["Content-Type"] == "application/problem+json"
    # garbage: never a crash or a hang, always an answer
    rnd = random.Random(3)
    for _ in range(200):
        q = "".join(rnd.choice("policy=api&seconds=window%0xZ9/+-;") for _ in range(rnd.randint(0, 60)))
        r = requests.get(srv.admin + "/v1/series?" + q, headers=AUTH, timeout=5)
        assert r.status_code in (200, 400, 404), (q, r.status_code)
    for body in (b"{", b"[]", b"null", b"\xff\xfe", b'{"policy": ["api"]}', b"x" * 20000):
        for path in ("/v1/state/reset", "/v1/config/check", "/v1/explain"):
            r = requests.post(srv.admin + path, data=body, headers=dict(AUTH, **{"Content-Type": "application/json"}),
                              timeout=5)
            # (/v1/explain reads a non-string "policy" as the request form, as it does on
            # the data listener: an explanation, 200)
            ok = (400, 413, 200) if path == "/v1/explain" and body.startswith(b'{"policy"') else (400, 413)
            assert r.status_code in ok, (path, body[:20], r.status_code)
    assert requests.get(srv.admin + "/healthz", timeout=5).status_code == 200
    # a huge `seconds` is answered with what the ring holds (900 s by default)
    j = requests.get(srv.admin + "/v1/series?policy=api&seconds=99999999999999999999", headers=AUTH,
                     timeout=5).json()
    assert len(j["windows"][0]["series"]["allowed"]) == 900
    # without a token: 401 on every data endpoint; the page itself loads
    for p in ("/v1/series?policy=api", "/v1/rejections", "/v1/policies", "/metrics", "/v1/top?policy=api",
              "/v1/audit"):
        r = requests.get(srv.admin + p, timeout=5)
        assert r.status_code == 401, p
        assert_security_headers(r)
    r = requests.get(srv.admin + "/ui/", timeout=5)
    assert r.status_code == 200 and "text/html" in r.headers["Content-Type"]
    assert_security_headers(r)
    assert "<script src=\"app.js\"" in r.text and "http" not in re.sub(r"<!--.*?-->", "", r.text, flags=re.S).split("<body>")[0].replace("http-equiv", "")
    assert requests.get(srv.admin + "/v1/whoami", timeout=5).json() == {
        "token_required": True, "authorized": False, "caller": None, "role": None}
    assert requests.get(srv.admin + "/v1/whoami", headers=RAUTH, timeout=5).json()["role"] == "read"


def test_every_admin_answer_has_room_for_its_headers(make_server):
    """Answers of every size, each on a fresh connection (the output buffer reserved for
    exactly one answer): the security headers never push one out (it was closed unanswered)."""
    srv = make_server(config_text=CONFIG)
    check(srv, "api", "a")
    sizes = set()
    for n in range(1, 901):  # bodies from 0.4 to 32.8 KB: across the buffer's 16 and 32 KB steps
        r = requests.get(srv.admin + "/v1/series?policy=api&seconds=%d" % n, headers=dict(AUTH, Connection="close"),
                         timeout=5)
        assert r.status_code == 200 and len(r.json()["windows"][0]["series"]["allowed"]) == n
        assert_security_headers(r)
        sizes.add(len(r.content))
    assert len(sizes) > 800 and min(sizes) < 16000 and max(sizes) > 32500
    for _ in range(3):
        r = requests.get(srv.admin + "/metrics", headers=dict(AUTH, Connection="close"), timeout=5)
        assert r.status_code == 200 and "sluice_decisions_total" in r.text


def test_series_ring_length_and_off(make_server):
    cfg = CONFIG.replace("log:\n", "observe:\n  series: {seconds: 60, series: 16}\nlog:\n")
    srv = make_server(config_text=cfg)
    check(srv, "api", "a")
    j = requests.get(srv.admin + "/v1/series?policy=api&seconds=900", headers=AUTH, timeout=5).json()
    assert len(j["windows"][0]["series"]["allowed"]) == 60
    assert j["windows"][0]["series"]["allowed"][-1] == 1
    # the clock jumps past the ring: nothing stale is shown
    advance(srv, 3600 * 1000)
    j = requests.get(srv.admin + "/v1/series?policy=api&seconds=60", headers=AUTH, timeout=5).json()
    assert sum(j["windows"][0]["series"]["allowed"]) == 0
    off = make_server(config_text=CONFIG.replace("log:\n", "observe:\n  series: {seconds: 0}\nlog:\n"))
    r = requests.get(off.admin + "/v1/series?policy=api", headers=AUTH, timeout=5)
    assert r.status_code == 409 and "observe.series" in r.json()["detail"]


def test_rejections(make_server):
    srv = make_server(config_text=CONFIG)
    for _ in range(25):
        check(srv, "api", "secret-customer-key")
    r = requests.get(srv.admin + "/v1/rejections?policy=api&n=3", headers=AUTH, timeout=5)
    assert r.status_code == 200
    j = r.json()
    assert j["raw_keys"] is False and len(j["rejections"]) == 3
    e = j["rejections"][0]
    assert e["policy"] == "api" and e["window"] == "api.0" and e["verdict"] == "limited"
    assert re.fullmatch(r"k:[0-9a-f]{16}", e["key_hash"]) and "key" not in e
    assert "secret-customer-key" not in r.text
    top = requests.get(srv.admin + "/v1/top?policy=api", headers=AUTH, timeout=5).json()
    assert top["keys"][0]["key_hash"] == e["key_hash"]  # the same key id as /v1/top
    # a key longer than the bytes an entry keeps: the same hash as /v1/top's all the same
    long_key = "L" * 300
    advance(srv, 1)  # newest first: by the decision's millisecond
    for _ in range(25):
        check(srv, "api", long_key)
    e2 = requests.get(srv.admin + "/v1/rejections?policy=api&n=1", headers=AUTH, timeout=5).json()["rejections"][0]
    top = requests.get(srv.admin + "/v1/top?policy=api", headers=AUTH, timeout=5).json()
    assert e2["key_hash"] in [k["key_hash"] for k in top["keys"]] and e2["key_hash"] != e["key_hash"]
    assert requests.get(srv.admin + "/v1/rejections?policy=login", headers=AUTH, timeout=5).json()["rejections"] == []
    for q, status in [("policy=nope", 404), ("n=0", 400), ("n=x", 400), ("n=" + "9" * 100, 200)]:
        assert requests.get(srv.admin + "/v1/rejections?" + q, headers=AUTH, timeout=5).status_code == status, q
    # raw keys allowed: the key is shown
    raw = make_server(config_text=CONFIG.replace("log:\n", "log:\n  raw_keys: true\n"))
    for _ in range(22):
        check(raw, "api", "shown-key")
    j = requests.get(raw.admin + "/v1/rejections", headers=AUTH, timeout=5).json()
    assert j["raw_keys"] is True and j["rejections"][0]["key"] == "shown-key"
    assert "key_truncated" not in j["rejections"][0]
    advance(raw, 1)
    for _ in range(22):
        check(raw, "api", "T" * 100)
    j = requests.get(raw.admin + "/v1/rejections?n=1", headers=AUTH, timeout=5).json()
    k = j["rejections"][0]["key"]
    assert k.startswith("T" * 60) and set(k) == {"T"} and j["rejections"][0]["key_truncated"] is True
    # the decision log off: a 409 problem, not an empty list
    off = make_server(config_text=CONFIG.replace("  decisions: {enabled: true}\n", "  level: info\n"))
    r = requests.get(off.admin + "/v1/rejections", headers=AUTH, timeout=5)
    assert r.status_code == 409 and "decision log" in r.json()["detail"]


def test_reset_roles_and_csrf(make_server):
    srv = make_server(config_text=CONFIG)
    for _ in range(21):
        check(srv, "api", "k-91")
    assert check(srv, "api", "k-91").status_code == 429
    body = {"policy": "api", "key": "k-91", "reason": "customer called <b>#4711</b>"}
    url = srv.admin + "/v1/state/reset"
    # a read token may read, not act
    r = requests.post(url, json=body, headers=RAUTH, timeout=5)
    assert r.status_code == 403 and "role: read" in r.json()["detail"]
    assert requests.post(srv.admin + "/v1/reload", headers=RAUTH, timeout=5).status_code == 403
    for m in ("PUT", "DELETE"):  # the overrides API (issue 21) is an action too
        r = requests.request(m, srv.admin + "/v1/overrides/api/k-91", json={"exempt": True, "reason": "r"},
                             headers=RAUTH, timeout=5)
        assert r.status_code == 403, (m, r.status_code)
    assert requests.get(srv.admin + "/v1/overrides?policy=api", headers=RAUTH, timeout=5).status_code == 200
    assert requests.post(srv.admin + "/v1/config/check", json={"yaml": "x: 1"}, headers=RAUTH,
                         timeout=5).status_code == 200  # changes nothing: reading
    # cross-site: refused (Origin of another site, or the browser's Sec-Fetch-Site)
    for h in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
              {"Origin": "http://127.0.0.1:1"}):
        r = requests.post(url, json=body, headers=dict(AUTH, **h), timeout=5)
        assert r.status_code == 403 and "cross-site" in r.json()["detail"], h
    # a body that is not declared JSON (what a form can send): 415
    r = requests.post(url, data=json.dumps(body), headers=dict(AUTH, **{"Content-Type": "text/plain"}), timeout=5)
    assert r.status_code == 415
    r = requests.post(url, data=json.dumps(body), headers=dict(AUTH, **{"Content-Type": ""}), timeout=5)
    assert r.status_code == 415
    assert check(srv, "api", "k-91").status_code == 429  # nothing was reset
    # bad bodies
    for b in ({}, {"policy": "api", "key": "k"}, {"policy": "api", "reason": "r"}, {"key": "k", "reason": "r"},
              {"policy": 7, "key": "k", "reason": "r"}, {"policy": "api", "key": "k", "reason": ""}):
        assert requests.post(url, json=b, headers=AUTH, timeout=5).status_code == 400, b
    assert requests.post(url, json={"policy": "nope", "key": "k", "reason": "r"}, headers=AUTH,
                         timeout=5).status_code == 404
    # same origin (the console) with an act token: done, audited under the token's name
    origin = "http://127.0.0.1:%d" % srv.admin_port
    r = requests.post(url, json=body, headers={"Authorization": "Bearer console-act-token-3", "Origin": origin},
                      timeout=5)
    assert r.status_code == 200 and r.json() == {"reset": True, "policy": "api", "windows": 2}
    assert_security_headers(r)
    assert check(srv, "api", "k-91").status_code == 200
    a = requests.get(srv.admin + "/v1/audit", headers=AUTH, timeout=5).json()["entries"][0]
    assert a["action"] == "reset" and a["caller"] == "oncall" and a["policy"] == "api"
    assert a["reason"] == body["reason"] and a["outcome"] == "ok" and a["detail"] == "2 windows reset"
    assert re.fullmatch(r"k:[0-9a-f]{16}", a["key"])  # hashed: raw keys are not allowed here
    assert "k-91" not in json.dumps(a)


def test_config_check_endpoint(make_server):
    srv = make_server(config_text=CONFIG)
    url = srv.admin + "/v1/config/check"
    good = "policies:\n  - name: x\n    key: [client_ip]\n    algorithm: gcra\n    limits: [{rate: 10/s}]\n"
    j = requests.post(url, json={"yaml": good}, headers=AUTH, timeout=5).json()
    assert j["valid"] is True and j["policies"] == 1 and j["errors"] == []
    bad = "policies:\n  - name: x\n    key: [client_ip]\n    algorithm: gcra\n    limits: [{rate: 0/s}]\n"
    j = requests.post(url, json={"yaml": bad}, headers=AUTH, timeout=5).json()
    assert j["valid"] is False and j["errors"][0]["line"] == 5 and j["errors"][0]["col"] > 0
    assert "0/s" in j["errors"][0]["message"]
    for junk in ("\x00\x01", "[[[", "a: b: c", "policies: 7", "x" * 100000):
        r = requests.post(url, json={"yaml": junk}, headers=AUTH, timeout=10)
        # a NUL is not text JSON carries (400, naming the form); a body over the limit 413
        assert r.status_code in (200, 400, 413), r.status_code
        assert r.status_code != 200 or r.json()["valid"] is False
        assert r.headers["Content-Type"] == ("application/json" if r.status_code == 200 else "application/problem+json")
    assert requests.post(url, json={"yml": good}, headers=AUTH, timeout=5).status_code == 400
    # nothing changed on the server
    assert [p["name"] for p in requests.get(srv.admin + "/v1/policies", headers=AUTH, timeout=5).json()["policies"]] == \
        ["api", "login", "beta", "strict"]


def test_admin_connection_budget(make_server):
    """Pollers beyond the admin listener's budget (64) are refused and counted; the data
    listeners go on answering."""
    srv = make_server(config_text=CONFIG)
    held = []
    try:
        for _ in range(64):
            s = socket.create_connection(("127.0.0.1", srv.admin_port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"200 OK" in s.recv(4096)
            held.append(s)
        refused = 0
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", srv.admin_port), timeout=5)
            try:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                if s.recv(4096) == b"":
                    refused += 1
            except ConnectionResetError:
                refused += 1
            s.close()
        assert refused == 10
        for i in range(50):  # the data listener is not affected
            assert check(srv, "api", "data-%d" % i).status_code == 200
    finally:
        for s in held:
            s.close()
    deadline = time.time() + 5
    while True:
        try:
            met = metrics(srv)
            break
        except requests.ConnectionError:
            assert time.time() < deadline
            time.sleep(0.05)
    assert met[("sluice_connections_refused_total", 'listener="admin"')] >= 10
    assert met[("sluice_connections_refused_total", 'listener="http"')] == 0


def test_ui_off(make_server):
    srv = make_server(config_text=CONFIG.replace("admin:\n", "admin:\n  ui: false\n"))
    r = requests.get(srv.admin + "/ui/", timeout=5)
    assert r.status_code == 404 and "admin.ui" in r.json()["detail"]
    assert requests.get(srv.admin + "/ui/app.js", timeout=5).status_code == 404
    assert requests.get(srv.admin + "/v1/series?policy=api", headers=AUTH, timeout=5).status_code == 200
    on = make_server(config_text=CONFIG)
    assert requests.get(on.admin + "/ui", allow_redirects=False, timeout=5).headers["Location"] == "/ui/"
    assert requests.post(on.admin + "/ui/", timeout=5).status_code == 405
    assert requests.get(on.admin + "/ui/../metrics", timeout=5).status_code in (401, 404)
    assert requests.get(on.admin + "/ui/nope.js", timeout=5).status_code == 404


# ---- the page in a browser ---------------------------------------------------------------------


class Traffic:
    """Live traffic on the data listener: a hot key over its limit, many light keys, some
    logins (shadow) and beta requests (rollout), until stopped (at most 180 s)."""

    def __init__(self, srv):
        self.srv = srv
        self.stop = threading.Event()
        self.sent = 0
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        s = requests.Session()
        rnd = random.Random(7)
        end = time.time() + 180
        while not self.stop.is_set() and time.time() < end:
            k = "hot-key" if rnd.random() < 0.4 else "light-%d" % rnd.randint(1, 40)
            try:
                s.post(self.srv.http + "/v1/check", json={"policy": "api", "key": k}, timeout=5)
                if rnd.random() < 0.2:
                    s.post(self.srv.http + "/v1/check", json={"method": "POST", "path": "/login", "headers": {"x-api-key": "web"},
                                                              "client_ip": "10.0.0.%d" % rnd.randint(1, 3)}, timeout=5)
                    s.post(self.srv.http + "/v1/check", json={"path": "/beta/x", "headers": {"x-api-key": "b%d" % rnd.randint(1, 4)}},
                           timeout=5)
                self.sent += 1
            except requests.RequestException:
                pass
            time.sleep(0.01)

    def close(self):
        self.stop.set()
        self.th.join(10)


def text(b, sel):
    return b.eval("(() => { const e = document.querySelector(%s); return e ? e.textContent : null; })()" % json.dumps(sel))


def test_console_in_browser(make_server):
    from cdp import Browser
    srv = make_server(config_text=CONFIG, test_clock=False)
    origin = "http://127.0.0.1:%d" % srv.admin_port
    traffic = Traffic(srv)
    b = Browser(1280, 800)
    try:
        time.sleep(3)  # a few seconds of traffic in the ring
        assert requests.post(srv.admin + "/v1/reload", headers={"Authorization": "Bearer console-act-token-3"},
                             timeout=10).status_code == 200
        b.goto(origin + "/ui/")
        # without the token: the prompt and nothing else
        b.wait("!document.getElementById('login').hidden", what="the token prompt")
        assert b.eval("document.getElementById('app').hidden && document.getElementById('nav').hidden")
        visible = b.eval("document.body.innerText")
        for name in ("api", "login", "beta", "Overview", "decisions"):
            assert not re.search(r"\b%s\b" % name, visible), (name, visible)
        first_load = [e for e in b.events if e["method"] == "Network.loadingFinished"]
        b.screenshot(os.path.join(IMG, "console-token.png"))
        # the token: typed, sent as a header, kept for the tab (sessionStorage), never in the URL
        b.eval("document.getElementById('token').value = %s; document.getElementById('login-form').requestSubmit(); 1"
               % json.dumps(TOKEN))
        b.wait("document.querySelector('#ov-policies tr[data-policy=beta]')", what="the overview")
        assert TOKEN not in b.eval("location.href") and b.eval("document.cookie") == ""
        assert b.eval("sessionStorage.getItem('sluice.admin_token')") == TOKEN
        # Overview: every policy; the totals between two scrapes of /metrics taken around a refresh
        m1 = metrics(srv)
        b.eval("window.__sluiceRefresh().then(() => 1)")
        m2 = metrics(srv)
        rows = b.eval("Array.from(document.querySelectorAll('#ov-policies tbody tr')).map(r => "
                      "Object.fromEntries(Array.from(r.children).map(c => [c.dataset.col, c.textContent])))")
        assert [r["policy"] for r in rows] == ["api", "login", "beta", "strict"]
        by = {r["policy"]: r for r in rows}
        assert by["api"]["mode"] == "enforced" and by["login"]["mode"] == "shadow" and by["beta"]["mode"] == "rollout 50 %"
        assert by["login"]["failure"] == "fail closed" and by["api"]["objective"] == "fairness"
        for p in ("api", "login", "beta", "strict"):
            ui = int(by[p]["total"])
            assert decisions(m1, p) <= ui <= decisions(m2, p), (p, decisions(m1, p), ui, decisions(m2, p))
        api_rate = float(by["api"]["rate"].replace(",", ""))
        assert api_rate > 5, by["api"]
        assert decisions(m2, "api") - decisions(m1, "api") <= api_rate * 3 + 50  # within a second's traffic or so
        assert by["api"]["ratio"].endswith("%") and float(by["api"]["ratio"].split()[0]) > 0
        assert int(by["login"]["total"]) > 0 and by["login"]["ratio"] == "0.0 %"  # shadow: never refuses
        shadow = sum(v for (n, l), v in m2.items() if n == "sluice_decisions_total" and 'policy="login"' in l
                     and 'result="shadow_limited"' in l)
        assert shadow > 0 and float(by["login"]["shadow"].split()[0]) > 0
        assert "ready" in text(b, "#ov-ready")
        reloads = b.eval("Array.from(document.querySelectorAll('#ov-reloads tbody tr')).map(r => r.textContent)")
        assert "admin-apiok1" in reloads and "startupok1" in reloads
        assert b.eval("Array.from(document.querySelectorAll('#ov-reload-log td[data-col=caller]')).map(c => c.textContent)")[0] == "oncall"
        assert text(b, "#ov-store td[data-col=errors]") == "none"
        b.screenshot(os.path.join(IMG, "console-overview.png"))
        # Policy: charts of every window, top consumers as /v1/top says, rejections
        b.eval("location.hash = '#policy/api'; 1")
        b.wait("document.querySelectorAll('#pol-charts .chart').length === 2 && "
               "document.querySelector('#pol-top tbody tr[data-key]') && "
               "document.querySelector('#pol-rej tbody tr td[data-col=key]')", what="the policy view")
        t1 = requests.get(srv.admin + "/v1/top?policy=api&n=10", headers=AUTH, timeout=5).json()
        b.eval("window.__sluiceRefresh().then(() => 1)")
        t2 = requests.get(srv.admin + "/v1/top?policy=api&n=10", headers=AUTH, timeout=5).json()
        top = b.eval("Array.from(document.querySelectorAll('#pol-top tbody tr')).map(r => "
                     "[r.dataset.key, +r.querySelector('[data-col=cost]').textContent, +r.querySelector('[data-col=rejections]').textContent])")
        assert top[0][0] == t1["keys"][0]["key_hash"] == t2["keys"][0]["key_hash"]  # the hot key first
        c1 = {k["key_hash"]: k for k in t1["keys"]}
        c2 = {k["key_hash"]: k for k in t2["keys"]}
        hot = top[0]
        lo, hi = sorted((c1[hot[0]]["cost"], c2[hot[0]]["cost"]))
        assert hot[1] > 0 and abs(hot[1] - lo) <= 30 and abs(hot[1] - hi) <= 30, (hot, lo, hi)
        assert hot[2] > 0  # the hot key is over its limit
        legend = b.eval("Object.fromEntries(Array.from(document.querySelectorAll('#pol-charts .chart')[0].querySelectorAll('[data-total]')).map(e => [e.dataset.total, +e.textContent]))")
        series = requests.get(srv.admin + "/v1/series?policy=api&window=api.0&seconds=900", headers=AUTH, timeout=5).json()
        s_allowed = sum(series["windows"][0]["series"]["allowed"])
        assert legend["allowed"] > 0 and legend["limited"] > 0
        assert 0 <= s_allowed - legend["allowed"] <= api_rate * 3 + 50
        assert text(b, "#pol-rej tbody tr td[data-col=verdict]") == "limited"
        assert text(b, "#pol-ovr tbody td.empty") == "no overrides"
        b.screenshot(os.path.join(IMG, "console-policy.png"), full=True)
        # Key: the XSS key stays text
        xss = '<img src=x onerror="window.__xss=1">'
        b.eval("location.hash = '#key'; 1")
        b.wait("!document.getElementById('view-key').hidden")
        b.eval("document.getElementById('key-policy').value = 'api'; document.getElementById('key-key').value = %s; "
               "document.getElementById('key-form').requestSubmit(); 1" % json.dumps(xss))
        b.wait("document.querySelector('#key-answer [data-col=key]')", what="the explanation")
        assert text(b, "#key-answer [data-col=key]") == xss
        b.pump(0.5)
        assert b.eval("window.__xss === undefined && document.querySelectorAll('img').length === 0")
        # Key: pasted request attributes: every policy that saw them, with its composed key
        b.eval("document.getElementById('key-attrs').value = %s; document.getElementById('key-attrs-go').click(); 1"
               % json.dumps(json.dumps({"path": "/beta/x", "headers": {"x-api-key": "b1"}})))
        b.wait("document.querySelector('#key-out .explain[data-policy=beta]')", what="the attributes' explanation")
        pols = b.eval("Array.from(document.querySelectorAll('#key-out .explain[data-policy]')).map(e => [e.dataset.policy, e.dataset.matched])")
        assert pols == [["api", "yes"], ["login", "no"], ["beta", "yes"], ["strict", "no"]], pols
        assert b.eval("document.getElementById('key-actions').hidden")  # actions need a policy and key
        # Key: a limited key, reset through the page; the next decision changes
        for _ in range(3):
            check(srv, "strict", "reset-me")
        assert check(srv, "strict", "reset-me").status_code == 429
        b.eval("document.getElementById('key-policy').value = 'strict'; "
               "document.getElementById('key-key').value = 'reset-me'; document.getElementById('key-form').requestSubmit(); 1")
        b.wait("document.querySelector('#key-answer [data-col=key]') && "
               "document.querySelector('#key-answer [data-col=key]').textContent === 'reset-me' && "
               "document.querySelector('#key-answer [data-col=action]').textContent.startsWith('reject')", what="explain reset-me")
        b.screenshot(os.path.join(IMG, "console-key.png"), full=True)
        b.eval("document.getElementById('act-reset').click(); 1")
        b.wait("document.getElementById('dlg').open", what="the reason dialog")
        b.eval("document.getElementById('dlg-reason').value = 'ticket 4711: customer locked out'; "
               "document.getElementById('dlg-ok').click(); 1")
        b.wait("document.getElementById('act-result').textContent.startsWith('reset:')", what="the reset's answer")
        assert check(srv, "strict", "reset-me").status_code == 200
        entries = requests.get(srv.admin + "/v1/audit", headers=AUTH, timeout=5).json()["entries"]
        mine = [e for e in entries if e.get("action") == "reset" and e["reason"] == "ticket 4711: customer locked out"]
        assert mine and mine[0]["caller"] == "admin" and mine[0]["outcome"] == "ok"
        # Key: an override set through the page (issue 21's API) changes the next decision
        for _ in range(3):
            check(srv, "strict", "vip-key")
        assert check(srv, "strict", "vip-key").status_code == 429
        b.eval("document.getElementById('key-key').value = 'vip-key'; document.getElementById('key-form').requestSubmit(); 1")
        b.wait("document.querySelector('#key-override [data-col=override]') && "
               "document.querySelector('#key-answer [data-col=key]').textContent === 'vip-key'", what="explain vip-key")
        assert text(b, "#key-override [data-col=override]") == "none"
        b.eval("document.getElementById('act-ovr-set').click(); 1")
        b.wait("document.getElementById('dlg').open && document.getElementById('ovr-kind')", what="the override dialog")
        b.eval("document.getElementById('ovr-kind').value = 'exempt'; document.getElementById('ovr-label').value = %s; "
               "document.getElementById('dlg-reason').value = 'launch week'; document.getElementById('dlg-ok').click(); 1"
               % json.dumps("ACME <b>launch</b>"))
        b.wait("document.getElementById('act-result').textContent === 'override set'", what="the override's answer")
        assert text(b, "#key-override [data-col=override]").startswith("exempt — ACME <b>launch</b>")
        assert b.eval("document.querySelectorAll('#view-key b').length") == 0  # the label stays text
        assert check(srv, "strict", "vip-key").status_code == 200  # the next decision changed
        got = requests.get(srv.admin + "/v1/overrides/strict/vip-key", headers=AUTH, timeout=5).json()
        assert got["exempt"] is True and got["reason"] == "launch week" and got["set_by"] == "admin"
        b.screenshot(os.path.join(IMG, "console-key-override.png"), full=True)
        b.eval("document.getElementById('act-ovr-rm').click(); 1")
        b.wait("document.getElementById('dlg').open", what="the removal dialog")
        b.eval("document.getElementById('dlg-reason').value = 'launch over'; document.getElementById('dlg-ok').click(); 1")
        b.wait("document.getElementById('act-result').textContent === 'override removed'", what="the removal's answer")
        assert requests.get(srv.admin + "/v1/overrides/strict/vip-key", headers=AUTH, timeout=5).status_code == 404
        assert check(srv, "strict", "vip-key").status_code == 429  # back to its own limit
        b.eval("location.hash = '#policy/strict'; 1")
        b.wait("document.querySelector('#pol-ovr tbody td.empty')", what="no overrides left in the policy view")
        # Changes: the audit trail with the reset and who did it; config with file:line; the check box
        b.eval("location.hash = '#changes'; 1")
        b.wait("document.querySelector('#ch-audit tr[data-action=reset]')", what="the audit trail")
        row = b.eval("(() => { const r = document.querySelector('#ch-audit tr[data-action=reset]'); return "
                     "[r.querySelector('[data-col=caller]').textContent, r.querySelector('[data-col=reason]').textContent, "
                     "r.querySelector('[data-col=what]').textContent]; })()")
        assert row[0] == "admin" and row[1] == "ticket 4711: customer locked out" and row[2].startswith("reset strict k:")
        ovr_rows = b.eval("Array.from(document.querySelectorAll('#ch-audit tr[data-action=override]')).map(r => "
                          "[r.querySelector('[data-col=caller]').textContent, r.querySelector('[data-col=what]').textContent])")
        assert len(ovr_rows) == 2 and all(r[0] == "admin" for r in ovr_rows)
        assert "-> none" in ovr_rows[0][1] and "launch week" in ovr_rows[1][1] and "none ->" in ovr_rows[1][1]
        cfg_rows = b.eval("Array.from(document.querySelectorAll('#ch-config tbody tr')).map(r => [r.dataset.policy, r.querySelector('[data-col=source]').textContent])")
        assert [r[0] for r in cfg_rows] == ["api", "login", "beta", "strict"] and all(re.search(r"\.yaml:\d+$", r[1]) for r in cfg_rows)
        b.eval("document.getElementById('ch-yaml').value = %s; document.getElementById('ch-check').click(); 1" %
               json.dumps("policies:\n  - name: x\n    key: [client_ip]\n    algorithm: gcra\n    limits: [{rate: 0/s}]\n"))
        b.wait("document.getElementById('ch-verdict')", what="the check's answer")
        assert re.match(r"5:\d+: rate 0/s", text(b, "#ch-result li"))
        b.screenshot(os.path.join(IMG, "console-changes.png"), full=True)
        # a phone
        b.viewport(390, 844, mobile=True, scale=2)
        b.eval("location.hash = '#overview'; 1")
        b.eval("window.__sluiceRefresh().then(() => 1)")
        assert b.eval("document.documentElement.scrollWidth") <= 390 + 1  # no sideways page scroll
        b.screenshot(os.path.join(IMG, "console-phone.png"))
        # nothing left for another origin; no console error (404s of the overrides API's
        # contract paths are the answers the page reads, not errors of the page)
        for u in b.requests():
            assert u.startswith(origin + "/") or u.startswith("data:") or u == "about:blank", u
        errs = [e for e in b.console_errors()
                if not re.search(r"status of 404 .*/v1/overrides", e)]
        assert errs == [], errs
        # a read token: the page shows everything, and its actions are off
        b.viewport(1280, 800)
        b.eval("sessionStorage.clear(); location.hash = '#key'; location.reload(); 1")
        b.pump(1)
        b.wait("!document.getElementById('login').hidden", what="the prompt again (new page, no token)")
        b.eval("document.getElementById('token').value = %s; document.getElementById('login-form').requestSubmit(); 1"
               % json.dumps(READ_TOKEN))
        b.wait("!document.getElementById('app').hidden && document.getElementById('who').textContent.includes('read')")
        b.eval("document.getElementById('key-policy').value = 'strict'; document.getElementById('key-key').value = 'x'; "
               "document.getElementById('key-form').requestSubmit(); 1")
        b.wait("document.getElementById('act-reset').disabled && "
               "document.getElementById('act-result').textContent.includes('role: read')", what="actions off for a read token")
        weight = sum(e["params"]["encodedDataLength"] for e in first_load)
        print("console first load: %d bytes over %d responses" % (weight, len(first_load)))
        assert weight < 100000
    finally:
        b.close()
        traffic.close()
