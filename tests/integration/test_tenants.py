# SPDX-License-Identifier: Apache-2.0
"""No tenant can hurt another (issue 27): one client filling a shared table (settle/release
tokens, CL.THROTTLE parameter sets) gets a clear refusal of its *new* requests while the
others keep working; credentials never show in any output; a revoked admin token stops
working on connections already open.
"""
import json
import os
import re
import socket
import subprocess
import time

import pytest
import requests

from conftest import BIN, RespError, Server, as_dict


def pipeline(r, cmds):
    """Sends every command at once, then reads every reply (in order)."""
    out = bytearray()
    for args in cmds:
        out += b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
    r.send_raw(bytes(out))
    return [r.read() for _ in cmds]


# ---- token table exhaustion ---------------------------------------------------------------

TOKENS_CONFIG = """
workers: 2
store:
  type: memory
  max_keys: 400000
policies:
  - name: attack
    objective: protection
    key: [header.x-tenant]
    algorithm: concurrency
    limits:
      - { max: 1, lease: 10m }
  - name: victim
    objective: protection
    key: [header.x-tenant]
    algorithm: concurrency
    limits:
      - { max: 2, lease: 10m }
"""


def flood_and_cycle(srv, attack=70000, chunk=2000):
    """One tenant holds `attack` leases on its own keys (max 1 each, never released); then
    the victim does 20 acquire/release cycles. Returns (victim cycles completed, the
    attacker's admitted count, the attacker's distinct refusal messages)."""
    r = srv.resp()
    r.sock.settimeout(60)
    admitted, refusals = 0, set()
    for base in range(0, attack, chunk):
        for rep in pipeline(r, [("SL.ACQUIRE", "attack", "k%d" % i) for i in range(base, base + chunk)]):
            if isinstance(rep, RespError):
                refusals.add(str(rep))
            elif as_dict(rep)["allowed"] == 1:
                admitted += 1
    v = srv.resp()
    ok = 0
    for _ in range(20):
        a = v.command("SL.ACQUIRE", "victim", "v")
        if isinstance(a, RespError):
            continue
        d = as_dict(a)
        if d["allowed"] != 1:
            continue
        if v.command("SL.RELEASE", d["token"]) == "OK":
            ok += 1
    r.close()
    v.close()
    return ok, admitted, refusals


def refusals_metric(srv, table):
    m = requests.get(srv.admin + "/metrics", timeout=5).text
    hit = re.search(r'^sluice_table_refusals_total\{table="%s"\} (\d+)$' % table, m, re.M)
    assert hit, m[-2000:]
    return int(hit.group(1))


def assert_fair(srv, ok, admitted, refusals):
    assert ok == 20, "victim completed %d of 20 cycles" % ok
    # the attacker got its share (half of the 65,536: two policies issue tokens), no more,
    # and every refusal says why
    assert 30000 <= admitted <= 32768, admitted
    assert len(refusals) == 1 and "token table is full" in next(iter(refusals)), refusals
    assert refusals_metric(srv, "tokens") >= 70000 - 32768


def test_token_table_exhaustion_memory(make_server):
    srv = make_server(config_text=TOKENS_CONFIG)
    ok, admitted, refusals = flood_and_cycle(srv)
    assert_fair(srv, ok, admitted, refusals)
    # HTTP: the same refusal is a 503 problem naming the table, nothing charged
    r = requests.post(srv.http + "/v1/acquire", json={"policy": "attack", "key": "fresh"}, timeout=5)
    assert r.status_code == 503, r.text
    assert "token table is full" in r.text


def test_token_table_exhaustion_redis(redis, make_server):
    srv = make_server(config_text=TOKENS_CONFIG, extra=["--store", "redis://127.0.0.1:%d?timeout_ms=5000" % redis.port])
    ok, admitted, refusals = flood_and_cycle(srv)
    assert_fair(srv, ok, admitted, refusals)


def test_token_table_exhaustion_redis_key_secret(redis, make_server):
    """With a key_secret, tokens are claimed in Redis (no local table): the victim keeps
    working and the attacker's leases are its own keys' business."""
    text = TOKENS_CONFIG.replace("store:\n  type: memory\n  max_keys: 400000\n",
                                 "store:\n  type: redis\n  addr: 127.0.0.1:%d\n  timeout: 5s\n"
                                 "  key_secret: shared-by-all\n" % redis.port)
    srv = make_server(config_text=text)
    ok, admitted, refusals = flood_and_cycle(srv)
    assert ok == 20, ok
    assert admitted == 70000 and not refusals, (admitted, refusals)


