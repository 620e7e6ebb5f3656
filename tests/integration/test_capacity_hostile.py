# SPDX-License-Identifier: Apache-2.0
"""Capacity protection under hostile input and operator mistakes, through the real server
(memory and Redis stores): reloads that change what a stored state holds (classes or
borrowing added and removed) while leases are held. Every loop is bounded; servers use
free ports, on the test clock.
"""
import pytest
import requests

from conftest import RespError


def fields(reply):
    assert isinstance(reply, list), reply
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def redis_url(redis):
    return ["--store", "redis://127.0.0.1:%d?timeout_ms=2000" % redis.port]


def reload(srv, text):
    with open(srv.config_path, "w") as f:
        f.write(text)
    r = requests.post(srv.admin + "/v1/reload", timeout=10)
    assert r.status_code == 200, r.text


CONC = """
workers: 1
policies:
  - name: p
    key: []
    algorithm: concurrency
    limits: [ { max: 5, lease: 30s } ]
%s
"""
CLASSES = """    priority_from: header.x-priority
    classes: [ { name: critical }, { name: default, fill: 80% } ]
"""


@pytest.mark.parametrize("store", ["memory", "redis"])
@pytest.mark.parametrize("first,then", [("", CLASSES), (CLASSES, "")], ids=["classes-added", "classes-removed"])
def test_reload_changing_classes_keeps_leases(make_server, redis, store, first, then):
    """The slots in flight survive a reload that adds or removes classes (docs/capacity.md:
    "classes their slots in flight"), and the limit keeps deciding: on the Redis store the
    stored state (with or without the per-class tail) was unreadable by the new config,
    and every decision on the key failed open until it expired."""
    srv = make_server(config_text=CONC % first, extra=redis_url(redis) if store == "redis" else ())
    c = srv.resp()
    held = [fields(c.command("SL.ACQUIRE", "p", "", "CLASS", "critical"))["token"] for _ in range(3)]
    reload(srv, CONC % then)
    f = fields(c.command("SL.ACQUIRE", "p", "", "CLASS", "critical"))
    assert f["allowed"] == 1 and f["limit"] == 5 and f["remaining"] == 1, f
    held.append(f["token"])
    f = fields(c.command("SL.ACQUIRE", "p", "", "CLASS", "critical"))
    assert f["allowed"] == 1 and f["remaining"] == 0, f
    held.append(f["token"])
    f = fields(c.command("SL.ACQUIRE", "p", "", "CLASS", "critical"))
    assert f["allowed"] == 0 and f["limit"] == 5, f  # full: refused, not failed open
    for tok in held:  # every lease, from before the reload too, releases once
        assert c.command("SL.RELEASE", tok, "LATENCY", "3", "OUTCOME", "ok") == "OK"
    f = fields(c.command("SL.CHECK", "p", "", "COST", "0"))
    assert f["remaining"] == 5, f
    c.close()
    if store == "redis":
        m = requests.get(srv.admin + "/metrics", timeout=5).text
        assert 'sluice_redis_events_total{event="errors"} 0' in m, [l for l in m.splitlines() if "events_total" in l]


FW = """
workers: 1
policies:
  - name: platform
    key: []
    algorithm: fixed_window
    limits: [ { rate: 100/m } ]
%s
"""
BORROW = """    borrow:
      tiers: [platform, product]
      product: { from: header.x-product, share: 50/m, cap: 80/m }
"""


@pytest.mark.parametrize("store", ["memory", "redis"])
@pytest.mark.parametrize("first,then", [("", BORROW), (BORROW, "")], ids=["borrow-added", "borrow-removed"])
def test_reload_changing_borrowing_keeps_the_count(make_server, redis, store, first, then):
    """The root's count survives a reload that adds or removes borrowing (the marks tail)."""
    srv = make_server(config_text=FW % first, extra=redis_url(redis) if store == "redis" else ())
    c = srv.resp()
    for _ in range(10):
        assert fields(c.command("SL.CHECK", "platform", ""))["allowed"] == 1
    reload(srv, FW % then)
    f = c.command("SL.CHECK", "platform", "")
    assert not isinstance(f, RespError), f
    f = fields(f)
    assert f["allowed"] == 1 and f["limit"] == 100 and f["remaining"] == 89, f
    c.close()


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_class_lease_released_after_classes_removed_frees_its_own_slot(make_server, redis, store):
    """A lease taken under classes carries its class in the lease's top slot bits; released
    after a reload removed the classes, it freed every slot of its bucket (the other
    requests' too), so the limit admitted 5 more while 4 still ran."""
    srv = make_server(config_text=CONC % CLASSES, extra=redis_url(redis) if store == "redis" else ())
    c = srv.resp()
    old = [fields(c.command("SL.ACQUIRE", "p", "", "CLASS", "default"))["token"] for _ in range(2)]
    reload(srv, CONC % "")
    for _ in range(3):
        assert fields(c.command("SL.ACQUIRE", "p", ""))["allowed"] == 1
    assert c.command("SL.RELEASE", old[0]) == "OK"
    f = fields(c.command("SL.CHECK", "p", "", "COST", "0"))
    assert f["remaining"] == 1, f  # 4 still in flight
    assert fields(c.command("SL.ACQUIRE", "p", ""))["allowed"] == 1
    assert fields(c.command("SL.ACQUIRE", "p", ""))["allowed"] == 0
    c.close()


ADAPT = """
workers: 1
policies:
  - name: p
    key: []
    algorithm: adaptive_concurrency
    limits: [ { min: 2, max: 10, initial: 4, lease: 30s } ]
%s
"""


@pytest.mark.parametrize("classes", ["", CLASSES], ids=["plain", "classes"])
def test_switching_to_and_from_adaptive_keeps_leases(make_server, classes):
    """A reload from concurrency to adaptive_concurrency (and back) while requests run: the
    slots in flight stay counted (a fresh state admitted up to the new limit on top of
    them, and their releases then freed the new requests' slots). Memory store: the Redis
    store keeps each algorithm's state under its own key."""
    srv = make_server(config_text=CONC % classes)
    c = srv.resp()
    old = [fields(c.command("SL.ACQUIRE", "p", "", "CLASS", "critical"))["token"] for _ in range(3)]
    reload(srv, ADAPT % classes)
    f = fields(c.command("SL.ACQUIRE", "p", "", "CLASS", "critical"))
    assert f["in_flight"] == 3 and f["allowed"] == 0, f  # probing at min 2: 3 already run
    assert c.command("SL.RELEASE", old.pop(), "LATENCY", "5", "OUTCOME", "ok") == "OK"
    assert c.command("SL.RELEASE", old.pop(), "LATENCY", "5", "OUTCOME", "ok") == "OK"
    f = fields(c.command("SL.ACQUIRE", "p", "", "CLASS", "critical"))
    assert f["allowed"] == 1 and f["in_flight"] == 2, f
    new = f["token"]
    reload(srv, CONC % classes)
    f = fields(c.command("SL.CHECK", "p", "", "COST", "0"))
    assert f["remaining"] == 3, f  # one from each era
    assert c.command("SL.RELEASE", old.pop()) == "OK"
    assert c.command("SL.RELEASE", new) == "OK"
    f = fields(c.command("SL.CHECK", "p", "", "COST", "0"))
    assert f["remaining"] == 5, f
    c.close()
