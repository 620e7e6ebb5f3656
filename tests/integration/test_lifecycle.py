"""The server's life: startup errors (one line, exit 1), reload by POST /v1/reload and
SIGHUP under load without losing a counter, an invalid config refused with its errors
while the old one keeps serving, and a graceful SIGTERM drain."""
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
    default port (8080, 6380, 8081, 9090) happens to be taken on this machine."""
    out = []
    for name in ("http", "resp", "grpc", "admin"):
        if name not in given:
            out += ["--" + name, "127.0.0.1:%d" % free_port()]
    return out


def test_startup_errors_are_one_line_and_exit_1(tmp_path):
    cfg = tmp_path / "ok.yaml"
    cfg.write_text(TEST_CONFIG)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    free = free_listeners()
    cases = [
        (["-c", str(cfg), "--http", "127.0.0.1:%d" % port] + free_listeners("http"),
         "address already in use"),
        (["-c", str(tmp_path / "missing.yaml")] + free, "cannot read config file"),
        (["-c", str(cfg), "--bogus"] + free, "unknown option '--bogus'"),
        (["-c", str(cfg), "--workers", "many"] + free, "--workers"),
        (["-c", str(cfg), "--grpc", "127.0.0.1:%d" % port] + free_listeners("grpc"),
         "cannot listen on grpc address"),
        (["-c", str(cfg), "--http", "nonsense"] + free_listeners("http"), "invalid http address"),
        (["-c", str(cfg), "--store", "redis://127.0.0.1:99999"] + free, "bad store URL"),
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies:\n  - name: x\n    objective: fairness\n    algorithm: nope\n")
    cases.append((["-c", str(bad)] + free, "bad.yaml:"))
    for args, text in cases:
        r = run_serve(*args)
        assert r.returncode == 1, (args, r.stderr)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and text in lines[0], (args, r.stderr)
    busy.close()


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