# ---- a revoked admin token on a connection already open -----------------------------------

ADMIN_CONFIG = """
workers: 2
admin:
  tokens: [ { name: ops, token: %s } ]
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    algorithm: token_bucket
    limits:
      - { rate: 10/s, burst: 20 }
"""


def test_revoked_admin_token_refused_on_open_connections(make_server):
    old, new = "old-admin-token-1", "new-admin-token-2"
    srv = make_server(config_text=ADMIN_CONFIG % old)
    conns = [srv.resp() for _ in range(4)]  # spread over the workers
    for c in conns:
        assert c.command("AUTH", old) == "OK"
        assert c.command("SL.RESET", "api", "k") == 1
        assert isinstance(c.command("SL.CLOCK", "ADVANCE", 1), int)
    hello = srv.resp()
    assert isinstance(hello.command("HELLO", "2", "AUTH", "default", old), list)
    conns.append(hello)
    with open(srv.config_path, "w") as f:
        f.write(ADMIN_CONFIG % new)
    r = requests.post(srv.admin + "/v1/reload", headers={"Authorization": "Bearer " + old}, timeout=10)
    assert r.status_code == 200, r.text
    for c in conns:  # the very next command is refused, on every open connection
        e = c.command("SL.RESET", "api", "k")
        assert isinstance(e, RespError) and e.startswith("NOAUTH"), e
        e = c.command("SL.CLOCK", "ADVANCE", 1)
        assert isinstance(e, RespError) and e.startswith("NOAUTH"), e
    # HTTP refuses the old token too; the new one works on the same connection after AUTH
    assert requests.post(srv.admin + "/v1/reload", headers={"Authorization": "Bearer " + old},
                         timeout=10).status_code == 401
    c = conns[0]
    assert isinstance(c.command("AUTH", old), RespError)
    assert c.command("AUTH", new) == "OK"
    assert c.command("SL.RESET", "api", "k") == 1
    for c in conns:
        c.close()


# ---- credentials never in any output --------------------------------------------------------

PW = "Pw-9f3c-S3CRET"

CRED_BASE = """
workers: 1
admin:
  tokens: [ { name: ops, token: admin-tok-%(pw)s } ]
log: { format: %(fmt)s, file: sluice.log }
audit: { file: audit.jsonl }
%(store)s
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    algorithm: token_bucket
    limits:
      - { rate: 10/s, burst: 20 }
"""

# every field a store password can come through, each made invalid so the config is refused
BAD_STORES = [
    'store: {type: redis, addr: "redis://app:%s@127.0.0.1:6379x"}' % PW,
    'store: {type: redis, addr: "redis://%s@127.0.0.1:6379x"}' % PW,
    'store: {type: redis, addr: "redis://app:%s@127.0.0.1:6379/0?password=%s&bogus=1x"}' % (PW, PW),
    'store: {type: redis, addr: "rediss://app:%s%s@127.0.0.1:6379x"}' % (PW, "x" * 80),
    'store: {type: redis, sentinel: {master: m, addrs: ["app:%s@127.0.0.1:2x", "redis://u:%s@h:1x"]}}' % (PW, PW),
]


