# SPDX-License-Identifier: Apache-2.0
"""Listeners that resist hostile clients, each with its own trust model:

- RESP commands that change more than the caller's own decision (SL.RESET, SL.CLOCK)
  need AUTH with the admin token when one is set (redis-cli -a, HELLO ... AUTH);
- the admin listener has its own connection budget: data listeners full of clients that
  never send a byte do not lock /healthz out, and such clients are closed after the read
  timeout (not the idle one), so new clients get in again;
- admin.token follows a reload (a leaked token is revoked without a restart); a reload
  that changes listeners says they need a restart;
- a recheck (nothing consumed, ask again) is a 429 with Retry-After on /v1/check, not a
  shaped admission; a fail-open admission carries no RateLimit fields.
"""
import os
import signal
import socket
import time

import requests

from conftest import Server, as_dict

CONFIG = """
workers: 1
admin: { token: %(token)s }
policies:
  - name: api
    key: [header.x-key]
    on_missing_key: skip
    algorithm: gcra
    limits: [ { rate: 3/min, burst: 3 } ]
  - name: slow
    match: { path_prefix: /slow/ }
    key: [header.x-key]
    on_missing_key: skip
    algorithm: gcra
    limits: [ { rate: 1/s, burst: 1 } ]
    on_exceed: { delay: 3s }
  - name: open
    match: { path_prefix: /open/ }
    key: [header.x-key]
    on_missing_key: skip
    on_store_error: open
    algorithm: gcra
    limits: [ { rate: 100/s } ]
"""


def cfg(token="s3cret-one"):
    return CONFIG % {"token": token}


def test_resp_state_changes_need_auth():
    srv = Server(config_text=cfg(), test_clock=True)
    try:
        c = srv.resp()
        assert as_dict(c.command("SL.CHECK", "api", "k"))["allowed"] == 1  # decisions need none
        assert str(c.command("SL.RESET", "api", "k")).startswith("NOAUTH")
        assert str(c.command("SL.CLOCK", "ADVANCE", 1)).startswith("NOAUTH")
        assert str(c.command("AUTH", "wrong")).startswith("WRONGPASS")
        assert str(c.command("SL.RESET", "api", "k")).startswith("NOAUTH")
        assert c.command("AUTH", "default", "s3cret-one") == "OK"  # AUTH user password
        assert c.command("SL.RESET", "api", "k") == 1
        c.close()
        c = srv.resp()  # HELLO 3 AUTH, as RESP3 clients authenticate
        assert str(c.command("HELLO", "3", "AUTH", "default", "nope")).startswith("WRONGPASS")
        c.command("HELLO", "3", "AUTH", "default", "s3cret-one")
        assert isinstance(c.command("SL.CLOCK", "ADVANCE", 1), int)
        c.close()
    finally:
        srv.stop()
    srv.assert_clean()


def test_admin_token_follows_reload_and_restart_only_settings_are_named():
    srv = Server(config_text=cfg("first-token"), test_clock=False)
    try:
        h1 = {"Authorization": "Bearer first-token"}
        assert requests.get(srv.admin + "/metrics", headers=h1, timeout=5).status_code == 200
        with open(srv.config_path, "w") as f:
            f.write(cfg("second-token").replace("workers: 1", "workers: 3"))
        r = requests.post(srv.admin + "/v1/reload", headers=h1, timeout=5)
        assert r.status_code == 200, r.text
        assert r.json()["restart_needed"] == ["workers"]
        # the leaked token is revoked at once, on every listener
        assert requests.get(srv.admin + "/metrics", headers=h1, timeout=5).status_code == 401
        h2 = {"Authorization": "Bearer second-token"}
        assert requests.get(srv.admin + "/metrics", headers=h2, timeout=5).status_code == 200
        c = srv.resp()
        assert str(c.command("AUTH", "first-token")).startswith("WRONGPASS")
        assert c.command("AUTH", "second-token") == "OK"
        c.close()
    finally:
        srv.stop()
    srv.assert_clean()


