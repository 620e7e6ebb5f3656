# SPDX-License-Identifier: Apache-2.0
"""`sluice serve --compat envoy-ratelimit` beside envoyproxy/ratelimit: the Redis counters
(real redis-server), the watched config directory, the listeners.

- side by side on one Redis: the counters compat mode writes are read back under the key
  envoyproxy/ratelimit's formula names (CACHE_KEY_PREFIX + domain + "_" + key_value_...
  + window start), integer values with its expiry; counts written there under that formula
  (as upstream's INCRBY would) are what sluice answers from, so both agree on every counter;
- a store failure is a gRPC error (UNAVAILABLE: Envoy's failure_mode_deny decides) unless
  every rule says otherwise (on_store_error); /healthcheck unhealthy until Redis answered;
- the local over-limit cache (LOCAL_CACHE_SIZE_IN_BYTES) answers without counting;
- a Kubernetes ConfigMap swap (`..data` symlink) under load: picked up within 2 s, no
  decision failing; a broken update keeps the previous rules and is counted;
- gRPC over TLS with a test CA, mutual TLS refusing a client without a certificate, and
  gRPC on a unix socket (GRPC_UDS).
"""
import os
import subprocess
import threading
import time

import grpc
import pytest
import requests

from conftest import Client, Redis, free_port
from test_envoy_compat import BASIC, Compat, compat  # noqa: F401 (the fixture)

OK, OVER = 1, 2


def redis_cli(redis, *args):
    out = subprocess.run(["redis-cli", "-p", str(redis.port)] + [str(a) for a in args],
                         capture_output=True, text=True, timeout=10).stdout
    return out.strip()


def health_becomes(s, want, seconds=5):
    """Poll /healthcheck as a probe does: the store is connected asynchronously after the
    listeners open (under ASan on a loaded machine that takes more than one request)."""
    deadline = time.time() + seconds
    status = None
    while time.time() < deadline:
        status = requests.get(s.http + "/healthcheck", timeout=5).status_code
        if status == want:
            break
        time.sleep(0.05)
    return status


