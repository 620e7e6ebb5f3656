# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures for the integration tests: start the real `sluice serve` on free
loopback ports (test clock by default), talk to it, stop it by PID.

Environment: SLUICE_BIN (the built binary) and SLUICE_SRC (the source tree); without
SLUICE_BIN the tests fail with a clear message rather than skipping.
"""
import glob
import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

SRC = os.environ.get("SLUICE_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("SLUICE_BIN") or os.path.join(SRC, "build", "sluice")
EXAMPLE_CONFIG = os.path.join(SRC, "examples", "sluice.yaml")

# A small config of our own: the validation plan's policy plus policies the tests need
# (a large bucket for counting, a GCRA login rule, a concurrency rule).
TEST_CONFIG = """
workers: 2
store:
  type: memory
  max_keys: 100000
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    on_missing_key: { use: [client_ip] }
    algorithm: token_bucket
    limits:
      - { rate: 10/s, burst: 20 }
  - name: big
    objective: fairness
    match: { path_prefix: /big/ }
    key: [header.x-api-key]
    on_missing_key: skip
    algorithm: token_bucket
    limits:
      - { rate: 1/h, burst: 1000000 }
  - name: login
    objective: security
    match: { method: POST, path: /login }
    key: [client_ip]
    algorithm: gcra
    limits:
      - { rate: 5/min, burst: 5 }
  - name: tokens
    objective: cost
    match: { path_prefix: /ai/ }
    key: [header.x-api-key]
    on_missing_key: skip
    cost: { default: 100, settle: true }
    algorithm: token_bucket
    limits:
      - { rate: 1/h, burst: 1000 }
  - name: slots
    objective: protection
    match: { path_prefix: /slots/ }
    key: [header.x-tenant]
    on_missing_key: skip
    algorithm: concurrency
    limits:
      - { max: 2, lease: 30s }
"""


# ---- keys are personal data: no raw key in any server log -----------------------------------
#
# Every server started through Server() is listed; when the session ends, every log in its
# directory (stderr and any log.file) is searched for the raw keys tests registered with
# note_raw_key(), and every decision line must show `key_hash`, never `key`, unless the
# server's config says log.raw_keys: true. A hit fails the session.

SERVER_DIRS = []
RAW_KEYS = set()


def note_raw_key(*keys):
    """Registers keys a test sends: the session fails if one shows up in a log."""
    for k in keys:
        RAW_KEYS.add(k if isinstance(k, bytes) else str(k).encode())


def _raw_keys_allowed(config_path):
    try:
        with open(config_path) as f:
            text = f.read()
    except OSError:
        return False
    import re
    return re.search(r"^\s*raw_keys:\s*true\b", text, re.M) is not None


def raw_key_hits():
    """(file, line) pairs that leak a registered raw key or a decision's raw key."""
    import re
    hits = []
    decision_raw = re.compile(rb'(\bdecision\b.* key=|"event":"decision".*"key":)')
    for d, allowed in SERVER_DIRS:
        if allowed:
            continue
        for path in glob.glob(os.path.join(d, "*.log")) + glob.glob(os.path.join(d, "*.log.*")):
            try:
                with open(path, "rb") as f:
                    lines = f.read().splitlines()
            except OSError:
                continue
            for line in lines:
                if decision_raw.search(line) or any(k in line for k in RAW_KEYS):
                    hits.append((path, line[:300]))
    return hits


def pytest_sessionfinish(session, exitstatus):
    hits = raw_key_hits()
    if hits:
        for path, line in hits[:20]:
            sys.stderr.write("raw key in a server log: %s: %r\n" % (path, line))
        session.exitstatus = 1


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("port %d did not open" % port)


def await_ports(proc, ports, timeout=10.0):
    """True once every port in `ports` accepts a connection while `proc` runs; False if it
    exits first or the time runs out (a server started by a test)."""
    deadline = time.time() + timeout
    for p in ports:
        while True:
            if proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", p), timeout=0.2):
                    break
            except OSError:
                if time.time() > deadline:
                    return False
                time.sleep(0.05)
    return proc.poll() is None


