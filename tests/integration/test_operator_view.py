# SPDX-License-Identifier: Apache-2.0
"""What an operator sees at 3 a.m. (issue 26): `sluice serve` on free loopback ports.

- the default rejection summary: per policy every log.rejections.every, how many were
  refused, about how many keys, the top keys as hashes (never raw), the top client
  networks; off with log.rejections: off;
- missing-key 400s logged (rate-limited) and counted in sluice_bad_requests_total;
- every stderr line through the logger in JSON format (Redis down, a password in the
  store URL, a TLS failure), decision lines left out under log.level: warn, sd-daemon
  priority prefixes when JOURNAL_STREAM names stderr;
- the `window` label is the window's name (two windows of one rate told apart),
  sluice_window_info gives the rate, RLS calls matching no rule count under
  policy="(no rule)", the old reload counters say they are deprecated.
"""
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time

import requests

from conftest import BIN, Client, Server, await_ports, free_port, note_raw_key


def wait_for(pred, timeout=10.0, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def json_lines(text):
    """Every line parsed as JSON (an assertion names the first that is not)."""
    out = []
    for ln in text.splitlines():
        if not ln.strip():
            continue
        try:
            out.append(json.loads(ln))
        except ValueError:
            raise AssertionError("not a JSON line: %r" % ln)
    return out


def auth(srv, uri, **headers):
    h = {"X-Original-URI": uri}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    return requests.get(srv.http + "/v1/auth", headers=h, timeout=5)


def metric(text, name, **labels):
    want = ",".join('%s="%s"' % kv for kv in labels.items())
    for ln in text.splitlines():
        if ln.startswith(name + "{" + want + "}") or (not labels and ln.startswith(name + " ")):
            return float(ln.rsplit(" ", 1)[1])
    return None


SUMMARY = """
workers: 2
log:
  format: json
  rejections: { every: 1s, top: 2 }
policies:
  - name: login
    objective: protection
    match: { path_prefix: /login }
    key: [header.x-user]
    algorithm: fixed_window
    limits: [ { rate: 1/h } ]
  - name: api
    objective: fairness
    match: { path_prefix: /api }
    key: [header.x-key]
    on_missing_key: reject
    algorithm: fixed_window
    limits: [ { rate: 2/h } ]
"""


def test_rejection_summary_per_policy_with_counts_and_no_raw_key():
    s = Server(config_text=SUMMARY, workers=2, test_clock=False)
    try:
        note_raw_key("op-mallory", "op-key-a", "op-key-b")
        # login: mallory from 10.9.8.7 refused 6 times (1 admitted), api: two keys refused 3+1
        codes = [auth(s, "/login", x_user="op-mallory", x_forwarded_for="10.9.8.7").status_code
                 for _ in range(7)]
        assert codes == [200] + [429] * 6, codes
        codes = [auth(s, "/api/x", x_key="op-key-a", x_forwarded_for="2001:db8:1:2::5").status_code
                 for _ in range(5)]
        codes += [auth(s, "/api/x", x_key="op-key-b", x_forwarded_for="192.0.2.44").status_code
                  for _ in range(3)]
        assert codes == [200, 200, 429, 429, 429, 200, 200, 429], codes
        lines = wait_for(lambda: [x for x in json_lines(s.output()) if x["event"] == "rejections"]
                         if {"login", "api"} <= {x.get("policy") for x in json_lines(s.output())
                                                  if x["event"] == "rejections"} else None,
                         timeout=6)
        assert lines, s.output()
    finally:
        s.stop()
    s.assert_clean()
    lines = [x for x in json_lines(s.output()) if x["event"] == "rejections"]
    by = {}
    for x in lines:
        by.setdefault(x["policy"], []).append(x)
    # all the refusals fell in one or two intervals: the sums are exact
    assert sum(x["rejected"] for x in by["login"]) == 6
    assert sum(x["rejected"] for x in by["api"]) == 4
    login, api = by["login"][0], by["api"][0]
    assert login["level"] == "warn" and 0 < login["interval"] <= 1.5  # 1 s, or the part at stop
    assert login["distinct_keys"] == 1
    hashes = re.findall(r"k:[0-9a-f]{16}=\d+", login["top_keys"])
    assert len(hashes) == 1 and hashes[0].endswith("=%d" % login["rejected"]), login
    assert login["top_clients"] == "10.9.8.0/24=%d" % login["rejected"]
    if len(by["api"]) == 1:
        assert api["distinct_keys"] == 2
        assert re.fullmatch(r"k:[0-9a-f]{16}=3 k:[0-9a-f]{16}=1", api["top_keys"]), api
        assert api["top_clients"] == "2001:db8:1::/48=3 192.0.2.0/24=1", api
    text = s.output()
    for raw in ("op-mallory", "op-key-a", "op-key-b", "10.9.8.7", "192.0.2.44"):
        assert raw not in text


def test_rejection_summary_off():
    s = Server(config_text=SUMMARY.replace("{ every: 1s, top: 2 }", "off"), workers=1,
               test_clock=False)
    try:
        note_raw_key("op-off")
        for _ in range(3):
            auth(s, "/login", x_user="op-off")
        time.sleep(1.5)
    finally:
        s.stop()
    s.assert_clean()
    assert not [x for x in json_lines(s.output()) if x["event"] == "rejections"]


def test_missing_key_400_is_logged_and_counted():
    s = Server(config_text=SUMMARY.replace("  rejections: { every: 1s, top: 2 }\n", ""), workers=1,
               test_clock=False)
    try:
        for _ in range(30):
            assert auth(s, "/api/x").status_code == 400
        m = requests.get(s.admin + "/metrics", timeout=5).text
        assert metric(m, "sluice_bad_requests_total", reason="missing_key") == 30
        assert metric(m, "sluice_bad_requests_total", reason="parse") == 0
        # still under the policy's result error, as before
        assert metric(m, "sluice_decisions_total", policy="api", result="error", window="") == 30
    finally:
        s.stop()
    s.assert_clean()
    mk = [x for x in json_lines(s.output()) if x["event"] == "missing_key"]
    lines = [x for x in mk if "suppressed" not in x]
    # rate-limited: 1 line/s with a burst of 5, the rest summarised (not 30 lines)
    assert 1 <= len(lines) <= 7 and lines[0]["policy"] == "api" and lines[0]["level"] == "warn"
    assert len(lines) + sum(x.get("suppressed", 0) for x in mk) == 30


def _serve(config_text, extra=(), env=None, stderr_path=None, ports=True):
    """A sluice serve of our own (the env and stderr are the test's): (proc, dir, http)."""
    d = tempfile.mkdtemp(prefix="sluice-op-")
    cfg = os.path.join(d, "sluice.yaml")
    with open(cfg, "w") as f:
        f.write(config_text)
    http = free_port()
    err = open(stderr_path or os.path.join(d, "stderr.log"), "w")
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen([BIN, "serve", "-c", cfg, "--http", "127.0.0.1:%d" % http, "--resp", "-",
                          "--admin", "-", "--grpc", "-", "--workers", "1"] + list(extra),
                         cwd=d, env=e, stdout=err, stderr=err)
    if ports:
        assert await_ports(p, [http], 10), open(err.name).read()
    return p, err, http


def _stop(p, err):
    if p.poll() is None:
        p.terminate()
        p.wait(15)
    err.close()
    with open(err.name) as f:
        text = f.read()
    assert "Sanitizer" not in text and "runtime error:" not in text, text[-3000:]
    return text


JSON_CFG = """
log: { format: json }
policies:
  - name: one
    objective: fairness
    key: [header.x-key]
    algorithm: fixed_window
    limits: [ { rate: 1/min } ]
"""


def _garbage_server():
    """A TCP listener that answers every connection with bytes that are not TLS."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    ls.settimeout(0.2)
    stop = threading.Event()

    def run():
        while not stop.is_set():
            try:
                c, _ = ls.accept()
            except OSError:
                continue
            try:
                c.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n" * 4)
                time.sleep(0.05)
            except OSError:
                pass
            c.close()
        ls.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return ls.getsockname()[1], stop, t


def test_json_format_every_stderr_line_is_json_redis_down_password_tls():
    port = free_port()  # nothing listens there: Redis down
    p, err, http = _serve(JSON_CFG, extra=["--store", "redis://:op-hunter2@127.0.0.1:%d" % port])
    note_raw_key("op-hunter2")
    try:
        assert auth(type("S", (), {"http": "http://127.0.0.1:%d" % http})(), "/", x_key="k").status_code in (200, 429, 503)
        time.sleep(0.8)
    finally:
        text = _stop(p, err)
    lines = json_lines(text)
    redis = [x for x in lines if x["event"] == "store_redis"]
    msgs = " | ".join(x["msg"] for x in redis)
    assert "the store URL holds a password" in msgs and "Connection refused" in msgs, text
    assert all(x["level"] == "warn" for x in redis)
    assert "op-hunter2" not in text
    # TLS: a server that does not speak TLS
    gport, stop, t = _garbage_server()
    try:
        p, err, http = _serve(JSON_CFG, extra=["--store", "rediss://127.0.0.1:%d" % gport])
        time.sleep(1.0)
        text = _stop(p, err)
    finally:
        stop.set()
        t.join(5)
    lines = json_lines(text)
    tls = [x for x in lines if x["event"] == "store_redis"]
    assert tls and any("tls" in x["msg"].lower() or "ssl" in x["msg"].lower() for x in tls), text
    # a start that fails after the config was read: said in its format too
    p, err, _ = _serve(JSON_CFG, extra=["--http", "256.0.0.1:1"], ports=False)
    p.wait(10)
    text = _stop(p, err)
    assert p.returncode == 1
    lines = json_lines(text)
    assert lines and lines[-1]["level"] == "error" and lines[-1]["event"] == "start_failed", text


def test_warn_level_leaves_decision_lines_out():
    cfg = JSON_CFG.replace("log: { format: json }",
                           "log: { format: json, level: warn, decisions: { enabled: true, "
                           "rejections_only: false } }")
    p, err, http = _serve(cfg)
    srv = type("S", (), {"http": "http://127.0.0.1:%d" % http})()
    note_raw_key("op-lvl")
    try:
        for _ in range(4):
            auth(srv, "/", x_key="op-lvl")
        time.sleep(0.3)
    finally:
        text = _stop(p, err)
    lines = json_lines(text)  # (nothing at all here: no warning to give)
    assert all(x["level"] in ("warn", "error") for x in lines), text
    assert not [x for x in lines if x["event"] == "decision"]
    # at info the same traffic makes decision lines
    p, err, http = _serve(cfg.replace("level: warn", "level: info"))
    srv = type("S", (), {"http": "http://127.0.0.1:%d" % http})()
    try:
        for _ in range(4):
            auth(srv, "/", x_key="op-lvl")
        time.sleep(0.3)
    finally:
        text = _stop(p, err)
    assert [x for x in json_lines(text) if x["event"] == "decision"]


def test_journal_priority_prefixes_when_journal_stream_names_stderr():
    d = tempfile.mkdtemp(prefix="sluice-journal-")
    path = os.path.join(d, "journal.log")
    open(path, "w").close()
    st = os.stat(path)
    cfg = JSON_CFG.replace("log: { format: json }", "log: { format: text }")
    p, err, http = _serve(cfg, extra=["--store", "redis://127.0.0.1:%d" % free_port()],
                          env={"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}, stderr_path=path)
    time.sleep(0.6)
    text = _stop(p, err)
    lines = [ln for ln in text.splitlines() if ln]
    assert lines and all(re.match(r"<[3467]>\d{4}-", ln) for ln in lines), text
    assert any(ln.startswith("<6>") and " info start" in ln for ln in lines), text
    assert any(ln.startswith("<4>") and " warn store_redis" in ln for ln in lines), text
    # JSON keeps one JSON object after the prefix
    p, err, http = _serve(JSON_CFG, env={"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)},
                          stderr_path=path)
    time.sleep(0.2)
    text = _stop(p, err)
    for ln in [x for x in text.splitlines() if x]:
        m = re.match(r"<([3467])>(\{.*\})$", ln)
        assert m, ln
        assert {"3": "error", "4": "warn", "6": "info", "7": "debug"}[m.group(1)] == json.loads(m.group(2))["level"]
    # JOURNAL_STREAM naming another stream (inherited, stderr redirected): no prefix
    p, err, http = _serve(JSON_CFG, env={"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino + 1)})
    time.sleep(0.2)
    text = _stop(p, err)
    json_lines(text)


WINDOWS = """
workers: 1
policies:
  - name: burst
    objective: fairness
    key: [header.x-key]
    algorithm: fixed_window
    limits: [ { rate: 2/s }, { rate: 2/s, name: second }, { rate: 100/min } ]
"""


def test_window_label_is_the_window_name():
    s = Server(config_text=WINDOWS, workers=1)
    try:
        note_raw_key("op-w")
        for _ in range(3):
            auth(s, "/", x_key="op-w")
        m = requests.get(s.admin + "/metrics", timeout=5).text
    finally:
        s.stop()
    s.assert_clean()
    names = set(re.findall(r'sluice_window_info\{policy="burst",window="([^"]+)",rate="([^"]+)"\} 1', m))
    assert names == {("burst.0", "2/s"), ("second", "2/s"), ("burst.2", "100/min")}, m
    decided = re.findall(r'sluice_decisions_total\{policy="burst",result="(\w+)",window="([^"]+)"\} (\d+)', m)
    assert decided and all(w in ("burst.0", "second", "burst.2") for _, w, _ in decided), decided
    assert 'window="2/s"' not in m


RLS = """
workers: 1
domains:
  - domain: edge
    descriptors:
      - key: path
        value: /a
        rate_limit: { unit: minute, requests_per_unit: 5 }
policies: []
"""


def test_rls_call_matching_no_rule_counts_under_no_rule(pb):
    s = Server(config_text=RLS, workers=1)
    try:
        c = Client(pb, s)
        assert c.check("edge", [[("path", "/nowhere")]]).overall_code == 1  # OK
        assert c.check("edge", [[("path", "/a")]]).overall_code == 1
        m = requests.get(s.admin + "/metrics", timeout=5).text
    finally:
        s.stop()
    s.assert_clean()
    assert 'sluice_decisions_total{policy="(no rule)",result="allowed",window=""} 1' in m, m
    assert 'policy="",' not in m
    # one reload family: the old pair says it is deprecated, and agrees
    assert "# HELP sluice_config_load_success_total Deprecated" in m
    ok = sum(float(x) for x in re.findall(r'sluice_reloads_total\{source="[^"]+",outcome="ok"\} (\d+)', m))
    assert metric(m, "sluice_config_load_success_total") == ok == 1


RLS_ADDR = """
workers: 1
log: { format: json, rejections: { every: 1s } }
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: { unit: minute, requests_per_unit: 1 }
policies: []
"""


def test_rejection_summary_names_the_remote_address_of_rls_calls(pb):
    s = Server(config_text=RLS_ADDR, workers=1, test_clock=False)
    try:
        note_raw_key("198.51.100.7")
        c = Client(pb, s)
        codes = [c.check("edge", [[("remote_address", "198.51.100.7")]]).overall_code for _ in range(4)]
        assert codes == [1, 2, 2, 2], codes  # OK, then OVER_LIMIT
        line = wait_for(lambda: [x for x in json_lines(s.output()) if x["event"] == "rejections"], 6)
    finally:
        s.stop()
    s.assert_clean()
    assert line and line[0]["rejected"] == 3 and line[0]["top_clients"] == "198.51.100.0/24=3", line
    assert "198.51.100.7" not in s.output()


def test_distinct_keys_is_a_bounded_estimate():
    """2000 keys refused over RESP (no client address there): the count is exact, the
    distinct-key estimate within 50 % (a 64-register HyperLogLog: 13 % standard error),
    never more than the refusals; no top_clients field without addresses."""
    s = Server(config_text=SUMMARY.replace("every: 1s", "every: 2s"), workers=2, test_clock=False)
    n = 2000
    try:
        c = s.resp()
        for i in range(n):  # a first check is admitted, the second refused
            for _ in range(2):
                c.command("SL.CHECK", "login", "op-many-%d" % i)
        c.close()
        line = wait_for(lambda: [x for x in json_lines(s.output()) if x["event"] == "rejections"], 8)
    finally:
        s.stop()
    s.assert_clean()
    lines = [x for x in json_lines(s.output()) if x["event"] == "rejections"]
    assert sum(x["rejected"] for x in lines) == n, lines
    big = max(lines, key=lambda x: x["rejected"])
    assert "top_clients" not in big
    est, got = big["distinct_keys"], big["rejected"]
    assert 0.5 * got <= est <= got, (est, got)
    assert "op-many-" not in s.output()


def test_every_refusing_policy_gets_its_line():
    """150 policies refusing in one interval: 150 lines, none lost to the per-event rate
    limit (whose default burst is 100)."""
    n = 150
    pols = "".join("  - { name: p%d, objective: protection, match: { path_prefix: /p%d/ }, key: [], "
                   "algorithm: fixed_window, limits: [ { rate: 1/h } ] }\n" % (i, i) for i in range(n))
    s = Server(config_text="workers: 1\nlog: { format: json, rejections: { every: 2s } }\n"
                           "policies:\n" + pols, workers=1, test_clock=False)
    try:
        c = s.resp()
        for i in range(n):
            for _ in range(2):
                c.command("SL.CHECK", "p%d" % i, "")
        c.close()
        wait_for(lambda: len({x["policy"] for x in json_lines(s.output())
                              if x["event"] == "rejections"}) >= n, 8)
    finally:
        s.stop()
    s.assert_clean()
    lines = [x for x in json_lines(s.output()) if x["event"] == "rejections"]
    assert {x["policy"] for x in lines if "policy" in x} == {"p%d" % i for i in range(n)}
    assert sum(x.get("rejected", 0) for x in lines) == n
    assert not [x for x in lines if "suppressed" in x]
