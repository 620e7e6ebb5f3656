# SPDX-License-Identifier: Apache-2.0
"""The server's life: startup errors (one line, exit 1), reload by POST /v1/reload and
SIGHUP under load without losing a counter, an invalid config refused with its errors
while the old one keeps serving, and a graceful SIGTERM drain."""
import os
import signal
import socket
import subprocess
import threading
import time

import requests

from conftest import BIN, TEST_CONFIG, Server, as_dict, free_port


def run_serve(*args, timeout=10):
    return subprocess.run([BIN, "serve"] + list(args), capture_output=True, text=True, timeout=timeout)


def free_listeners(*given):
    """--http, --resp, --grpc and --admin on free loopback ports, except the listeners
    named in `given`: a startup case must fail for its own reason, never because a
    default port (8080, 6380, 8081, 8082) happens to be taken on this machine."""
    out = []
    for name in ("http", "resp", "grpc", "admin"):
        if name not in given:
            out += ["--" + name, "127.0.0.1:%d" % free_port()]
    return out


def test_startup_errors_are_one_line_with_their_exit_status(tmp_path):
    """Runtime problems exit 1, usage errors (an unknown flag, a bad value, from a flag or
    its variable) exit 2; each is one line on stderr."""
    cfg = tmp_path / "ok.yaml"
    cfg.write_text(TEST_CONFIG)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    free = free_listeners()
    cases = [
        (["-c", str(cfg), "--http", "127.0.0.1:%d" % port] + free_listeners("http"),
         "address already in use", 1, None),
        (["-c", str(tmp_path / "missing.yaml")] + free, "cannot read config file", 1, None),
        (["-c", str(cfg), "--bogus"] + free, "unknown option '--bogus'", 2, None),
        (["-c", str(cfg), "--workers", "many"] + free, "--workers", 2, None),
        (["-c", str(cfg), "--workers=65"] + free, "--workers", 2, None),
        (["-c", str(cfg)] + free + ["--log-level"], "missing value after '--log-level'", 2, None),
        (["-c", str(cfg), "stray"] + free, "unexpected argument 'stray'", 2, None),
        (["-c", str(cfg)] + free, "SLUICE_MAX_CONNS", 2, {"SLUICE_MAX_CONNS": "lots"}),
        (["-c", str(cfg), "--grpc", "127.0.0.1:%d" % port] + free_listeners("grpc"),
         "cannot listen on grpc address", 1, None),
        (["-c", str(cfg), "--http", "nonsense"] + free_listeners("http"), "invalid http address", 1, None),
        (["-c", str(cfg), "--store", "redis://127.0.0.1:99999"] + free, "bad store URL", 1, None),
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies:\n  - name: x\n    objective: fairness\n    algorithm: nope\n")
    cases.append((["-c", str(bad)] + free, "bad.yaml:", 1, None))
    for args, text, code, env in cases:
        e = dict(os.environ, **env) if env else None
        r = subprocess.run([BIN, "serve"] + args, capture_output=True, text=True, timeout=10, env=e)
        assert r.returncode == code, (args, r.returncode, r.stderr)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and text in lines[0], (args, r.stderr)
    busy.close()


def test_flags_take_both_forms_and_every_flag_has_a_variable(tmp_path):
    """--opt=value and --opt value, short forms, SLUICE_* variables (a flag wins over
    its variable), workers 0 meaning one per CPU, as the config's workers: 0."""
    cfg = tmp_path / "ok.yaml"
    cfg.write_text(TEST_CONFIG)
    http, admin, resp = free_port(), free_port(), free_port()
    env = dict(os.environ, SLUICE_HTTP="127.0.0.1:%d" % free_port(), SLUICE_ADMIN="127.0.0.1:%d" % admin,
               SLUICE_GRPC="off", SLUICE_TEST_CLOCK="1", SLUICE_LOG_FORMAT="json")
    p = subprocess.Popen([BIN, "serve", "-c%s" % cfg, "--http=127.0.0.1:%d" % http, "--resp",
                          "127.0.0.1:%d" % resp, "-w", "0"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 10
        ok = False
        while time.time() < deadline and not ok and p.poll() is None:
            try:
                ok = requests.get("http://127.0.0.1:%d/healthz" % http, timeout=1).status_code == 200
            except requests.RequestException:
                time.sleep(0.05)
        assert ok  # the flag's port, not the variable's
        # the variables applied: the test clock moves, the admin port answers
        r = requests.post("http://127.0.0.1:%d/v1/clock" % admin, json={"advance_ms": 5}, timeout=5)
        assert r.status_code == 200, r.text
    finally:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=15)
    assert p.returncode == 0, out
    assert '"event":"start"' in out  # SLUICE_LOG_FORMAT=json


def test_config_search_path_says_which_file(tmp_path):
    """Without -c: ./sluice.yaml, then $SLUICE_CONFIG; the line says which was used."""
    (tmp_path / "a").mkdir()
    env = dict(os.environ)
    env.pop("SLUICE_CONFIG", None)
    r = subprocess.run([BIN, "serve", "--grpc", "off"], cwd=tmp_path / "a", capture_output=True, text=True,
                       timeout=10, env=env)
    if r.returncode == 1 and "no config file" in r.stderr:  # no installed config on this machine
        assert "./sluice.yaml" in r.stderr and "-c FILE" in r.stderr
    other = tmp_path / "other.yaml"
    other.write_text(TEST_CONFIG)
    for where, envv in (("cwd", None), ("env", str(other))):
        d = tmp_path / where
        d.mkdir()
        if where == "cwd":
            (d / "sluice.yaml").write_text(TEST_CONFIG)
        e = dict(env)
        if envv:
            e["SLUICE_CONFIG"] = envv
        p = subprocess.Popen([BIN, "serve"] + free_listeners(), cwd=d, env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=15)
        assert p.returncode == 0, out
        want = "the working directory's config sluice.yaml" if where == "cwd" else "$SLUICE_CONFIG's config " + envv
        assert want in out, out


def sig_blocked(pid, sig):
    """Whether process pid blocks signal sig (its SigBlk in /proc)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    return int(line.split()[1], 16) >> (sig - 1) & 1 == 1
    except OSError:
        pass
    return False


def test_signals_during_the_start_neither_kill_nor_get_lost(tmp_path):
    """A SIGHUP sent while the server is still starting (loading a large config, before
    any listener is open) does not kill it: the server takes its signals from the first
    instant of its own code. The SIGHUP is then a reload; a SIGTERM stops it cleanly."""
    pol = "".join("  - name: p%d\n    match: {path: /p%d}\n    key: [header.x-k]\n    algorithm: gcra\n"
                  "    limits: [ { rate: %d/s } ]\n" % (i, i, 10 + i) for i in range(3000))
    cfg = tmp_path / "big.yaml"
    cfg.write_text("policies:\n" + pol)
    admin = free_port()
    args = [BIN, "serve", "-c", str(cfg)] + free_listeners("admin") + ["--admin", "127.0.0.1:%d" % admin]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # the window: the process blocks SIGHUP but listens on nothing yet
        deadline, sent = time.time() + 10, False
        while time.time() < deadline and p.poll() is None and not sent:
            if sig_blocked(p.pid, signal.SIGHUP):
                listening = True
                try:
                    socket.create_connection(("127.0.0.1", admin), timeout=0.2).close()
                except OSError:
                    listening = False
                if listening:
                    break  # too late: started already
                p.send_signal(signal.SIGHUP)
                sent = True
        assert sent, "never saw the server starting with its signals blocked"
        deadline, up = time.time() + 20, False
        while time.time() < deadline and p.poll() is None and not up:
            try:
                up = requests.get("http://127.0.0.1:%d/healthz" % admin, timeout=1).status_code == 200
            except requests.RequestException:
                time.sleep(0.05)
        assert up and p.poll() is None, "killed by a SIGHUP during the start"
    finally:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, out
    assert "reload" in out  # the SIGHUP was not lost: it reloaded once the server ran


def test_reload_under_load_loses_no_counter(server):
    """Two clients spend a big bucket while the config is reloaded 10 times (HTTP) and
    twice by SIGHUP: every admitted unit is still accounted for afterwards."""
    stop = threading.Event()
    counts = []

    def load():
        c = server.resp()
        n = 0
        deadline = time.time() + 3
        while not stop.is_set() and time.time() < deadline and n < 20000:
            d = as_dict(c.command("SL.CHECK", "big", "shared-key"))
            assert d["allowed"] == 1
            n += 1
        counts.append(n)
        c.close()

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    gens = set()
    for i in range(10):
        r = requests.post(server.admin + "/v1/reload", timeout=5)
        assert r.status_code == 200
        gens.add(r.json()["generation"])
        if i in (3, 7):
            server.signal(signal.SIGHUP)
        time.sleep(0.05)
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(10)
    assert len(gens) == 10 and len(counts) == 2 and min(counts) > 0
    c = server.resp()
    d = as_dict(c.command("SL.PEEK", "big", "shared-key"))
    assert d["remaining"] == 1_000_000 - sum(counts)
    m = requests.get(server.admin + "/metrics", timeout=5).text
    assert 'sluice_reloads_total{source="admin-api",outcome="ok"} 10' in m
    assert 'sluice_reloads_total{source="sighup",outcome="ok"} 2' in m
    assert "config reloaded" in server.output()


def test_invalid_reload_keeps_the_old_config(server):
    c = server.resp()
    assert as_dict(c.command("SL.CHECK", "api", "k"))["remaining"] == 19
    with open(server.config_path) as f:
        good = f.read()
    with open(server.config_path, "w") as f:
        f.write(good.replace("algorithm: token_bucket", "algorithm: token_bukket", 1))
    r = requests.post(server.admin + "/v1/reload", timeout=5)
    assert r.status_code == 422
    errs = r.json()["errors"]
    assert errs and "token_bukket" in errs[0] and "sluice.yaml:" in errs[0]
    server.signal(signal.SIGHUP)
    time.sleep(0.3)
    assert "reload refused" in server.output()
    # still serving with the old config and its counters
    assert as_dict(c.command("SL.CHECK", "api", "k"))["remaining"] == 18
    with open(server.config_path, "w") as f:
        f.write(good.replace("burst: 20", "burst: 30"))
    assert requests.post(server.admin + "/v1/reload", timeout=5).status_code == 200
    d = as_dict(c.command("SL.CHECK", "api", "k"))
    assert d["limit"] == 30


def test_sigterm_drains_in_flight_and_refuses_new(make_server):
    s = make_server()
    idle = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
    busy = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
    body = b'{"policy":"api","key":"drain"}'
    busy.sendall(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:16])
    time.sleep(0.2)
    s.signal(signal.SIGTERM)
    time.sleep(0.4)
    # new connections are refused, the idle keep-alive one is closed
    try:
        socket.create_connection(("127.0.0.1", s.http_port), timeout=1).close()
        refused = False
    except OSError:
        refused = True
    assert refused
    idle.settimeout(2)
    assert idle.recv(100) == b""
    # the request in flight completes, with Connection: close
    busy.sendall(body[16:])
    busy.settimeout(5)
    out = b""
    while True:
        chunk = busy.recv(65536)
        if not chunk:
            break
        out += chunk
    assert out.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in out
    assert s.proc.wait(10) == 0
    assert "stopped" in s.output()


def test_final_snapshot_on_sigterm(make_server, tmp_path):
    state = tmp_path / "sluice.state"
    cfg = TEST_CONFIG.replace("  max_keys: 100000\n",
                              "  max_keys: 100000\n  snapshot: { path: %s }\n" % state)
    s = make_server(config_text=cfg)
    c = s.resp()
    for _ in range(5):
        c.command("SL.CHECK", "big", "persisted")
    s.signal(signal.SIGTERM)
    assert s.proc.wait(10) == 0
    assert state.exists()
    # a restart on the snapshot keeps the counter
    s2 = Server(config_text=cfg)
    try:
        # 1 token per hour refills nothing in the second the restart takes
        d = as_dict(s2.resp().command("SL.PEEK", "big", "persisted"))
        assert d["remaining"] == 1_000_000 - 5
    finally:
        s2.stop()


def test_periodic_snapshot(make_server, tmp_path):
    state = tmp_path / "periodic.state"
    cfg = TEST_CONFIG.replace("  max_keys: 100000\n",
                              "  max_keys: 100000\n  snapshot: { path: %s, every: 1s }\n" % state)
    s = make_server(config_text=cfg)
    s.resp().command("SL.CHECK", "big", "p")
    deadline = time.time() + 5
    while not state.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert state.exists() and s.proc.poll() is None  # written while serving
