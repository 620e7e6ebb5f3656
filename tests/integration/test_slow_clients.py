# SPDX-License-Identifier: Apache-2.0
"""Slow and abusive clients cannot hold the server: slowloris connections are answered
408 and closed after the read timeout (more bytes do not extend it), idle ones are closed,
oversized requests get 413/431 at once, the connection cap holds; other clients are
served normally all along."""
import os
import signal
import socket
import time

import requests

from conftest import Resp, Server


def serve_opts():
    return ["--read-timeout", "1000", "--idle-timeout", "1500", "--max-conns", "60"]


def test_slowloris_and_oversized_while_others_are_served(make_server):
    s = make_server(extra=serve_opts())
    slow = []
    for _ in range(20):
        c = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
        c.sendall(b"GET /v1/auth HTTP/1.1\r\nHost: x\r\n")
        slow.append(c)
    slow_resp = Resp(s.resp_port)
    slow_resp.send_raw(b"*3\r\n$8\r\nSL.CHECK\r\n")  # a command that never completes
    t0 = time.time()
    served = 0
    sess = requests.Session()
    big_body_status = None
    while time.time() - t0 < 2.0:
        for c in slow:  # keep trickling bytes: this must not extend the deadline
            try:
                c.sendall(b"X-a: b\r\n")
            except OSError:
                pass
        r = sess.get(s.http + "/v1/auth", headers={"X-Api-Key": "good-%d" % served}, timeout=2)
        assert r.status_code == 200
        served += 1
        if big_body_status is None:
            o = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
            o.sendall(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n" + b"x" * 10000)
            big_body_status = o.recv(100)[:12]
            o.close()
            o = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
            o.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"y" * 20000 + b"\r\n\r\n")
            assert o.recv(100).startswith(b"HTTP/1.1 431 ")
            o.close()
        time.sleep(0.05)
    assert big_body_status == b"HTTP/1.1 413"
    assert served >= 10
    # every slow connection got a 408 and was closed, within read timeout + sweep slack
    for c in slow:
        c.settimeout(2)
        data = b""
        try:
            while True:
                chunk = c.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        assert data.startswith(b"HTTP/1.1 408 Request Timeout"), data[:60]
        c.close()
    assert slow_resp.closed(timeout=2)
    m = sess.get(s.admin + "/metrics", timeout=5).text
    timeouts = [l for l in m.splitlines() if l.startswith("sluice_timeouts_total ")]
    assert int(timeouts[0].split()[1]) >= 21


def test_idle_connections_are_closed(make_server):
    s = make_server(extra=serve_opts())
    c = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
    c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert c.recv(1000).startswith(b"HTTP/1.1 200")
    t0 = time.time()
    c.settimeout(5)
    assert c.recv(100) == b""  # closed by the idle timeout
    assert 1.0 < time.time() - t0 < 4.0


def test_connection_cap(make_server):
    s = make_server(extra=serve_opts())
    held = [socket.create_connection(("127.0.0.1", s.resp_port), timeout=5) for _ in range(60)]
    for h in held[:5]:
        h.sendall(b"PING\r\n")
        assert h.recv(100) == b"+PONG\r\n"
    extra = socket.create_connection(("127.0.0.1", s.resp_port), timeout=5)
    extra.settimeout(3)
    try:
        refused = extra.recv(100) == b""
    except ConnectionResetError:
        refused = True
    assert refused  # over the cap: closed at once
    for h in held:
        h.close()
    time.sleep(0.3)
    c = Resp(s.resp_port)
    assert c.command("PING") == "PONG"


def test_busy_pipeline_is_not_a_slow_client(make_server):
    """A client that streams pipelined commands for longer than the read timeout, every
    write ending in the middle of a command, keeps its connection: the deadline restarts
    whenever a request completes."""
    s = make_server(extra=serve_opts())
    c = Resp(s.resp_port)
    cmd = b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n"
    pending = b""
    sent = got = 0
    t0 = time.time()
    while time.time() - t0 < 2.5:
        chunk = pending + cmd * 3
        cut = len(chunk) - 7  # always stop inside a command
        c.send_raw(chunk[:cut])
        pending = chunk[cut:]
        sent += 3
        while got < sent - 1:  # every complete command is answered
            assert c.read() == b"hello"
            got += 1
        time.sleep(0.05)
    c.send_raw(pending)
    while got < sent:
        assert c.read() == b"hello"
        got += 1
    assert c.command("PING") == "PONG"


def test_out_of_descriptors_does_not_spin(make_server):
    """With its descriptor limit reached the server stops accepting for a while instead
    of spinning on the listener, keeps serving its connections, and recovers."""
    import resource

    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    s = make_server(preexec_fn=low_nofile, extra=["--max-conns", "1000"])
    first = Resp(s.resp_port)
    assert first.command("PING") == "PONG"
    held = []
    for _ in range(80):
        try:
            held.append(socket.create_connection(("127.0.0.1", s.resp_port), timeout=2))
        except OSError:
            break
    time.sleep(0.3)

    def ticks():
        with open("/proc/%d/stat" % s.proc.pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return int(v[11]) + int(v[12])

    t0 = ticks()
    time.sleep(1.0)
    used = (ticks() - t0) / os.sysconf("SC_CLK_TCK")
    assert used < 0.5, "the server burnt %.2f s of CPU in 1 s while out of descriptors" % used
    assert first.command("PING") == "PONG"  # existing connections are still served
    for h in held:
        h.close()
    time.sleep(0.5)
    c = Resp(s.resp_port)
    assert c.command("PING") == "PONG"


def _stalled_pipeline(srv, port, payload, count_replies, want):
    """Sends `payload` (many pipelined requests) while the server is stopped, so it reads
    them all at once, then counts the replies within 5 s."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    srv.proc.send_signal(signal.SIGSTOP)
    try:
        s.sendall(payload)
    finally:
        srv.proc.send_signal(signal.SIGCONT)
    got, buf, deadline = 0, b"", time.time() + 5
    s.settimeout(0.5)
    while got < want and time.time() < deadline:
        try:
            data = s.recv(1 << 20)
        except socket.timeout:
            continue
        if not data:
            break
        buf += data
        got = count_replies(buf)
    s.close()
    return got


def test_a_deep_pipeline_read_at_once_is_answered_whole():
    """Thousands of requests arriving in one read overflow the output's high mark: the
    server stops to let the output go, then must go on with the rest by itself (the
    client has nothing more to send), on RESP and on HTTP."""
    srv = Server(test_clock=False, workers=1)
    try:
        n = 3000
        resp = b"".join(b"*3\r\n$8\r\nSL.CHECK\r\n$3\r\napi\r\n$%d\r\n%s\r\n" % (len(k), k)
                        for k in (b"k%d" % i for i in range(n)))
        got = _stalled_pipeline(srv, srv.resp_port, resp, lambda b: b.count(b"allowed"), n)
        assert got == n, "RESP: %d of %d answered" % (got, n)
        m = 1500
        http = b"".join(b"GET /v1/auth HTTP/1.1\r\nHost: x\r\nX-Original-URI: /x\r\nX-Api-Key: h%d\r\n\r\n" % i
                        for i in range(m))
        got = _stalled_pipeline(srv, srv.http_port, http, lambda b: b.count(b"HTTP/1.1 "), m)
        assert got == m, "HTTP: %d of %d answered" % (got, m)
    finally:
        srv.stop()
    srv.assert_clean()
