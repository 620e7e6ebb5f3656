# SPDX-License-Identifier: Apache-2.0
"""redis-server processes for the connection tests (auth, TLS, cluster, sentinel): any
arguments, free loopback ports, ready when the log says so (bounded), killed by the test;
certificates made with the openssl command; a small RESP client that speaks TLS and AUTH
(redis-py hides the exact errors); metrics parsing.
"""
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time

from conftest import Resp, free_port


def free_port_pair():
    """A port p < 55000 with p and p + 10000 (a cluster bus) free."""
    for _ in range(200):
        p = free_port()
        if p >= 55000:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p + 10000))
            return p
        except OSError:
            continue
        finally:
            s.close()
    raise AssertionError("no free port pair")


class RedisProc:
    """redis-server (or sentinel) with `args`; `port` is where clients connect."""

    def __init__(self, args, port=None, sentinel_conf=None, bus=False):
        self.dir = tempfile.mkdtemp(prefix="sluice-rp-")
        self.args = list(args)
        self.sentinel_conf = sentinel_conf
        self.proc = None
        for attempt in range(5):
            self.port = port or (free_port_pair() if bus else free_port())
            if self.start(raise_on_failure=port is not None or attempt == 4):
                break

    def _argv(self):
        log = os.path.join(self.dir, "redis.log")
        if self.sentinel_conf is not None:
            conf = os.path.join(self.dir, "sentinel.conf")
            with open(conf, "w") as f:
                f.write("port %d\nbind 127.0.0.1\n" % self.port + self.sentinel_conf)
            return ["redis-server", conf, "--sentinel", "--logfile", log]
        argv = ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--logfile", log]
        tls = "--tls-port" in self.args
        argv += ["--port", "0", "--tls-port", str(self.port)] if tls else ["--port", str(self.port)]
        return argv + [a for a in self.args if a != "--tls-port"]

    def log(self):
        try:
            with open(os.path.join(self.dir, "redis.log")) as f:
                return f.read()
        except OSError:
            return ""

    def start(self, raise_on_failure=True):
        try:
            os.unlink(os.path.join(self.dir, "redis.log"))
        except OSError:
            pass
        self.proc = subprocess.Popen(self._argv(), cwd=self.dir, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline and self.proc.poll() is None:
            if "Ready to accept connections" in self.log() or "Sentinel ID is" in self.log():
                return True
            time.sleep(0.02)
        self.kill()
        if raise_on_failure:
            raise AssertionError("redis-server did not start on port %d:\n%s" % (self.port, self.log()[-2000:]))
        return False

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Certs:
    """ca.crt, other-ca.crt, server.crt/.key (127.0.0.1, ::1, localhost), expired.crt,
    client.crt/.key, made by openssl in a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-certs-")
        script = """
set -e
k() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out $1 2>/dev/null; }
k ca.key; openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj /CN=sluice-test-ca
k other-ca.key; openssl req -x509 -new -key other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca
k server.key; openssl req -new -key server.key -out server.csr -subj /CN=localhost
printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\\n' > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out expired.crt -days -1 -extfile server.ext
k client.key; openssl req -new -key client.key -out client.csr -subj /CN=sluice-client
printf 'extendedKeyUsage=clientAuth\\n' > client.ext
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2 -extfile client.ext
"""
        subprocess.run(["bash", "-c", script], cwd=self.dir, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)

    def path(self, name):
        return os.path.join(self.dir, name)

    def server_args(self, cert="server.crt", auth_clients="no"):
        return ["--tls-port", "--tls-cert-file", self.path(cert), "--tls-key-file", self.path("server.key"),
                "--tls-ca-cert-file", self.path("ca.crt"), "--tls-auth-clients", auth_clients]

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Client(Resp):
    """One RESP2 connection (TLS when certs are given), AUTH on connect: conftest's Resp,
    with errors as Exception values and bulk strings as text."""
    error_type = Exception
    bulk_text = True

    def __init__(self, port, password=None, user=None, certs=None, timeout=5):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if certs is not None:
            ctx = ssl.create_default_context(cafile=certs.path("ca.crt"))
            ctx.load_cert_chain(certs.path("client.crt"), certs.path("client.key"))
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.buf = b""
        if password is not None:
            r = self.command(*(["AUTH", user, password] if user else ["AUTH", password]))
            assert r == "OK", r


def metric(text, name, **labels):
    """The value of one sample of the Prometheus text (None when absent)."""
    want = ",".join('%s="%s"' % kv for kv in labels.items())
    head = name + ("{" + want + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(head + " "):
            return float(line.split()[-1])
    return None


def wait_for(pred, timeout, step=0.02):
    """True as soon as pred() is; False after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def sentinels_ready(sentinels, master="mymaster", password=None):
    """True when every sentinel knows a replica of `master` and the two other sentinels."""
    for sn in sentinels:
        c = Client(sn.port, password=password)
        reps = c.command("SENTINEL", "REPLICAS", master)
        others = c.command("SENTINEL", "SENTINELS", master)
        c.close()
        if not isinstance(reps, list) or len(reps) < 1 or not isinstance(others, list) or len(others) < 2:
            return False
    return True


def is_primary(proc, password=None):
    """True when the Redis of `proc` answers as a primary (False while it cannot be reached:
    a replica drops its clients when it changes roles)."""
    try:
        c = Client(proc.port, password=password)
        m = "role:master" in c.command("INFO", "replication")
        c.close()
        return m
    except (OSError, ConnectionError):
        return False


def sentinel_set(down_after_ms=1000):
    """A primary, its replica and three sentinels monitoring it as "mymaster" (quorum 2),
    started on free ports: (primary, replica, sentinels). The caller waits for
    sentinels_ready and closes them all."""
    primary = RedisProc([])
    replica = RedisProc(["--replicaof", "127.0.0.1", str(primary.port)])
    conf = ("sentinel monitor mymaster 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds mymaster %d\nsentinel failover-timeout mymaster 10000\n"
            % (primary.port, down_after_ms))
    return primary, replica, [RedisProc([], sentinel_conf=conf) for _ in range(3)]