class Resp:
    """A minimal RESP2 client over one socket: enough to send exact bytes and read
    exact replies (redis-py hides both). Errors come back as `error_type` values, bulk
    strings as bytes (as text when `bulk_text`): redis_procs.Client, the same client over
    TLS and AUTH for redis-server, sets both."""
    error_type = None  # RespError (defined below)
    bulk_text = False

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def command(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self.read()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t in (b"+",):
            return rest.decode()
        if t == b"-":
            return (self.error_type or RespError)(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._exact(n)
            return data.decode(errors="replace") if self.bulk_text else data
        if t in (b"*", b"%", b"~"):
            n = int(rest)
            if n < 0:
                return None
            if t == b"%":
                return {self.read(): self.read() for _ in range(n)}
            return [self.read() for _ in range(n)]
        if t == b"_":
            return None
        if t == b"#":
            return rest == b"t"
        if t == b",":
            return float(rest)
        if t == b"=":
            return self._exact(int(rest))[4:]
        raise AssertionError("unexpected reply type %r" % line)

    def closed(self, timeout=2.0):
        """True when the server closes the connection within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True


class RespError(str):
    pass


def as_dict(reply):
    """An SL.* RESP2 reply (flat array of name/value pairs) as a dict."""
    if isinstance(reply, dict):
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
    assert isinstance(reply, list), reply
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


class ServerProcess:
    """What every `sluice serve` a test starts shares, whatever starts it (Server below,
    test_envoy_compat's Compat): self.proc writing to self.log (at self.log_path); its
    output, a bounded stop, and the check that it ended cleanly."""

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        return self.proc.returncode

    def assert_clean(self):
        """After stop(): exit status 0 and no sanitizer report (ASan/UBSan builds)."""
        with open(self.log_path) as f:
            out = f.read()
        assert "Sanitizer" not in out and "runtime error:" not in out, out[-4000:]
        assert self.proc.returncode == 0, "exit status %s\n%s" % (self.proc.returncode, out[-2000:])


class Server(ServerProcess):
    def __init__(self, config_text=None, config_path=None, test_clock=True, extra=(), workers=2,
                 preexec_fn=None, wrapper=(), start_timeout=10.0):
        self.dir = tempfile.mkdtemp(prefix="sluice-it-")
        if config_path is None:
            config_path = os.path.join(self.dir, "sluice.yaml")
            with open(config_path, "w") as f:
                f.write(config_text if config_text is not None else TEST_CONFIG)
        self.config_path = config_path
        SERVER_DIRS.append((self.dir, _raw_keys_allowed(config_path)))
        assert os.access(BIN, os.X_OK), "SLUICE_BIN=%s is not an executable (build first)" % BIN
        self.log_path = os.path.join(self.dir, "server.log")
        # A free port can be taken by another test between free_port() and the server's
        # bind (ctest runs test files in parallel): then the server says so and exits, and
        # it is started again on other ports (a bounded number of times).
        for attempt in range(5):
            self.http_port, self.resp_port, self.admin_port = free_port(), free_port(), free_port()
            self.grpc_port = free_port()
            args = list(wrapper) + [BIN, "serve", "-c", config_path,
                    "--http", "127.0.0.1:%d" % self.http_port,
                    "--resp", "127.0.0.1:%d" % self.resp_port,
                    "--admin", "127.0.0.1:%d" % self.admin_port,
                    "--grpc", "127.0.0.1:%d" % self.grpc_port,
                    "--workers", str(workers)]
            if test_clock:
                args.append("--test-clock")
            args += list(extra)
            self.log = open(self.log_path, "w")
            self.proc = subprocess.Popen(args, cwd=self.dir, stdout=self.log, stderr=subprocess.STDOUT,
                                         preexec_fn=preexec_fn)
            if self._await_ports(start_timeout):
                break
            out = self.output()
            self.stop()
            if "address already in use" in out and attempt < 4:
                continue
            raise AssertionError("server did not start: " + out)
        self.http = "http://127.0.0.1:%d" % self.http_port
        self.admin = "http://127.0.0.1:%d" % self.admin_port
        self.grpc = "127.0.0.1:%d" % self.grpc_port  # host:port, as grpc channels take it

    def _await_ports(self, timeout=10.0):
        """True once every listener accepts, while this server runs; False if it exits."""
        return await_ports(self.proc, (self.http_port, self.resp_port, self.admin_port, self.grpc_port),
                           timeout)

    def resp(self):
        return Resp(self.resp_port)

    def clock_advance(self, ms):
        c = self.resp()
        r = c.command("SL.CLOCK", "ADVANCE", int(ms))
        c.close()
        assert isinstance(r, int), r
        return r

    def clock_set(self, unix_ms):
        c = self.resp()
        r = c.command("SL.CLOCK", "SET", int(unix_ms))
        c.close()
        assert isinstance(r, int), r
        return r

    def signal(self, sig):
        self.proc.send_signal(sig)

@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()
    s.assert_clean()


@pytest.fixture
def make_server():
    started = []

    def make(**kw):
        s = Server(**kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
    for s in started:
        s.assert_clean()


# ---- redis-server, started and stopped by the tests that need it ----

class Redis:
    def __init__(self, port=None):
        self.dir = tempfile.mkdtemp(prefix="sluice-redis-")
        self.proc = None
        # a port taken by another test in the meantime: try another (when ours to pick)
        for attempt in range(5):
            self.port = port or free_port()
            if self.start(raise_on_failure=port is not None or attempt == 4):
                break

    def start(self, raise_on_failure=True):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        self.kill()
        if raise_on_failure:
            raise AssertionError("redis-server did not start on port %d" % self.port)
        return False

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis():
    r = Redis()
    yield r
    r.close()


# ---- gRPC: stubs generated at test time from the project's .proto files ----

@pytest.fixture(scope="module")
def pb():
    """The stubs, generated from src/api/grpc/*.proto by grpc_tools into a temporary dir."""
    out = tempfile.mkdtemp(prefix="sluice-stubs-")
    protos = sorted(glob.glob(os.path.join(SRC, "src", "api", "grpc", "*.proto")))
    assert protos, "no .proto files in src/api/grpc"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.join(SRC, "src", "api", "grpc"),
                    "--python_out", out, "--grpc_python_out", out] + protos, check=True)
    sys.path.insert(0, out)
    mods = {n: importlib.import_module(n) for n in
            ("rls_pb2", "rls_pb2_grpc", "health_pb2", "health_pb2_grpc", "envoy_ratelimit_pb2",
             "google_wkt_pb2")}
    return type("pb", (), mods)


class Client:
    def __init__(self, pb, server):
        import grpc  # only the gRPC tests load it
        self.pb = pb
        self.channel = grpc.insecure_channel(server.grpc)
        self.rls = pb.rls_pb2_grpc.RateLimitServiceStub(self.channel)
        self.health = pb.health_pb2_grpc.HealthStub(self.channel)

    def request(self, domain, descriptors, hits=0):
        D = self.pb.envoy_ratelimit_pb2.RateLimitDescriptor
        ds = []
        for d in descriptors:
            if isinstance(d, dict):
                x = D(entries=[D.Entry(key=k, value=v) for k, v in d["entries"]])
                if "hits" in d:
                    x.hits_addend.value = d["hits"]
                if "limit" in d:
                    x.limit.requests_per_unit, x.limit.unit = d["limit"]
            else:
                x = D(entries=[D.Entry(key=k, value=v) for k, v in d])
            ds.append(x)
        return self.pb.rls_pb2.RateLimitRequest(domain=domain, descriptors=ds, hits_addend=hits)

    def check(self, domain, descriptors, hits=0, timeout=5):
        return self.rls.ShouldRateLimit(self.request(domain, descriptors, hits), timeout=timeout)

    def raw(self, path, payload, timeout=5, **kw):
        call = self.channel.unary_unary(path, request_serializer=None, response_deserializer=None)
        return call(payload, timeout=timeout, **kw)

    def serving(self, service=""):
        r = self.health.Check(self.pb.health_pb2.HealthCheckRequest(service=service), timeout=5)
        return r.status == self.pb.health_pb2.HealthCheckResponse.SERVING

    def close(self):
        self.channel.close()