def all_outputs(srv):
    out = [srv.output()]
    for name in ("sluice.log", "audit.jsonl"):
        try:
            with open(os.path.join(srv.dir, name)) as f:
                out.append(f.read())
        except OSError:
            pass
    return "\n".join(out)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_no_password_in_any_output_of_a_refused_config(make_server, fmt):
    good = CRED_BASE % {"pw": PW, "fmt": fmt, "store": ""}
    srv = make_server(config_text=good)
    auth = {"Authorization": "Bearer admin-tok-" + PW}
    seen, marks = [], 0
    for bad in BAD_STORES:
        text = CRED_BASE % {"pw": PW, "fmt": fmt, "store": bad}
        with open(srv.config_path, "w") as f:
            f.write(text)
        r = requests.post(srv.admin + "/v1/reload", headers=auth, timeout=10)
        assert r.status_code != 200, r.text  # refused
        seen.append(r.text)
        marks += r.text.count("***")
        srv.signal(signal_hup())
        time.sleep(0.3)
        c = subprocess.run([BIN, "config", "check", srv.config_path], capture_output=True, text=True, timeout=30)
        assert c.returncode != 0
        seen += [c.stdout, c.stderr]
        c = subprocess.run([BIN, "config", "check", "--no-state", srv.config_path],
                           capture_output=True, text=True, timeout=30)
        seen += [c.stdout, c.stderr]
    seen.append(requests.get(srv.admin + "/v1/audit", headers=auth, timeout=10).text)
    seen.append(requests.get(srv.admin + "/metrics", timeout=10).text)
    with open(srv.config_path, "w") as f:
        f.write(good)
    srv.stop()
    seen.append(all_outputs(srv))
    blob = "\n".join(seen)
    assert "reload_refused" in blob or "refused" in blob  # the outputs were there to search
    assert marks >= len(BAD_STORES), seen[:2]  # the answers show where a password was
    for leak in (PW, PW.replace("-", "%2D")):
        assert leak not in blob, blob[max(0, blob.find(leak) - 300):blob.find(leak) + 100]


def signal_hup():
    import signal
    return signal.SIGHUP


def test_no_password_from_the_command_line_or_environment(tmp_path):
    cfg = tmp_path / "ok.yaml"
    text = CRED_BASE % {"pw": "x", "fmt": "text", "store": ""}
    cfg.write_text(text.replace("sluice.log", str(tmp_path / "s.log")).replace("audit.jsonl", str(tmp_path / "a.jsonl")))
    urls = ["redis://app:%s@127.0.0.1:6379x" % PW, "redis://%s@127.0.0.1:1/0?bogus=1" % PW,
            "redis://127.0.0.1:1/0?password=%s&bogus=1" % PW,
            "redis-sentinel://app:%s@127.0.0.1:2x/m" % PW]
    outs = []
    for u in urls:
        for how in ("flag", "env"):
            env = dict(os.environ)
            argv = [BIN, "serve", "-c", str(cfg), "--http", "127.0.0.1:0", "--resp", "127.0.0.1:0",
                    "--admin", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]
            if how == "flag":
                argv += ["--store", u]
            else:
                env["SLUICE_STORE"] = u
            p = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
            assert p.returncode != 0, (u, p.stdout, p.stderr)
            outs += [p.stdout, p.stderr]
    for f in tmp_path.iterdir():
        if f.suffix in (".log", ".jsonl"):
            outs.append(f.read_text())
    blob = "\n".join(outs)
    assert "store" in blob
    assert PW not in blob, blob


# ---- settle/release tokens are sealed (issue 26) ------------------------------------------

SEALED_CONFIG = """
workers: 2
%s
policies:
  - name: gpu-slots-policy
    objective: protection
    key: [header.x-tenant]
    algorithm: concurrency
    limits:
      - { max: 2, lease: 10m }
  - name: llm-tokens-policy
    objective: cost
    key: [header.x-tenant]
    cost: { default: 777, settle: true }
    algorithm: token_bucket
    limits: [ { rate: 100000/h, burst: 100000 } ]
"""


def test_tokens_show_nothing_and_refuse_tampering(make_server):
    srv = make_server(config_text=SEALED_CONFIG % "")
    other = make_server(config_text=SEALED_CONFIG % "")
    key = "tenant-secret-4711"
    c = srv.resp()
    toks = [as_dict(c.command("SL.ACQUIRE", "gpu-slots-policy", key))["token"].decode() for _ in range(2)]
    j = requests.post(srv.http + "/v1/check", json={"policy": "llm-tokens-policy", "key": key}, timeout=5).json()
    settle = j["token"]
    for t in toks + [settle]:
        assert re.fullmatch(r"t4[A-Za-z0-9_-]+", t), t
        for needle in ("gpu-slots-policy", "llm-tokens-policy", key, "777"):
            assert needle not in t and needle.encode().hex() not in t, (needle, t)
    assert toks[0] != toks[1]
    # a changed character, a token cut short, another instance's token: invalid, said so
    bad = toks[0][:10] + ("A" if toks[0][10] != "A" else "B") + toks[0][11:]
    for t in (bad, toks[0][:-4], toks[0] + "AAAA"):
        e = c.command("SL.RELEASE", t)
        assert isinstance(e, RespError) and e.startswith("ERR invalid token"), e
    o = other.resp()
    e = o.command("SL.RELEASE", toks[0])
    assert isinstance(e, RespError) and e.startswith("ERR invalid token"), e
    r = requests.post(other.http + "/v1/settle", json={"token": settle, "actual": 1}, timeout=5)
    assert r.status_code == 400 and "invalid token" in r.text, r.text
    o.close()
    # the genuine ones still work, once
    assert c.command("SL.RELEASE", toks[0]) == "OK"
    assert str(c.command("SL.RELEASE", toks[0])).startswith("ERR token already used")
    r = requests.post(srv.http + "/v1/settle", json={"token": settle, "actual": 100}, timeout=5)
    assert r.status_code == 200, r.text
    c.close()