def test_silent_clients_do_not_lock_out_admin_or_new_clients():
    srv = Server(config_text=cfg(), test_clock=False,
                 extra=["--max-conns", "40", "--read-timeout", "8000", "--idle-timeout", "60000"])
    socks = []

    def open_conns():
        m = requests.get(srv.admin + "/metrics", timeout=5,
                         headers={"Authorization": "Bearer s3cret-one"}).text
        return next(float(l.split()[1]) for l in m.splitlines() if l.startswith("sluice_connections "))
    try:
        # Fill the data listeners with 40 clients that never send a byte. The start-up
        # probes (one connect and close per listener, conftest) may still sit in the
        # backlog: accepted in the same turn as ours, before their close is read, they can
        # take slots and get some of ours refused. So a client the server closed is
        # replaced until 40 are held (the probes' closes free their slots meanwhile).
        def refused(s):
            s.setblocking(False)
            try:
                return s.recv(1) == b""
            except BlockingIOError:
                return False
            except ConnectionResetError:
                return True
            finally:
                s.setblocking(True)

        def held():  # the cap (40) reached by ours alone: a probe counted would refuse one
            return open_conns() >= 40 and not any(refused(s) for s in socks)

        deadline, stable = time.time() + 15, 0
        while time.time() < deadline and stable < 2:  # twice in a row, 0.2 s apart
            for s in [s for s in socks if refused(s)]:
                socks.remove(s)
                s.close()
            while len(socks) < 40:
                socks.append(socket.create_connection(("127.0.0.1", srv.http_port), timeout=5))
            time.sleep(0.2)
            stable = stable + 1 if held() else 0
        assert stable == 2 and len(socks) == 40, open_conns()
        # the admin listener has its own budget
        t0 = time.time()
        assert requests.get(srv.admin + "/healthz", timeout=2).status_code == 200
        assert time.time() - t0 < 1
        # a new data client is refused while the silent ones hold every slot...
        with socket.create_connection(("127.0.0.1", srv.http_port), timeout=5) as s:
            s.settimeout(2)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                got = s.recv(100)
            except (ConnectionResetError, socket.timeout):
                got = b""
            assert got == b"", got
        # ...until the read timeout (not the 60 s idle one) closes them
        time.sleep(8.5)
        closed = 0
        for s in socks:
            s.settimeout(0.5)
            try:
                if s.recv(100) == b"":
                    closed += 1
            except (ConnectionResetError, socket.timeout):
                closed += 1
        assert closed == 40
        assert requests.get(srv.http + "/healthz", timeout=2).status_code == 200
    finally:
        for s in socks:
            s.close()
        srv.stop()
    srv.assert_clean()


def test_recheck_is_429_not_an_admission():
    srv = Server(config_text=cfg(), test_clock=True)
    try:
        s = requests.Session()
        body = {"request": {"path": "/slow/x", "headers": {"x-key": "k"}}}
        r = s.post(srv.http + "/v1/check", json=body, timeout=5)
        assert r.status_code == 200 and r.json()["action"] == "allow"
        r = s.post(srv.http + "/v1/check", json=body, timeout=5)
        j = r.json()
        assert r.status_code == 429 and j["action"] == "recheck" and not j["allowed"], j
        assert r.headers["Retry-After"] == "1"
        c = srv.resp()
        d = as_dict(c.command("SL.CHECKREQ", "PATH", "/slow/x", "HEADER", "x-key", "k"))
        assert d["action"] in ("recheck", b"recheck") and d["allowed"] == 0 and d["retry_after_ms"] > 0, d
        c.close()
    finally:
        srv.stop()
    srv.assert_clean()


def test_fail_open_has_no_ratelimit_fields(redis):
    srv = Server(config_text=cfg(), test_clock=False,
                 extra=["--store", "redis://127.0.0.1:%d?timeout_ms=100" % redis.port])
    try:
        s = requests.Session()
        h = {"X-Original-URI": "/open/x", "X-Key": "k"}
        r = s.get(srv.http + "/v1/auth", headers=h, timeout=5)
        assert r.status_code == 200 and "RateLimit" in r.headers
        redis.proc.send_signal(signal.SIGSTOP)
        try:
            r = s.get(srv.http + "/v1/auth", headers=h, timeout=5)
        finally:
            redis.proc.send_signal(signal.SIGCONT)
        assert r.status_code == 200  # fail-open
        assert "RateLimit" not in r.headers and "RateLimit-Policy" not in r.headers, dict(r.headers)
    finally:
        srv.stop()
    srv.assert_clean()
