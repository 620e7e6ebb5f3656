# SPDX-License-Identifier: Apache-2.0
"""test_ext_proc.py -- Envoy external processing (envoy.service.ext_proc.v3) on sluice's gRPC
listener as an LLM token-budget enforcer (issue 24, docs/ai-gateway.md). A grpcio client plays
Envoy's side of ExternalProcessor/Process (request headers, the request body BUFFERED, response
headers, response body chunks STREAMED) over recorded provider streams (fixtures/llm/):
reservation, clamping max_tokens, refusal with 429, the stream cut at its budget (valid SSE,
JSON, UTF-8), settlement to the usage, a stream without usage, a client gone mid-stream, and
hostile input (a 100 MB body, broken JSON, hostile usages, chunks split anywhere, thousands of
concurrent streams). State is read back through /v1/check peeks (cost 0) of the same key."""
import asyncio
import json
import os
import queue
import re
import threading
import time

import grpc
import pytest
import requests

from conftest import Server

SRC = os.environ.get("SLUICE_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(SRC, "tests", "integration", "fixtures", "llm")
PATH = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"

CONFIG = """
policies:
  - name: chat
    match: { method: POST, path: /v1/chat/completions }
    key: [header.authorization]
    llm: { bytes_per_token: 4, default_max_tokens: 300, on_short: %(on_short)s, min_output: %(min_output)d }
    cost: { default: 1, settle: true, unit: tokens }
    headers: openai
    algorithm: fixed_window
    limits:
      - { name: out, rate: %(out)d/%(per)s, counts: output_tokens }
      - { name: tot, rate: 1000000/min, counts: total_tokens }
  - name: msgs
    match: { method: POST, path: /v1/messages }
    key: [header.x-api-key]
    llm: { bytes_per_token: 4, on_short: %(on_short)s, min_output: %(min_output)d }
    cost: { default: 1, settle: true, unit: tokens }
    headers: anthropic
    algorithm: fixed_window
    limits:
      - { name: a-out, rate: %(out)d/%(per)s, counts: output_tokens }
"""


def config(out=100000, on_short="clamp", min_output=1, per="min"):
    return CONFIG % {"out": out, "on_short": on_short, "min_output": min_output, "per": per}


def fixture(name, mode="rb"):
    with open(os.path.join(FIX, name), mode) as f:
        return f.read()


@pytest.fixture(scope="module")
def xp(pb):
    import importlib
    return importlib.import_module("ext_proc_pb2")


class Stream:
    """One ext_proc stream, driven as Envoy drives it: one ProcessingRequest, then its
    ProcessingResponse."""

    def __init__(self, channel, xp, timeout=20):
        self.xp = xp
        self.q = queue.Queue()
        call = channel.stream_stream(PATH, request_serializer=xp.ProcessingRequest.SerializeToString,
                                     response_deserializer=xp.ProcessingResponse.FromString)
        self.it = call(iter(self.q.get, None), timeout=timeout)

    def send(self, req):
        self.q.put(req)
        return next(self.it)

    def headers(self, path="/v1/chat/completions", key=("authorization", "Bearer k1"), eos=False, extra=()):
        H = self.xp.ProcessingRequest
        hs = [(":method", "POST"), (":path", path), (":authority", "api.example"),
              ("content-type", "application/json"), key] + list(extra)
        req = H(request_headers=self.xp.HttpHeaders(end_of_stream=eos))
        for k, v in hs:
            req.request_headers.headers.headers.add(key=k, raw_value=v.encode())
        return self.send(req)

    def body(self, data, eos=True):
        return self.send(self.xp.ProcessingRequest(request_body=self.xp.HttpBody(body=data, end_of_stream=eos)))

    def resp_headers(self):
        req = self.xp.ProcessingRequest(response_headers=self.xp.HttpHeaders())
        req.response_headers.headers.headers.add(key=":status", raw_value=b"200")
        return self.send(req)

    def resp_body(self, data, eos=False):
        return self.send(self.xp.ProcessingRequest(response_body=self.xp.HttpBody(body=data, end_of_stream=eos)))

    def close(self):
        self.q.put(None)
        return list(self.it)

    def cancel(self):
        self.it.cancel()


def forwarded(chunk, r):
    """What Envoy sends on for a response body chunk, given sluice's BodyResponse."""
    cr = r.response_body.response
    if cr.HasField("body_mutation"):
        bm = cr.body_mutation
        if bm.WhichOneof("mutation") == "clear_body":
            return b""
        return bm.body
    return chunk


def run_response(st, data, size):
    out = b""
    chunks = [data[i:i + size] for i in range(0, len(data), size)]
    for i, c in enumerate(chunks):
        r = st.resp_body(c, eos=i == len(chunks) - 1)
        assert r.WhichOneof("response") == "response_body", r
        out += forwarded(c, r)
    return out


def peek(s, key="Bearer k1", path="/v1/chat/completions", hdr="authorization"):
    r = requests.post(s.http + "/v1/check", json={"request": {"method": "POST", "path": path,
                      "headers": {hdr: key}}, "cost": 0}, timeout=5)
    assert r.status_code in (200, 429), r.text
    return {l["name"]: l["remaining"] for l in r.json()["limits"]}


def metric(s, name, **labels):
    text = requests.get(s.admin + "/metrics", timeout=5).text
    lab = ",".join('%s="%s"' % kv for kv in labels.items())
    m = re.search(r"^%s\{%s\} (\d+)" % (re.escape(name), re.escape(lab)), text, re.M)
    return int(m.group(1)) if m else 0


def settled(s, result):
    return metric(s, "sluice_llm_settlements_total", result=result)


def wait_for(pred, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def check_sse(raw, provider):
    """Valid UTF-8, whole SSE events, every data line JSON (but OpenAI's [DONE])."""
    text = raw.decode("utf-8")  # raises on invalid UTF-8
    assert text.endswith("\n\n"), text[-200:]
    events = [e for e in text.split("\n\n") if e.strip()]
    datas = []
    for e in events:
        lines = e.split("\n")
        for ln in lines:
            assert ln.startswith(("data:", "event:", ":")), repr(e)
        d = "\n".join(ln[5:].lstrip() for ln in lines if ln.startswith("data:"))
        datas.append(d if d == "[DONE]" else json.loads(d))
    return datas


def content_of(datas):
    s = ""
    for d in datas:
        if isinstance(d, dict):
            for c in d.get("choices", []):
                s += c.get("delta", {}).get("content", "") or ""
            if d.get("type") == "content_block_delta":
                s += d["delta"].get("text", "")
    return s


def mutated_header(cr, name):
    for o in cr.header_mutation.set_headers:
        if o.header.key == name:
            return (o.header.raw_value or o.header.value.encode()).decode()
    return None


@pytest.fixture
def chan():
    made = []

    def make(s):
        c = grpc.insecure_channel(s.grpc, options=[("grpc.max_send_message_length", 200 << 20),
                                                   ("grpc.max_receive_message_length", 200 << 20)])
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


# ---- the protocol ----------------------------------------------------------------------------

def test_headers_continue_and_request_without_body(make_server, chan, xp):
    s = make_server(config_text=config())
    ch = chan(s)
    st = Stream(ch, xp)
    r = st.headers()
    assert r.WhichOneof("response") == "request_headers"
    assert r.request_headers.response.status == xp.CommonResponse.CONTINUE
    assert st.close() == []
    # a request without a body is decided on its headers (here: no LLM counts, admitted)
    st = Stream(ch, xp)
    r = st.headers(path="/other", eos=True)
    assert r.WhichOneof("response") == "request_headers"
    assert st.close() == []


def test_unknown_phase_and_garbage_are_grpc_errors(make_server, chan, xp):
    s = make_server(config_text=config())
    ch = chan(s)
    raw = ch.stream_stream(PATH, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as e:
        list(raw(iter([b"\xff\xff\xff"]), timeout=5))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        list(raw(iter([b""]), timeout=5))  # an empty ProcessingRequest names no phase
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # the listener still answers
    st = Stream(ch, xp)
    assert st.headers().WhichOneof("response") == "request_headers"
    st.close()


# ---- reservation, settlement ------------------------------------------------------------------

def test_openai_stream_reserves_then_settles_to_the_usage(make_server, chan, xp):
    s = make_server(config_text=config(out=100000))
    ch = chan(s)
    body = fixture("openai_chat_request.json")  # max_tokens 400
    est = -(-len(body) // 4)
    st = Stream(ch, xp)
    st.headers()
    r = st.body(body)
    assert r.WhichOneof("response") == "request_body", r
    assert not r.request_body.response.HasField("body_mutation")  # nothing to clamp
    left = peek(s)
    assert left["out"] == 100000 - 400, left  # the reservation: max_tokens
    assert left["tot"] == 1000000 - (est + 400), left
    r = st.resp_headers()
    assert r.WhichOneof("response") == "response_headers"
    sse = fixture("openai_chat_stream.sse")
    out = run_response(st, sse, 97)
    assert out == sse  # under the budget: the stream goes through unchanged
    assert st.close() == []
    # usage: prompt 1200 with 1024 cached (weight 0): input 176, output 52
    assert wait_for(lambda: peek(s)["out"] == 100000 - 52), peek(s)
    assert peek(s)["tot"] == 1000000 - (176 + 52)
    assert settled(s, "usage") == 1
    assert settled(s, "estimate") == 0 and settled(s, "reservation_kept") == 0


def test_the_redis_store_shares_reservations_and_settlements(chan, xp, redis):
    store = ["--store", "redis://127.0.0.1:%d?timeout_ms=2000" % redis.port]
    # real clock: an hour's window, so a minute boundary does not reset it mid-test
    a = Server(config_text=config(out=1000, per="hour"), test_clock=False, extra=store)
    b = Server(config_text=config(out=1000, per="hour"), test_clock=False, extra=store)
    try:
        st = Stream(chan(a), xp)
        st.headers()
        st.body(fixture("openai_chat_request.json"))
        assert peek(b)["out"] == 1000 - 400  # the other instance sees the reservation
        # a second request on B is clamped to what A left
        st2 = Stream(chan(b), xp)
        st2.headers()
        body = json.dumps({"model": "m", "stream": True, "max_tokens": 900,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        r = st2.body(body)
        assert json.loads(r.request_body.response.body_mutation.body)["max_tokens"] == 600
        st2.resp_headers()  # B's response never sends a body: its reservation stands
        st.resp_headers()
        run_response(st, fixture("openai_chat_stream.sse"), 500)
        st.close()
        st2.close()
        # A settled 400 -> 52; B's reservation (600) stands: 1000 - 52 - 600
        assert wait_for(lambda: peek(b)["out"] == 1000 - 52 - 600), peek(b)
        assert settled(a, "usage") == 1 and settled(b, "reservation_kept") == 1
    finally:
        for s in (a, b):
            s.stop()
        for s in (a, b):
            s.assert_clean()


def test_stream_reset_while_its_decision_waits_gives_the_reservation_back(chan, xp, redis):
    import signal
    s = Server(config_text=config(out=1000, per="hour"), test_clock=False, workers=1,
               extra=["--store", "redis://127.0.0.1:%d?timeout_ms=5000" % redis.port])
    try:
        st = Stream(chan(s), xp)
        st.headers()
        os.kill(redis.proc.pid, signal.SIGSTOP)  # the decision waits for the store
        try:
            st.q.put(xp.ProcessingRequest(request_body=xp.HttpBody(body=fixture("openai_chat_request.json"),
                                                                   end_of_stream=True)))
            time.sleep(0.3)
            st.cancel()  # Envoy's downstream went away meanwhile
            time.sleep(0.3)
        finally:
            os.kill(redis.proc.pid, signal.SIGCONT)
        # the reservation made after the stream went is settled to no output at once
        assert wait_for(lambda: peek(s)["out"] == 1000), peek(s)
    finally:
        s.stop()
        s.assert_clean()


# ---- clamping and refusing -------------------------------------------------------------------

def test_clamp_rewrites_max_tokens_and_says_so(make_server, chan, xp):
    s = make_server(config_text=config(out=150))
    ch = chan(s)
    st = Stream(ch, xp)
    st.headers()
    body = fixture("openai_chat_request.json")  # max_tokens 400 > 150 left
    r = st.body(body)
    cr = r.request_body.response
    assert cr.body_mutation.WhichOneof("mutation") == "body"
    nb = json.loads(cr.body_mutation.body)
    assert nb["max_tokens"] == 150
    assert {k: v for k, v in nb.items() if k != "max_tokens"} == \
        {k: v for k, v in json.loads(body).items() if k != "max_tokens"}  # nothing else changed
    assert mutated_header(cr, "content-length") == str(len(cr.body_mutation.body))
    assert mutated_header(cr, "x-sluice-max-tokens-clamped") == "400->150"
    r = st.resp_headers()
    assert mutated_header(r.response_headers.response, "x-sluice-max-tokens-clamped") == "400->150"
    assert peek(s)["out"] == 0  # all that was left is reserved
    st.close()
    # a request without max_tokens gets the field (the policy's default 300 reserved)
    s2 = make_server(config_text=config(out=120))
    st = Stream(chan(s2), xp)
    st.headers()
    r = st.body(b'{"model":"m","stream":true,"messages":[]}')
    nb = json.loads(r.request_body.response.body_mutation.body)
    assert nb["max_tokens"] == 120 and nb["model"] == "m"
    assert mutated_header(r.request_body.response, "x-sluice-max-tokens-clamped") == "300->120"
    st.close()


def test_refuse_429_with_ratelimit_fields_and_dialect(make_server, chan, xp):
    s = make_server(config_text=config(out=500, on_short="reject"))
    first = Stream(chan(s), xp)
    first.headers()
    assert first.body(fixture("openai_chat_request.json")).WhichOneof("response") == "request_body"
    st = Stream(chan(s), xp)  # 100 left, 400 asked: refused, not clamped
    st.headers()
    r = st.body(fixture("openai_chat_request.json"))
    assert r.WhichOneof("response") == "immediate_response", r
    ir = r.immediate_response
    assert ir.status.code == 429
    hs = {o.header.key: o.header.raw_value.decode() for o in ir.headers.set_headers}
    assert hs["content-type"] == "application/problem+json"
    assert "ratelimit" in hs and "ratelimit-policy" in hs and "retry-after" in hs, hs
    assert "x-ratelimit-remaining-tokens" in hs and "x-ratelimit-reset-tokens" in hs, hs
    p = json.loads(ir.body)
    assert p["status"] == 429
    st.close()
    assert peek(s)["out"] == 100  # nothing reserved by the refused one
    first.close()


def test_admitted_response_headers_carry_the_ratelimit_fields(make_server, chan, xp):
    """An admitted request's response headers get the answer's RateLimit fields and the
    provider dialect (as a refusal's ImmediateResponse has them), beside the clamp header
    when max_tokens was clamped."""
    s = make_server(config_text=config(out=1000))
    st = Stream(chan(s), xp)
    st.headers()
    assert st.body(fixture("openai_chat_request.json")).WhichOneof("response") == "request_body"
    r = st.resp_headers()
    cr = r.response_headers.response
    hs = {o.header.key: o.header.raw_value.decode() for o in cr.header_mutation.set_headers}
    assert "ratelimit" in hs and "ratelimit-policy" in hs, hs
    assert "x-ratelimit-remaining-tokens" in hs, hs
    assert "x-sluice-max-tokens-clamped" not in hs and "retry-after" not in hs, hs
    assert not any("token" in k and "sluice" in k for k in hs), hs  # no settle token to the client
    st.close()
    st = Stream(chan(s), xp)  # 600 left of the output pool, 400 asked: admitted again, then
    st.headers()              # 200 left: clamped
    st.body(fixture("openai_chat_request.json"))
    st.close()
    st = Stream(chan(s), xp)
    st.headers()
    r = st.body(fixture("openai_chat_request.json"))
    assert mutated_header(r.request_body.response, "x-sluice-max-tokens-clamped") == "400->200"
    hs = {o.header.key: o.header.raw_value.decode()
          for o in st.resp_headers().response_headers.response.header_mutation.set_headers}
    assert hs["x-sluice-max-tokens-clamped"] == "400->200" and "ratelimit" in hs, hs
    st.close()


def test_below_min_output_is_refused(make_server, chan, xp):
    s = make_server(config_text=config(out=150, min_output=200))
    st = Stream(chan(s), xp)
    st.headers()
    r = st.body(fixture("openai_chat_request.json"))
    assert r.immediate_response.status.code == 429
    st.close()


# ---- the stream, cut at its budget ------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 7, 97, 4096])
def test_openai_stream_cut_at_the_budget(make_server, chan, xp, size):
    s = make_server(config_text=config(out=10))
    st = Stream(chan(s), xp)
    st.headers()
    r = st.body(fixture("openai_chat_request.json"))
    assert json.loads(r.request_body.response.body_mutation.body)["max_tokens"] == 10
    st.resp_headers()
    sse = fixture("openai_chat_stream.sse")
    out = run_response(st, sse, size)
    st.close()
    datas = check_sse(out, "openai")
    assert datas[-1] == "[DONE]"
    final = datas[-2]
    assert final["choices"][0]["finish_reason"] == "length"
    assert "chat" in json.dumps(final["error"])  # names the policy
    # at most 10 tokens of content went out (estimate: 4 bytes a token)
    assert len(content_of(datas).encode()) <= 10 * 4
    assert len(out) < len(sse)
    # the usage (52 completion tokens) still arrived and is what is charged
    assert wait_for(lambda: settled(s, "usage") == 1)
    assert peek(s)["out"] == 0


def test_anthropic_stream_cut_at_the_budget(make_server, chan, xp):
    s = make_server(config_text=config(out=8))
    st = Stream(chan(s), xp)
    st.headers(path="/v1/messages", key=("x-api-key", "ak1"))
    r = st.body(fixture("anthropic_messages_request.json"))
    assert json.loads(r.request_body.response.body_mutation.body)["max_tokens"] == 8
    st.resp_headers()
    out = run_response(st, fixture("anthropic_messages_stream.sse"), 61)
    st.close()
    datas = check_sse(out, "anthropic")
    types = [d["type"] for d in datas]
    assert types[-1] == "message_stop"
    md = datas[-2]
    assert md["type"] == "message_delta" and md["delta"]["stop_reason"] == "max_tokens"
    assert "content_block_stop" in types[-4:]
    assert len(content_of(datas).encode()) <= 8 * 4


def test_utf8_stream_split_everywhere_stays_valid(make_server, chan, xp):
    # multi-byte content, no usage: chunks of 1, 2, 3 bytes split every character
    s = make_server(config_text=config(out=12))
    sse = fixture("openai_chat_stream_utf8_nousage.sse")
    for size in (1, 2, 3, 5):
        st = Stream(chan(s), xp)
        st.headers(key=("authorization", "Bearer u%d" % size))
        st.body(json.dumps({"model": "m", "stream": True, "max_tokens": 12,
                            "messages": [{"role": "user", "content": "écris"}]}).encode())
        st.resp_headers()
        out = run_response(st, sse, size)
        st.close()
        datas = check_sse(out, "openai")
        assert datas[-1] == "[DONE]" and datas[-2]["choices"][0]["finish_reason"] == "length"
        assert len(content_of(datas).encode()) <= 12 * 4


# ---- settlement without usage, client gone ---------------------------------------------------

def test_complete_stream_without_usage_keeps_the_reservation(make_server, chan, xp):
    s = make_server(config_text=config(out=100000))
    st = Stream(chan(s), xp)
    st.headers()
    st.body(json.dumps({"model": "m", "stream": True, "max_tokens": 500,
                        "messages": [{"role": "user", "content": "x"}]}).encode())
    st.resp_headers()
    sse = fixture("openai_chat_stream_utf8_nousage.sse")
    assert run_response(st, sse, 300) == sse
    st.close()
    assert wait_for(lambda: settled(s, "reservation_kept") == 1)
    assert peek(s)["out"] == 100000 - 500  # the reservation stands
    log = open(s.log_path).read()
    assert "llm_reservation_kept" in log and "Bearer k1" not in log


def test_client_gone_mid_stream_settles_from_the_estimate(make_server, chan, xp):
    s = make_server(config_text=config(out=100000))
    st = Stream(chan(s), xp)
    st.headers()
    st.body(fixture("openai_chat_request.json"))
    st.resp_headers()
    sse = fixture("openai_chat_stream.sse")
    events = sse.split(b"\n\n")
    part = b"\n\n".join(events[:8]) + b"\n\n"  # 8 whole events: 7 content deltas
    st.resp_body(part)
    st.cancel()  # Envoy resets the ext_proc stream when the downstream goes
    delta = sum(len(json.loads(e[6:])["choices"][0]["delta"].get("content", "").encode())
                for e in events[:8] if e.startswith(b"data: {"))
    assert wait_for(lambda: settled(s, "estimate") == 1)
    assert wait_for(lambda: peek(s)["out"] == 100000 - (-(-delta // 4))), (peek(s), delta)
    assert settled(s, "usage") == 0


CHILD = r"""
import os, queue, sys, time
import grpc
sys.path.insert(0, sys.argv[1])
import ext_proc_pb2 as xp
c = grpc.insecure_channel(sys.argv[2])
q = queue.Queue()
it = c.stream_stream(sys.argv[3], request_serializer=xp.ProcessingRequest.SerializeToString,
                     response_deserializer=xp.ProcessingResponse.FromString)(iter(q.get, None), timeout=60)
def send(r):
    q.put(r)
    return next(it)
H = xp.ProcessingRequest
req = H(request_headers=xp.HttpHeaders(end_of_stream=False))
for k, v in ((":method", "POST"), (":path", "/v1/chat/completions"), (":authority", "api.example"),
             ("content-type", "application/json"), ("authorization", "Bearer k1")):
    req.request_headers.headers.headers.add(key=k, raw_value=v.encode())
send(req)
send(H(request_body=xp.HttpBody(body=open(sys.argv[4], "rb").read(), end_of_stream=True)))
r = H(response_headers=xp.HttpHeaders())
r.response_headers.headers.headers.add(key=":status", raw_value=b"200")
send(r)
send(H(response_body=xp.HttpBody(body=open(sys.argv[5], "rb").read(), end_of_stream=False)))
print("ready", flush=True)
time.sleep(60)
"""


def test_connection_killed_mid_stream_settles_from_the_estimate(make_server, xp, tmp_path):
    """Envoy (here a grpcio process) dies mid-stream: no RST_STREAM, the TCP connection just
    goes. The stream's reservation is settled from what streamed, once."""
    import subprocess
    import sys
    s = make_server(config_text=config(out=100000))
    events = fixture("openai_chat_stream.sse").split(b"\n\n")
    part = b"\n\n".join(events[:8]) + b"\n\n"
    (tmp_path / "part.sse").write_bytes(part)
    delta = sum(len(json.loads(e[6:])["choices"][0]["delta"].get("content", "").encode())
                for e in events[:8] if e.startswith(b"data: {"))
    child = subprocess.Popen([sys.executable, "-c", CHILD, os.path.dirname(xp.__file__), s.grpc, PATH,
                              os.path.join(FIX, "openai_chat_request.json"), str(tmp_path / "part.sse")],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert settled(s, "estimate") == 0
        child.kill()
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert wait_for(lambda: settled(s, "estimate") == 1), metric(s, "sluice_llm_settlements_total")
    assert wait_for(lambda: peek(s)["out"] == 100000 - (-(-delta // 4))), (peek(s), delta)
    time.sleep(0.3)
    assert settled(s, "estimate") == 1 and settled(s, "usage") == 0


# ---- hostile input ---------------------------------------------------------------------------

def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def test_100mb_body_is_refused_with_bounded_memory(make_server, chan, xp):
    s = make_server(config_text=config())
    ch = chan(s)
    before = rss_kb(s.proc.pid)
    st = Stream(ch, xp)
    st.headers()
    big = b'{"model":"m","messages":[{"role":"user","content":"' + b"a" * (100 << 20) + b'"}]}'
    try:
        r = st.body(big)
        assert r.immediate_response.status.code == 413
        assert b"above" in r.immediate_response.body
    except grpc.RpcError as e:  # the server may end the call before grpcio finished sending
        assert e.code() in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE,
                            grpc.StatusCode.INTERNAL), e
    st.cancel()
    assert rss_kb(s.proc.pid) - before < 40 * 1024  # far below the 100 MB sent
    st = Stream(ch, xp)  # the server goes on
    assert st.headers().WhichOneof("response") == "request_headers"
    st.close()


def test_broken_json_body_is_a_400(make_server, chan, xp):
    s = make_server(config_text=config())
    for bad in (b'{"model":"m","max_tokens":', b'{"model":"m","max_tokens":-5}', b'[1,2',
                b'{"model":"m","max_tokens":9223372036854775808}', b'\xff\xfe'):
        st = Stream(chan(s), xp)
        st.headers()
        r = st.body(bad)
        assert r.immediate_response.status.code == 400, (bad, r)
        assert json.loads(r.immediate_response.body)["status"] == 400
        st.close()
    assert peek(s)["out"] == 100000


@pytest.mark.parametrize("usage", ['{"prompt_tokens":10,"completion_tokens":-5,"total_tokens":5}',
                                   '{"prompt_tokens":10,"completion_tokens":9223372036854775808}',
                                   '{"prompt_tokens":10,"completion_tokens":1e9}'])
def test_hostile_usage_is_not_charged(make_server, chan, xp, usage):
    s = make_server(config_text=config(out=100000))
    st = Stream(chan(s), xp)
    st.headers()
    st.body(json.dumps({"model": "m", "stream": True, "max_tokens": 50,
                        "messages": [{"role": "user", "content": "x"}]}).encode())
    st.resp_headers()
    sse = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
           b'data: {"choices":[],"usage":' + usage.encode() + b'}\n\n'
           b'data: [DONE]\n\n')
    run_response(st, sse, 13)
    st.close()
    # the usage is refused: the reservation stands (50), nothing absurd is charged
    assert wait_for(lambda: settled(s, "reservation_kept") == 1)
    assert peek(s)["out"] == 100000 - 50


# ---- many streams ----------------------------------------------------------------------------

N_STREAMS = int(os.environ.get("SLUICE_XP_STREAMS", "2000"))


def test_many_concurrent_streams_each_settled_once(make_server, xp):
    s = make_server(config_text=config(out=10 ** 9), workers=2)
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 5,
                       "messages": [{"role": "user", "content": "x"}]}).encode()
    sse = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
           b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
           b'data: [DONE]\n\n')
    P = xp.ProcessingRequest

    def hdrs():
        req = P(request_headers=xp.HttpHeaders())
        for k, v in ((":method", "POST"), (":path", "/v1/chat/completions"),
                     ("content-type", "application/json"), ("authorization", "Bearer many")):
            req.request_headers.headers.headers.add(key=k, raw_value=v.encode())
        return req

    opened = [0]

    async def one(ch, gate):
        call = ch.stream_stream(PATH, request_serializer=P.SerializeToString,
                                response_deserializer=xp.ProcessingResponse.FromString)(timeout=90)
        await call.write(hdrs())
        await call.read()
        opened[0] += 1
        await gate.wait()  # every stream is open at once here
        await call.write(P(request_body=xp.HttpBody(body=body, end_of_stream=True)))
        r = await call.read()
        assert r.WhichOneof("response") == "request_body"
        await call.write(P(response_headers=xp.HttpHeaders()))
        await call.read()
        await call.write(P(response_body=xp.HttpBody(body=sse, end_of_stream=True)))
        r = await call.read()
        assert not r.response_body.response.HasField("body_mutation")
        await call.done_writing()
        assert await call.code() == grpc.StatusCode.OK

    async def main():
        nch = max(1, N_STREAMS // 500)  # at most 500 streams a connection (the cap is 1024)
        # a channel of its own each (grpc shares one connection between equal channels)
        chans = [grpc.aio.insecure_channel(s.grpc, options=[("grpc.use_local_subchannel_pool", 1)])
                 for _ in range(nch)]
        gate = asyncio.Event()
        tasks = [asyncio.ensure_future(one(chans[i % nch], gate)) for i in range(N_STREAMS)]
        t0 = time.time()
        while opened[0] < N_STREAMS and time.time() - t0 < 90:
            await asyncio.sleep(0.1)
            for t in tasks:
                if t.done() and t.exception() is not None:
                    raise t.exception()
        assert opened[0] == N_STREAMS, opened[0]
        peak = rss_kb(s.proc.pid)
        gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
        for c in chans:
            await c.close()
        return peak

    before = rss_kb(s.proc.pid)
    t0 = time.time()
    peak = asyncio.run(main())
    took = time.time() - t0
    print("%d concurrent ext_proc streams in %.1f s, RSS %d -> %d KiB" % (N_STREAMS, took, before, peak))
    assert wait_for(lambda: settled(s, "usage") == N_STREAMS, 20), settled(s, "usage")
    assert settled(s, "estimate") == 0 and settled(s, "reservation_kept") == 0
    # each settled once, to its usage: 2 output tokens a stream
    assert peek(s, key="Bearer many")["out"] == 10 ** 9 - 2 * N_STREAMS
    assert (rss_kb(s.proc.pid) - before) < 200 * 1024