def test_sealed_tokens_survive_a_restart_with_a_shared_secret(redis):
    """The key comes from store.key_secret (HMAC-SHA-256 of it): a token from before a
    restart, or from another instance, opens; its single use is claimed in Redis."""
    text = SEALED_CONFIG % ("store:\n  type: redis\n  addr: 127.0.0.1:%d\n  timeout: 5s\n"
                            "  key_secret: shared-by-all\n" % redis.port)
    a = Server(config_text=text, test_clock=False)
    try:
        c = a.resp()
        got = [as_dict(c.command("SL.ACQUIRE", "gpu-slots-policy", "ten")) for _ in range(2)]
        assert all(g["allowed"] == 1 and g["token"].startswith(b"t4") for g in got), got
        held = [g["token"] for g in got]
        c.close()
    finally:
        assert a.stop() == 0
    a.assert_clean()
    b = Server(config_text=text, test_clock=False)
    try:
        c = b.resp()
        assert as_dict(c.command("SL.ACQUIRE", "gpu-slots-policy", "ten"))["allowed"] == 0  # both held
        assert c.command("SL.RELEASE", held[0]) == "OK"
        assert as_dict(c.command("SL.ACQUIRE", "gpu-slots-policy", "ten"))["allowed"] == 1
        assert str(c.command("SL.RELEASE", held[0])).startswith("ERR token already used")
        c.close()
    finally:
        assert b.stop() == 0
    b.assert_clean()


# ---- CL.THROTTLE parameter sets --------------------------------------------------------------

def resp_from(srv, source_ip):
    """A RESP client whose connection comes from `source_ip` (another loopback address:
    another client as the server tells them apart)."""
    from conftest import Resp
    r = Resp.__new__(Resp)
    r.sock = socket.create_connection(("127.0.0.1", srv.resp_port), timeout=30, source_address=(source_ip, 0))
    r.buf = b""
    return r


def test_cl_throttle_parameter_sets_are_shared_fairly(make_server):
    srv = make_server()
    victim = srv.resp()
    # the victim's sets, with state: 3 of a burst of 10 taken on each
    mine = [(9, 10, 60), (19, 100, 3600), (4, 1, 1)]
    for b, c, p in mine:
        for _ in range(3):
            assert victim.command("CL.THROTTLE", "v", b, c, p)[0] == 0
    attacker = resp_from(srv, "127.0.0.2")
    attacker.sock.settimeout(60)
    replies = []
    for base in range(0, 10000, 1000):
        replies += pipeline(attacker, [("CL.THROTTLE", "a", 1000 + i, 1, 1) for i in range(base, base + 1000)])
    made = [r for r in replies if isinstance(r, list)]
    refused = {str(r) for r in replies if isinstance(r, RespError)}
    assert len(made) == 64, len(made)  # its share
    assert len(refused) == 1 and "its share of CL.THROTTLE parameter sets" in next(iter(refused)), refused
    # another connection from the same address has the same share
    again = resp_from(srv, "127.0.0.2")
    assert isinstance(again.command("CL.THROTTLE", "a", 99999, 1, 1), RespError)
    # the victim's sets kept their state, and the victim (and a third client) make new ones
    for b, c, p in mine:
        r = victim.command("CL.THROTTLE", "v", b, c, p)
        assert r[0] == 0 and r[2] == b + 1 - 4, r  # the 4th of burst b + 1
    for i in range(20):
        assert isinstance(victim.command("CL.THROTTLE", "v", 500 + i, 1, 1), list)
    third = resp_from(srv, "127.0.0.3")
    assert isinstance(third.command("CL.THROTTLE", "t", 77, 7, 7), list)
    # the attacker's own sets still answer it; once it has left them idle, it may make others
    assert isinstance(attacker.command("CL.THROTTLE", "a", 1000, 1, 1), list)
    srv.clock_advance(61 * 1000)
    assert isinstance(attacker.command("CL.THROTTLE", "a", 50000, 1, 1), list)
    assert refusals_metric(srv, "cl_throttle") == 10000 - 64 + 1
    for c in (victim, attacker, again, third):
        c.close()