def upstream_key(prefix, domain, entries, divider, now=None):
    """envoyproxy/ratelimit's cache key (src/limiter/cache_key.go), computed here from its
    documented layout: prefix + domain + "_" + (key + "_" + value + "_") per entry + the
    window start, floor(now / divider) * divider."""
    now = int(time.time()) if now is None else now
    k = prefix + domain + "_"
    for key, value in entries:
        k += key + "_" + value + "_"
    return k + str(now // divider * divider)


def redis_env(redis, **kw):
    e = {"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:%d" % redis.port}
    e.update(kw)
    return e


def settle_window(divider, margin=3):
    """Waits out the end of a window when it is less than `margin` seconds away, so a test's
    calls and its key arithmetic land in one window (bounded: at most margin seconds)."""
    left = divider - int(time.time()) % divider
    if left < margin:
        time.sleep(left + 0.05)


SIDE = """
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value: a
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: files
    value: "docs/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
"""


def test_side_by_side_counters_agree_with_upstream_layout(redis, pb, compat):
    s = compat({"a.yaml": SIDE}, env=redis_env(redis, CACHE_KEY_PREFIX="rl_",
                                                EXPIRATION_JITTER_MAX_SECONDS="5"), memory=False)
    c = Client(pb, s)
    settle_window(60)
    for _ in range(3):
        assert c.check("shared", [[("user", "alice")]]).overall_code == OK
    c.check("shared", [[("route", "a"), ("user", "bob")]], hits=7)
    c.check("shared", [[("files", "docs/a.md")]])
    c.check("shared", [[("files", "docs/b.md")]], hits=2)
    # what sluice wrote, read under envoyproxy/ratelimit's own key names
    k1 = upstream_key("rl_", "shared", [("user", "alice")], 60)
    k2 = upstream_key("rl_", "shared", [("route", "a"), ("user", "bob")], 3600)
    k3 = upstream_key("rl_", "shared", [("files", "docs/*")], 60)  # share_threshold: the pattern
    assert redis_cli(redis, "GET", k1) == "3", redis_cli(redis, "KEYS", "*")
    assert redis_cli(redis, "GET", k2) == "7"
    assert redis_cli(redis, "GET", k3) == "3"
    # its expiry: the unit plus up to EXPIRATION_JITTER_MAX_SECONDS
    assert 55 <= int(redis_cli(redis, "TTL", k1)) <= 65
    assert 3595 <= int(redis_cli(redis, "TTL", k2)) <= 3605
    # an integer counter: envoyproxy/ratelimit's INCRBY works on it, and sluice reads what
    # it added (the other instance of a rolling switch)
    assert redis_cli(redis, "INCRBY", k1, 6) == "9"
    r = c.check("shared", [[("user", "alice")]])
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 0
    r = c.check("shared", [[("user", "alice")]])
    assert r.overall_code == OVER
    assert redis_cli(redis, "GET", k1) == "11"  # the rejected hit counted, as upstream does
    # a counter upstream created first is the same counter
    k4 = upstream_key("rl_", "shared", [("user", "carol")], 60)
    redis_cli(redis, "SET", k4, 10)
    assert c.check("shared", [[("user", "carol")]]).overall_code == OVER
    assert redis_cli(redis, "GET", k4) == "11"
    c.close()


def test_two_compat_instances_share_counters(redis, pb, compat):
    env = redis_env(redis, CACHE_KEY_PREFIX="two_")
    a = compat({"a.yaml": SIDE}, env=env, memory=False)
    b = compat({"a.yaml": SIDE}, env=env, memory=False)
    ca, cb = Client(pb, a), Client(pb, b)
    settle_window(60)
    got = [(ca if i % 2 else cb).check("shared", [[("user", "dan")]]).overall_code for i in range(14)]
    assert got.count(OK) == 10 and got.count(OVER) == 4, got
    assert redis_cli(redis, "GET", upstream_key("two_", "shared", [("user", "dan")], 60)) == "14"
    ca.close()
    cb.close()


def test_store_failure_is_an_error_unless_rules_say(redis, pb, compat):
    cfg = """
domain: f
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 10, on_store_error: closed}
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 10, on_store_error: open}
"""
    s = compat({"a.yaml": cfg}, env=redis_env(redis, REDIS_TIMEOUT="50ms"), memory=False)
    c = Client(pb, s)
    assert health_becomes(s, 200) == 200
    assert c.check("f", [[("plain", "x")]]).overall_code == OK
    redis.kill()
    deadline = time.time() + 5
    code = None
    while time.time() < deadline:
        try:
            c.check("f", [[("plain", "x")]])
        except grpc.RpcError as e:
            code = e.code()
            break
        time.sleep(0.05)
    assert code == grpc.StatusCode.UNAVAILABLE  # Envoy's failure_mode_deny decides
    assert c.check("f", [[("closed", "x")]]).overall_code == OVER
    assert c.check("f", [[("open", "x")]]).overall_code == OK
    with pytest.raises(grpc.RpcError) as e:  # one rule without a say: an error
        c.check("f", [[("open", "x")], [("plain", "y")]])
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    text = s.metrics()
    assert 'ratelimit_service_should_rate_limit_error{err_type="redis_error"}' in text
    assert int(text.split('err_type="redis_error"} ')[1].split()[0]) >= 2
    c.close()


def test_healthcheck_unhealthy_until_redis_answers(pb):
    port = free_port()
    s = Compat({"a.yaml": BASIC}, env=redis_env(type("R", (), {"port": port}),
                                                REDIS_HEALTH_CHECK_ACTIVE_CONNECTION="true"),
               memory=False)
    r = None
    c = Client(pb, s)
    try:
        assert requests.get(s.http + "/healthcheck", timeout=5).status_code == 500
        assert not c.serving()  # grpc.health.v1 agrees
        r = Redis(port=port)
        assert health_becomes(s, 200) == 200 and c.serving()
        r.kill()  # REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: unhealthy again while it is down
        assert health_becomes(s, 500) == 500
    finally:
        c.close()
        s.stop()
        if r is not None:
            r.close()
    s.assert_clean()


def test_local_cache_answers_over_limit_keys_without_counting(redis, pb, compat):
    s = compat({"a.yaml": SIDE}, env=redis_env(redis, CACHE_KEY_PREFIX="lc_",
                                                LOCAL_CACHE_SIZE_IN_BYTES="1048576"),
               memory=False, workers=1)
    c = Client(pb, s)
    settle_window(60)
    for _ in range(11):
        c.check("shared", [[("user", "eve")]])
    key = upstream_key("lc_", "shared", [("user", "eve")], 60)
    assert redis_cli(redis, "GET", key) == "11"
    for _ in range(5):  # over in this window: answered here, Redis untouched
        assert c.check("shared", [[("user", "eve")]]).overall_code == OVER
    assert redis_cli(redis, "GET", key) == "11"
    assert 'ratelimit_service_rate_limit_shared_user_over_limit_with_local_cache 5' in s.metrics()
    c.close()


# ---- the watched directory --------------------------------------------------------------

V1 = "domain: cm\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"
V2 = "domain: cm\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n"


def configmap(root, version, text):
    """A Kubernetes ConfigMap volume: rules.yaml -> ..data/rules.yaml, ..data -> ..<version>;
    an update writes a new ..<version> directory and swaps ..data atomically (rename)."""
    d = os.path.join(root, "..%s" % version)
    os.makedirs(d)
    with open(os.path.join(d, "rules.yaml"), "w") as f:
        f.write(text)
    tmp = os.path.join(root, "..data_tmp")
    os.symlink("..%s" % version, tmp)
    os.rename(tmp, os.path.join(root, "..data"))
    link = os.path.join(root, "rules.yaml")
    if not os.path.islink(link):
        os.symlink("..data/rules.yaml", link)


def test_configmap_swap_under_load(pb, tmp_path):
    root = tmp_path / "runtime"
    cfgdir = root / "config"
    cfgdir.mkdir(parents=True)
    configmap(str(cfgdir), "v1", V1)
    s = Compat({}, root=str(root), env={"RUNTIME_IGNOREDOTFILES": "true"})
    c = Client(pb, s)
    errors, answers = [], []
    stop = threading.Event()

    def load():
        cl = Client(pb, s)
        n = 0
        while not stop.is_set() and n < 20000:
            n += 1
            try:
                answers.append((time.time(), cl.check("cm", [[("k", "x%d" % (n % 50))]]).statuses[0]
                                .current_limit.requests_per_unit))
            except grpc.RpcError as e:  # no decision may fail during a swap
                errors.append(e.code())
        cl.close()

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        swapped = time.time()
        configmap(str(cfgdir), "v2", V2)
        deadline = swapped + 2.0
        seen = None
        while time.time() < deadline:
            if c.check("cm", [[("k", "probe")]]).statuses[0].current_limit.requests_per_unit == 7:
                seen = time.time()
                break
            time.sleep(0.02)
        assert seen is not None, "the swap was not picked up within 2 s\n" + s.output()
        time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == [], errors[:5]
    assert len(answers) > 50 and {a for _, a in answers} <= {1000, 7}
    # a broken update: the previous rules stay, the failure is counted and reported
    configmap(str(cfgdir), "v3", "domain: cm\ndescriptors:\n  - key: k\n    rate_limit: {unit: nope}\n")
    deadline = time.time() + 3
    while time.time() < deadline and "reload refused" not in s.output():
        time.sleep(0.05)
    assert "reload refused" in s.output() and "rules.yaml" in s.output()
    assert c.check("cm", [[("k", "after")]]).statuses[0].current_limit.requests_per_unit == 7
    text = s.metrics()
    assert "sluice_config_load_error_total 1" in text and "ratelimit_service_config_load_error 1" in text
    assert "sluice_config_load_success_total 2" in text
    c.close()
    s.stop()
    s.assert_clean()


def test_runtime_root_symlink_swap(pb, tmp_path):
    """RUNTIME_ROOT a symlink to one version directory, swapped to another (upstream's
    RUNTIME_WATCH_ROOT default)."""
    for v, text in (("v1", V1), ("v2", V2)):
        (tmp_path / v / "config").mkdir(parents=True)
        (tmp_path / v / "config" / "rules.yaml").write_text(text)
    current = tmp_path / "current"
    os.symlink(str(tmp_path / "v1"), str(current))
    s = Compat({}, root=str(current))
    c = Client(pb, s)
    try:
        assert c.check("cm", [[("k", "a")]]).statuses[0].current_limit.requests_per_unit == 1000
        tmp = tmp_path / "current_tmp"
        os.symlink(str(tmp_path / "v2"), str(tmp))
        os.rename(str(tmp), str(current))
        deadline = time.time() + 2.0
        got = None
        while time.time() < deadline and got != 7:
            got = c.check("cm", [[("k", "a")]]).statuses[0].current_limit.requests_per_unit
            time.sleep(0.02)
        assert got == 7
    finally:
        c.close()
        s.stop()
    s.assert_clean()


# ---- listeners -------------------------------------------------------------------------

def make_pki(d):
    """A test CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    def run(*a):
        subprocess.run(["openssl"] + list(a), cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=sluice test CA")
    for name, ext in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                      ("client", "subjectAltName=DNS:envoy.test\nextendedKeyUsage=clientAuth")):
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out", name + ".csr",
            "-subj", "/CN=" + name)
        run("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", name + ".ext")
    return {n: open(os.path.join(d, n), "rb").read() for n in
            ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def tls_client(pb, addr, pki, with_cert):
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki["ca.crt"],
        private_key=pki["client.key"] if with_cert else None,
        certificate_chain=pki["client.crt"] if with_cert else None)
    ch = grpc.secure_channel(addr, creds, options=[("grpc.ssl_target_name_override", "localhost")])
    return ch, pb.rls_pb2_grpc.RateLimitServiceStub(ch)


def rls_request(pb):
    D = pb.envoy_ratelimit_pb2.RateLimitDescriptor
    return pb.rls_pb2.RateLimitRequest(domain="rl", descriptors=[D(entries=[D.Entry(key="user", value="t")])])


def test_grpc_over_tls_and_mutual_tls(pb, compat, tmp_path):
    pki = make_pki(str(tmp_path))
    s = compat({"a.yaml": BASIC}, env={"GRPC_SERVER_USE_TLS": "true",
                                        "GRPC_SERVER_TLS_CERT": str(tmp_path / "server.crt"),
                                        "GRPC_SERVER_TLS_KEY": str(tmp_path / "server.key")})
    ch, stub = tls_client(pb, s.grpc, pki, with_cert=False)
    r = stub.ShouldRateLimit(rls_request(pb), timeout=5)
    assert r.overall_code == OK and r.statuses[0].current_limit.requests_per_unit == 3
    ch.close()
    # plain h2c to a TLS listener gets no answer
    plain = grpc.insecure_channel(s.grpc)
    with pytest.raises(grpc.RpcError):
        pb.rls_pb2_grpc.RateLimitServiceStub(plain).ShouldRateLimit(rls_request(pb), timeout=2)
    plain.close()
    # mTLS: a client certificate from the CA is required (and its SAN checked)
    m = compat({"a.yaml": BASIC}, env={"GRPC_SERVER_USE_TLS": "true",
                                        "GRPC_SERVER_TLS_CERT": str(tmp_path / "server.crt"),
                                        "GRPC_SERVER_TLS_KEY": str(tmp_path / "server.key"),
                                        "GRPC_CLIENT_TLS_CACERT": str(tmp_path / "ca.crt"),
                                        "GRPC_CLIENT_TLS_SAN": "envoy.test"})
    ch, stub = tls_client(pb, m.grpc, pki, with_cert=True)
    assert stub.ShouldRateLimit(rls_request(pb), timeout=5).overall_code == OK
    ch.close()
    ch, stub = tls_client(pb, m.grpc, pki, with_cert=False)
    with pytest.raises(grpc.RpcError) as e:
        stub.ShouldRateLimit(rls_request(pb), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    ch.close()
    # a certificate without the SAN asked for is refused too
    n = compat({"a.yaml": BASIC}, env={"GRPC_SERVER_USE_TLS": "true",
                                        "GRPC_SERVER_TLS_CERT": str(tmp_path / "server.crt"),
                                        "GRPC_SERVER_TLS_KEY": str(tmp_path / "server.key"),
                                        "GRPC_CLIENT_TLS_CACERT": str(tmp_path / "ca.crt"),
                                        "GRPC_CLIENT_TLS_SAN": "someone.else"})
    ch, stub = tls_client(pb, n.grpc, pki, with_cert=True)
    with pytest.raises(grpc.RpcError):
        stub.ShouldRateLimit(rls_request(pb), timeout=5)
    ch.close()


def test_grpc_on_a_unix_socket(pb, compat, tmp_path):
    path = str(tmp_path / "rl.sock")
    s = compat({"a.yaml": BASIC}, env={"GRPC_UDS": path})
    deadline = time.time() + 5
    while time.time() < deadline and not os.path.exists(path):
        time.sleep(0.02)
    ch = grpc.insecure_channel("unix:" + path)
    stub = pb.rls_pb2_grpc.RateLimitServiceStub(ch)
    for i in range(4):
        r = stub.ShouldRateLimit(rls_request(pb), timeout=5)
    assert r.overall_code == OVER
    ch.close()
    s.stop()
    assert not os.path.exists(path)  # the socket file goes with the server


def test_sluice_mode_store_failure_never_over_under_ok(redis, pb):
    """Outside compat mode a failed store follows the rules' failure mode; each descriptor
    says what was decided: never OVER_LIMIT under an overall OK."""
    from conftest import Server
    cfg = ("domain: rl\ndescriptors:\n  - key: loose\n    rate_limit: {unit: hour, requests_per_unit: 9}\n"
           "  - key: strict\n    rate_limit: {unit: hour, requests_per_unit: 9, on_store_error: closed}\n")
    s = Server(config_text=cfg, test_clock=False, extra=["--store", "redis://127.0.0.1:%d" % redis.port])
    c = Client(pb, s)
    try:
        assert c.check("rl", [[("loose", "a")]]).overall_code == OK
        redis.kill()
        deadline = time.time() + 5
        r = c.check("rl", [[("loose", "a")]])
        while time.time() < deadline and r.statuses[0].HasField("duration_until_reset"):
            r = c.check("rl", [[("loose", "a")]])
            time.sleep(0.05)
        assert r.overall_code == OK and [st.code for st in r.statuses] == [OK], r
        r = c.check("rl", [[("loose", "a")], [("strict", "b")]])
        assert r.overall_code == OVER and [st.code for st in r.statuses] == [OK, OVER], r
    finally:
        c.close()
        s.stop()
    s.assert_clean()


def test_redis_auth_user_and_unix_socket_from_upstreams_variables(pb, compat, tmp_path):
    """REDIS_AUTH (an ACL user:password) over TCP, then a password-protected Redis on a
    unix socket (REDIS_SOCKET_TYPE=unix): decisions work and counters land where upstream
    puts them; the password appears in no output."""
    from redis_procs import RedisProc
    sock = str(tmp_path / "redis.sock")
    r = RedisProc(["--requirepass", "hunter2-admin", "--unixsocket", sock, "--unixsocketperm", "700",
                   "--user", "rl", "on", ">hunter2-rl", "~*", "+@all"])
    try:
        for env in ({"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:%d" % r.port, "REDIS_AUTH": "rl:hunter2-rl"},
                    {"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": sock, "REDIS_AUTH": "hunter2-admin"}):
            env.update({"BACKEND_TYPE": "redis", "CACHE_KEY_PREFIX": "auth_"})
            s = compat({"a.yaml": SIDE}, env=env, memory=False)
            c = Client(pb, s)
            settle_window(60)
            codes = [c.check("shared", [[("user", "erin-%s" % env["REDIS_SOCKET_TYPE"])]]).overall_code
                     for _ in range(11)]
            c.close()
            assert codes.count(OK) == 10 and codes[-1] == OVER, (codes, s.output())
            key = upstream_key("auth_", "shared", [("user", "erin-%s" % env["REDIS_SOCKET_TYPE"])], 60)
            got = subprocess.run(["redis-cli", "-p", str(r.port), "--user", "rl", "--pass", "hunter2-rl",
                                  "--no-auth-warning", "GET", key], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
            assert got == "11", got
            m = requests.get("http://127.0.0.1:%d/metrics" % s.debug_port, timeout=5).text
            assert "hunter2" not in s.output() and "hunter2" not in m
    finally:
        r.close()
