# SPDX-License-Identifier: Apache-2.0
"""test_llm_api.py -- the application API's LLM forms (issue 24, docs/ai-gateway.md):
/v1/check with the LLM request body (raw string with its content type, or `llm: {...}`),
windows counting requests / input / output / total tokens apart, key parts llm.model and
llm.user, plans per model, a peek through the same pipeline, broken bodies refused, and
/v1/settle with the provider's usage object as is (per-window settlement)."""
import json
import os

import requests

from conftest import Server

SRC = os.environ.get("SLUICE_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(SRC, "tests", "integration", "fixtures", "llm")

CONFIG = """
policies:
  - name: oa
    match: { method: POST, path: /v1/chat/completions }
    key: [header.authorization, llm.model]
    llm: { bytes_per_token: 4, cached_weight: 0.5, default_max_tokens: 1000 }
    cost: { default: 1, settle: true, unit: tokens }
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