def test_cl_throttle_sets_after_a_reload(make_server):
    """A reload neither forgets the sets nor the shares (the table is the server's)."""
    srv = make_server()
    c = srv.resp()
    for i in range(64):
        assert isinstance(c.command("CL.THROTTLE", "k", 10 + i, 1, 1), list)
    assert isinstance(c.command("CL.THROTTLE", "k", 9999, 1, 1), RespError)
    srv.signal(signal_hup())
    time.sleep(0.5)
    assert isinstance(c.command("CL.THROTTLE", "k", 10, 1, 1), list)
    srv.clock_advance(61 * 1000)
    assert isinstance(c.command("CL.THROTTLE", "k", 9999, 1, 1), list)
    c.close()


# ---- the worker's waiting records: a share per connection -----------------------------------

RLS_CONFIG = """
domain: rl
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100000 }
"""


def test_waiting_records_a_share_per_connection(redis, pb):
    """Redis stalled: five gRPC connections of one client open 1,000 calls each. Each
    connection waits with at most its share (64) of the worker's records, its other calls
    are refused at once (UNAVAILABLE, counted); another client's call still waits for its
    answer instead of being refused or answered by the failure mode (before: the first
    1,024 calls took the worker's and the Redis client's room, and the victim's call was
    answered at once by the failure mode)."""
    import grpc
    srv = Server(config_text=RLS_CONFIG, test_clock=False, workers=1,
                 extra=["--store", "redis://127.0.0.1:%d?timeout_ms=30000" % redis.port])
    # one connection each: channel arguments that differ keep gRPC from sharing one
    chans = [grpc.insecure_channel(srv.grpc, options=[("grpc.use_local_subchannel_pool", 1),
                                                      ("grpc.primary_user_agent", "client-%d" % i)])
             for i in range(6)]
    stubs = [pb.rls_pb2_grpc.RateLimitServiceStub(ch) for ch in chans]
    D = pb.envoy_ratelimit_pb2.RateLimitDescriptor

    def req(v):
        return pb.rls_pb2.RateLimitRequest(domain="rl", descriptors=[D(entries=[D.Entry(key="user", value=v)])])

    stopped = False
    try:
        for st in stubs:
            assert st.ShouldRateLimit(req("warm"), timeout=10).overall_code == 1
        os.kill(redis.proc.pid, signal_stop())
        stopped = True
        futs = [st.ShouldRateLimit.future(req("a%d" % i), timeout=60) for st in stubs[:5] for i in range(1000)]
        deadline = time.time() + 30
        while sum(f.done() for f in futs) < 5 * (1000 - 64) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        done = [f for f in futs if f.done()]
        assert len(done) == 5 * (1000 - 64), len(done)
        assert all(f.exception() is not None and f.exception().code() == grpc.StatusCode.UNAVAILABLE for f in done)
        victim = stubs[5].ShouldRateLimit.future(req("victim"), timeout=60)
        time.sleep(1.0)
        assert not victim.done(), victim.exception()  # waiting for Redis, not refused
        os.kill(redis.proc.pid, signal_cont())
        stopped = False
        assert victim.result().overall_code == 1
        m = requests.get(srv.admin + "/metrics", timeout=10).text
        assert re.search(r'^sluice_table_refusals_total\{table="pending"\} %d$' % (5 * (1000 - 64)), m, re.M), \
            [l for l in m.splitlines() if "refusals" in l]
        for f in futs:
            if f not in done:
                assert f.result().overall_code == 1
    finally:
        if stopped:
            os.kill(redis.proc.pid, signal_cont())
        for ch in chans:
            ch.close()
        srv.stop()
        srv.assert_clean()


def signal_stop():
    import signal
    return signal.SIGSTOP


def signal_cont():
    import signal
    return signal.SIGCONT
