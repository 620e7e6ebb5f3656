# SPDX-License-Identifier: Apache-2.0
"""test_llm_api.py -- the application API's LLM forms (issue 24, docs/ai-gateway.md):
/v1/check with the LLM request body (raw string with its content type, or `llm: {...}`),
windows counting requests / input / output / total tokens apart, key parts llm.model and
llm.user, plans per model, a peek through the same pipeline, broken bodies refused, and
/v1/settle with the provider's usage object as is (per-window settlement)."""
import datetime
import json
import os
import re

import requests

from conftest import RespError, Server, as_dict

SRC = os.environ.get("SLUICE_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(SRC, "tests", "integration", "fixtures", "llm")

CONFIG = """
policies:
  - name: oa
    match: { method: POST, path: /v1/chat/completions }
    key: [header.authorization, llm.model]
    llm: { bytes_per_token: 4, cached_weight: 0.5, default_max_tokens: 1000 }
    cost: { default: 1, settle: true, unit: tokens }
    headers: openai
    algorithm: fixed_window
    limits:
      - { name: rpm, rate: 100/min, counts: requests }
      - { name: tpm, rate: 10000/min, counts: total_tokens }
    plan_from: llm.model
    plans:
      gpt-4o-mini:
        limits:
          - { name: mini-rpm, rate: 100/min, counts: requests }
          - { name: mini-tpm, rate: 50000/min, counts: total_tokens }
  - name: an
    match: { method: POST, path: /v1/messages }
    key: [llm.user]
    llm: { bytes_per_token: 4 }
    cost: { default: 1, settle: true, unit: tokens }
    headers: anthropic
    algorithm: fixed_window
    limits:
      - { name: an-rpm, rate: 100/min, counts: requests }
      - { name: an-in, rate: 100000/min, counts: input_tokens }
      - { name: an-out, rate: 2000/min, counts: output_tokens }
"""


def fixture(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


def check(s, body, path="/v1/chat/completions", cost=None, headers=None, ct="application/json"):
    req = {"method": "POST", "path": path, "headers": headers or {"authorization": "Bearer k1"},
           "body": body}
    if ct is not None:
        req["content_type"] = ct
    j = {"request": req}
    if cost is not None:
        j["cost"] = cost
    return requests.post(s.http + "/v1/check", json=j, timeout=5)


def limits(r):
    return {l["name"]: l for l in r.json()["limits"]}


def test_check_with_body_counts_each_pool(make_server):
    s = make_server(config_text=CONFIG)
    body = fixture("openai_chat_request.json")  # gpt-4o-mini, max_tokens 400
    est = -(-len(body.encode()) // 4)
    r = check(s, body)
    assert r.status_code == 200, r.text
    L = limits(r)
    assert set(L) == {"mini-rpm", "mini-tpm"}  # the model's plan
    assert L["mini-rpm"]["remaining"] == 99
    assert L["mini-tpm"]["remaining"] == 50000 - (est + 400)
    # a peek (cost 0) through the same pipeline takes nothing
    p = check(s, body, cost=0)
    assert limits(p)["mini-tpm"]["remaining"] == 50000 - (est + 400)
    # another model: the default windows, its own key
    other = json.loads(body)
    other["model"] = "gpt-4o"
    other.pop("max_tokens")
    ob = json.dumps(other)
    r2 = check(s, ob)
    L2 = limits(r2)
    assert set(L2) == {"rpm", "tpm"}
    assert L2["tpm"]["remaining"] == 10000 - (-(-len(ob) // 4) + 1000)  # default_max_tokens
    # the `llm: {...}` form
    r3 = requests.post(s.http + "/v1/check", json={"request": {"method": "POST", "path": "/v1/chat/completions",
                       "headers": {"authorization": "Bearer k2"}}, "llm": {"model": "gpt-4o", "max_tokens": 10}},
                       timeout=5)
    assert r3.status_code == 200, r3.text
    assert limits(r3)["rpm"]["remaining"] == 99


def test_check_refuses_broken_bodies(make_server):
    s = make_server(config_text=CONFIG)
    for bad, why in [("{\"model\": \"gpt-4o\", \"max_tokens\": -5}", "max_tokens"),
                     ("{\"model\": \"gpt-4o\", \"max_tokens\": 9223372036854775808}", "max_tokens"),
                     ("{\"model\": ", "broken JSON"),
                     ("[1]", "not a JSON object")]:
        r = check(s, bad)
        assert r.status_code == 400, (bad, r.text)
        assert why in r.json()["detail"], r.json()
    r = check(s, "{}", ct="text/plain")
    assert r.status_code == 400 and "content_type" in r.json()["detail"]


def test_anthropic_pools_and_user_key(make_server):
    s = make_server(config_text=CONFIG)
    body = fixture("anthropic_messages_request.json")  # max_tokens 400, user team-b
    r = check(s, body, path="/v1/messages", headers={})
    assert r.status_code == 200, r.text
    L = limits(r)
    assert L["an-out"]["remaining"] == 1600
    assert L["an-in"]["remaining"] == 100000 - (-(-len(body) // 4))
    # the output pool refuses on its own: 5 x 400 fits in 2000, the 6th does not
    for _ in range(4):
        assert check(s, body, path="/v1/messages", headers={}).status_code == 200
    r = check(s, body, path="/v1/messages", headers={})
    assert r.status_code == 429
    assert limits(r)["an-in"]["remaining"] > 0  # the input pool had room: all or nothing
    # another user has its own budget
    other = json.loads(body)
    other["metadata"]["user_id"] = "team-c"
    assert check(s, json.dumps(other), path="/v1/messages", headers={}).status_code == 200


def test_settle_with_the_providers_usage(make_server):
    s = make_server(config_text=CONFIG)
    body = fixture("openai_chat_request.json")
    r = check(s, body)
    tok = r.json()["token"]
    usage = {"prompt_tokens": 1200, "completion_tokens": 52, "total_tokens": 1252,
             "prompt_tokens_details": {"cached_tokens": 1024},
             "completion_tokens_details": {"reasoning_tokens": 30}}
    st = requests.post(s.http + "/v1/settle", json={"token": tok, "usage": usage}, timeout=5)
    assert st.status_code == 200, st.text
    L = limits(check(s, body, cost=0))
    # input = 1200 - 1024 + 1024 x 0.5, output 52 (reasoning inside), requests 1
    assert L["mini-tpm"]["remaining"] == 50000 - (1200 - 1024 + 512 + 52)
    assert L["mini-rpm"]["remaining"] == 99
    # settles once
    assert requests.post(s.http + "/v1/settle", json={"token": tok, "usage": usage}, timeout=5).status_code == 404
    # Anthropic: each pool settles to its own count; the whole response body is accepted too
    ab = fixture("anthropic_messages_request.json")
    r = check(s, ab, path="/v1/messages", headers={})
    tok = r.json()["token"]
    resp = {"id": "msg_1", "type": "message", "content": [{"type": "text", "text": "hi"}],
            "usage": {"input_tokens": 40, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 10,
                      "output_tokens": 25}}
    st = requests.post(s.http + "/v1/settle", json={"token": tok, "response": resp}, timeout=5)
    assert st.status_code == 200, st.text
    L = limits(check(s, ab, path="/v1/messages", headers={}, cost=0))
    assert L["an-out"]["remaining"] == 2000 - 25
    assert L["an-in"]["remaining"] == 100000 - 50  # reads at weight 0, creation at 1
    # hostile usage: refused, the token still usable
    r = check(s, ab, path="/v1/messages", headers={})
    tok = r.json()["token"]
    for bad in [{"input_tokens": -1, "output_tokens": 3}, {"input_tokens": 2 ** 63, "output_tokens": 1},
                {"foo": 1}]:
        st = requests.post(s.http + "/v1/settle", json={"token": tok, "usage": bad}, timeout=5)
        assert st.status_code == 400, (bad, st.text)
    assert requests.post(s.http + "/v1/settle", json={"token": tok, "usage": {"input_tokens": 1, "output_tokens": 1}},
                         timeout=5).status_code == 200


POOLS = """
policies:
  - name: pools
    match: { method: POST, path: /v1/chat/completions }
    key: [header.authorization]
    llm: { bytes_per_token: 4, default_max_tokens: 1000 }
    cost: { default: 1, settle: true, unit: tokens }
    algorithm: fixed_window
    limits:
      - { name: rq, rate: 100/min, counts: requests }
      - { name: in, rate: 100000/min, counts: input_tokens }
      - { name: out, rate: 100000/min, counts: output_tokens }
      - { name: tot, rate: 100000/min, counts: total_tokens }
      - { name: gen, rate: 100000/h }
"""


def test_plain_actual_settles_the_total_only(make_server):
    """A settle with a bare `actual` (no usage object) is a total: the total_tokens window and
    the windows without `counts:` settle to it, the per-pool windows (requests, input, output)
    keep what they reserved (docs/ai-gateway.md, "The application API")."""
    s = make_server(config_text=POOLS)
    body = fixture("openai_chat_request.json")  # max_tokens 400
    est = -(-len(body.encode()) // 4)
    r = check(s, body)
    assert r.status_code == 200, r.text
    L = limits(r)
    assert L["in"]["remaining"] == 100000 - est and L["out"]["remaining"] == 100000 - 400
    assert L["tot"]["remaining"] == 100000 - est - 400 and L["gen"]["remaining"] == 100000 - 1
    st = requests.post(s.http + "/v1/settle", json={"token": r.json()["token"], "actual": 300}, timeout=5)
    assert st.status_code == 200, st.text
    L = limits(check(s, body, cost=0))
    assert L["tot"]["remaining"] == 100000 - 300
    assert L["gen"]["remaining"] == 100000 - 300
    assert L["rq"]["remaining"] == 99  # one request, not 300
    assert L["in"]["remaining"] == 100000 - est  # as reserved
    assert L["out"]["remaining"] == 100000 - 400
    # the same over RESP
    c = s.resp()
    rr = as_dict(c.command("SL.CHECKREQ", "METHOD", "POST", "PATH", "/v1/chat/completions",
                           "HEADER", "authorization", "k9", "LLM", body))
    assert rr["allowed"] == 1, rr
    e = c.command("SL.SETTLE", rr["token"], "50")
    assert not isinstance(e, RespError), e
    c.close()
    L = limits(check(s, body, headers={"authorization": "k9"}, cost=0))
    assert L["tot"]["remaining"] == 100000 - 50 and L["rq"]["remaining"] == 99
    assert L["in"]["remaining"] == 100000 - est and L["out"]["remaining"] == 100000 - 400


# Parsers written from the providers' documentation (no official SDK ships in Debian):
# OpenAI's resets are Go durations ("6m0s", "1s", "20ms"), Anthropic's RFC 3339 times.
GO_DUR = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def go_duration_s(text):
    m = GO_DUR.match(text)
    assert m and text, "not a Go duration: %r" % text
    h, mi, s, ms = m.groups()
    return int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0) + int(ms or 0) / 1000.0


def rfc3339(text):
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", text), text
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def test_dialect_headers(make_server):
    s = make_server(config_text=CONFIG)
    body = fixture("openai_chat_request.json")
    est = -(-len(body) // 4)
    r = check(s, body)
    h = r.headers
    assert h["x-ratelimit-limit-requests"] == "100" and h["x-ratelimit-remaining-requests"] == "99"
    assert h["x-ratelimit-limit-tokens"] == "50000"
    assert int(h["x-ratelimit-remaining-tokens"]) == 50000 - est - 400
    for k in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"):
        assert 0 < go_duration_s(h[k]) <= 60, h[k]
    assert "RateLimit" in h  # the IETF fields stay
    # Anthropic: tokens = the most restrictive token window (output here), RFC 3339 resets
    ab = fixture("anthropic_messages_request.json")
    r = check(s, ab, path="/v1/messages", headers={})
    h = r.headers
    assert h["anthropic-ratelimit-requests-limit"] == "100"
    assert h["anthropic-ratelimit-output-tokens-remaining"] == "1600"
    assert h["anthropic-ratelimit-input-tokens-limit"] == "100000"
    assert h["anthropic-ratelimit-tokens-limit"] == "2000"  # output: least remaining
    assert h["anthropic-ratelimit-tokens-remaining"] == "1600"
    t0 = rfc3339(h["anthropic-ratelimit-requests-reset"])
    for fam in ("requests", "tokens", "input-tokens", "output-tokens"):
        t = rfc3339(h["anthropic-ratelimit-%s-reset" % fam])
        assert abs((t - t0).total_seconds()) <= 60
    # refused: remaining 0 and retry-after, in the dialect too
    for _ in range(4):
        check(s, ab, path="/v1/messages", headers={})
    r = check(s, ab, path="/v1/messages", headers={})
    assert r.status_code == 429
    assert r.headers["anthropic-ratelimit-output-tokens-remaining"] == "0"
    assert int(r.headers["retry-after"]) > 0


def test_resp_equivalents(make_server):
    s = make_server(config_text=CONFIG)
    c = s.resp()
    body = fixture("anthropic_messages_request.json")
    est = -(-len(body.encode()) // 4)
    r = as_dict(c.command("SL.CHECKREQ", "METHOD", "POST", "PATH", "/v1/messages", "LLM", body))
    assert r["allowed"] == 1, r
    tok = r["token"]
    assert isinstance(tok, bytes) and tok
    r = c.command("SL.SETTLE", tok, "USAGE", json.dumps({"input_tokens": 30, "output_tokens": 12}))
    assert not isinstance(r, RespError), r
    peek = as_dict(c.command("SL.CHECKREQ", "METHOD", "POST", "PATH", "/v1/messages", "LLM", body, "COST", "0"))
    assert peek["allowed"] == 1
    # a broken body and a hostile usage: clear errors
    e = c.command("SL.CHECKREQ", "METHOD", "POST", "PATH", "/v1/messages", "LLM", "{\"max_tokens\": -1}")
    assert isinstance(e, RespError) and "LLM body" in e, e
    r = as_dict(c.command("SL.CHECKREQ", "METHOD", "POST", "PATH", "/v1/messages", "LLM", body))
    e = c.command("SL.SETTLE", r["token"], "USAGE", "{\"output_tokens\": 9223372036854775808}")
    assert isinstance(e, RespError) and "usage" in e, e
    c.close()
    # what the settle left, read over HTTP: output 400 reserved then settled to 12
    L = limits(check(s, body, path="/v1/messages", headers={}, cost=0))
    assert L["an-out"]["remaining"] == 2000 - 12 - 400  # the second reservation still stands
    assert L["an-in"]["remaining"] == 100000 - 30 - est
