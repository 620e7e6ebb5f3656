# SPDX-License-Identifier: Apache-2.0
"""The observability assets shipped in examples/observability: the Prometheus alert rules
pass `promtool check rules` and fire (and stay quiet) as intended under `promtool test
rules`; every query of the Grafana dashboard is valid PromQL (checked by promtool as a
recording rule); both use only the metrics, labels and results the server exports
(docs/observability.md lists each of them).
"""
import copy
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

SRC = os.environ.get("SLUICE_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ASSETS = os.path.join(SRC, "examples", "observability")
ALERTS = os.path.join(ASSETS, "alerts.yml")
DASHBOARD = os.path.join(ASSETS, "grafana-sluice.json")
DOCS = os.path.join(SRC, "docs", "observability.md")

# The metrics the server exports, with their labels (besides the scrape's job/instance).
METRICS = {
    "sluice_decisions_total": {"policy", "result", "window"},
    "sluice_near_limit_total": {"policy", "window"},
    "sluice_admitted_cost_total": {"policy"},
    "sluice_store_latency_seconds": {"store", "op"},
    "sluice_store_errors_total": {"store", "kind"},
    "sluice_keys": {"policy"},
    "sluice_evictions_total": {"policy", "kind"},
    "sluice_hot_key_share": {"policy", "rank", "key"},
    "sluice_log_dropped_total": set(),
    "sluice_reloads_total": {"source", "outcome"},
    "sluice_window_info": {"policy", "window", "rate"},
    "sluice_bad_requests_total": {"reason"},
    "sluice_redis_node_up": {"node"},
    "sluice_connections_refused_total": {"listener"},
    "sluice_build_info": {"version", "commit"},
    "process_cpu_seconds_total": set(),
    "process_resident_memory_bytes": set(),
    "process_virtual_memory_bytes": set(),
    "process_open_fds": set(),
    "process_max_fds": set(),
    "process_start_time_seconds": set(),
}
HISTOGRAMS = {"sluice_store_latency_seconds"}
RESULTS = {"allowed", "limited", "shadow_limited", "rollout_limited", "fail_open", "fail_closed",
           "error", "delayed", "recheck"}
TARGET_LABELS = {"job", "instance"}


def promtool():
    path = shutil.which("promtool")
    assert path, "promtool is missing: apt-get install prometheus (scripts/deps.sh)"
    return path


def run_promtool(*args, timeout=60):
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=timeout)


def alert_rules():
    with open(ALERTS) as f:
        doc = yaml.safe_load(f)
    return [r for g in doc["groups"] for r in g["rules"]]


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_queries(d):
    """(panel title, refId, expr) for every target of every panel (rows included)."""
    out = []
    stack = list(d["panels"])
    while stack:
        p = stack.pop(0)
        stack.extend(p.get("panels", []))
        for t in p.get("targets", []):
            out.append((p["title"], t["refId"], t["expr"]))
    for a in d.get("annotations", {}).get("list", []):
        if "expr" in a:
            out.append(("annotation " + a["name"], "A", a["expr"]))
    return out


GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                "$job": ".*", "$instance": ".*", "$policy": ".*"}


def substitute(expr):
    for k in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(k, GRAFANA_VARS[k])
    assert "$" not in expr, "unknown Grafana variable in: " + expr
    return expr


def all_exprs():
    exprs = [("alert " + r["alert"], r["expr"]) for r in alert_rules()]
    exprs += [("panel " + title, substitute(e)) for title, _, e in dashboard_queries(dashboard())]
    return exprs


# ---- alert rules -------------------------------------------------------------------------


def test_promtool_check_rules():
    r = run_promtool("check", "rules", ALERTS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_alerts_cover_what_operators_need():
    names = {r["alert"] for r in alert_rules()}
    for needed in ("SluiceFailOpenRate", "SluiceStoreErrors", "SluiceRejectionRatioHigh",
                   "SluiceNearLimit", "SluiceEvictionPressure"):
        assert needed in names
    for r in alert_rules():
        assert r["labels"]["severity"] in ("info", "warning", "critical"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


S = 'job="sluice",instance="a:9090"'


def series(name, labels, values):
    return {"series": "%s{%s}" % (name, S + ("," + labels if labels else "")), "values": values}


# Each case: input series (1 sample a minute), when to look, and exactly which alerts of
# that name fire then (labels besides alertname). Healthy series sit beside the faulty
# ones, so a rule that fires for everything fails as surely as one that never fires.
CASES = [
    ("SluiceFailOpenRate", [
        series("sluice_decisions_total", 'policy="api",result="allowed",window="api"', "0+6000x30"),
        series("sluice_decisions_total", 'policy="api",result="fail_open",window=""', "0+300x30"),
        series("sluice_decisions_total", 'policy="ok",result="allowed",window="ok"', "0+6000x30"),
        series("sluice_decisions_total", 'policy="ok",result="fail_open",window=""', "0+30x30"),  # 0.5 %
    ], [(3, []), (15, [{"job": "sluice", "policy": "api", "severity": "warning"}])]),
    ("SluiceFailClosed", [
        series("sluice_decisions_total", 'policy="pay",result="fail_closed",window=""', "0+60x20"),
        series("sluice_decisions_total", 'policy="api",result="allowed",window="api"', "0+60x20"),
    ], [(1, []), (10, [{"job": "sluice", "policy": "pay", "severity": "critical"}])]),
    ("SluiceStoreErrors", [
        series("sluice_store_errors_total", 'store="redis",kind="timeout"', "0+60x20"),
        series("sluice_store_errors_total", 'store="redis",kind="moved"', "0+0x20"),
    ], [(2, []), (12, [{"job": "sluice", "instance": "a:9090", "store": "redis", "kind": "timeout",
                        "severity": "warning"}])]),
    ("SluiceRedisNodeDown", [
        series("sluice_redis_node_up", 'node="127.0.0.1:6379"', "1 1 1 0 0 0 0 0 0 0"),
        series("sluice_redis_node_up", 'node="127.0.0.1:6380"', "1x10"),
    ], [(2, []), (7, [{"job": "sluice", "instance": "a:9090", "node": "127.0.0.1:6379",
                       "severity": "critical"}])]),
    ("SluiceStoreLatencyHigh", [
        series("sluice_store_latency_seconds_bucket", 'store="redis",op="decide",le="0.01"', "0+50x30"),
        series("sluice_store_latency_seconds_bucket", 'store="redis",op="decide",le="0.1"', "0+100x30"),
        series("sluice_store_latency_seconds_bucket", 'store="redis",op="decide",le="+Inf"', "0+100x30"),
        series("sluice_store_latency_seconds_bucket", 'store="redis",op="settle",le="0.01"', "0+100x30"),
        series("sluice_store_latency_seconds_bucket", 'store="redis",op="settle",le="0.1"', "0+100x30"),
        series("sluice_store_latency_seconds_bucket", 'store="redis",op="settle",le="+Inf"', "0+100x30"),
    ], [(5, []), (20, [{"job": "sluice", "store": "redis", "op": "decide", "severity": "warning"}])]),
    ("SluiceRejectionRatioHigh", [
        series("sluice_decisions_total", 'policy="api",result="allowed",window="api"', "0+600x45"),
        series("sluice_decisions_total", 'policy="api",result="limited",window="api"', "0+300x45"),
        series("sluice_decisions_total", 'policy="ok",result="allowed",window="ok"', "0+600x45"),
        series("sluice_decisions_total", 'policy="ok",result="limited",window="ok"', "0+30x45"),
        # few requests: a high ratio on a trickle does not page anyone
        series("sluice_decisions_total", 'policy="tiny",result="allowed",window="tiny"', "0+1x45"),
        series("sluice_decisions_total", 'policy="tiny",result="limited",window="tiny"', "0+1x45"),
    ], [(10, []), (30, [{"job": "sluice", "policy": "api", "severity": "warning"}])]),
    ("SluiceShadowWouldLimit", [
        series("sluice_decisions_total", 'policy="guard",result="allowed",window="guard"', "0+600x80"),
        series("sluice_decisions_total", 'policy="guard",result="shadow_limited",window="guard"', "0+120x80"),
        series("sluice_decisions_total", 'policy="api",result="allowed",window="api"', "0+600x80"),
        series("sluice_decisions_total", 'policy="api",result="limited",window="api"', "0+120x80"),
    ], [(20, []), (70, [{"job": "sluice", "policy": "guard", "severity": "info"}])]),
    ("SluiceNearLimit", [
        series("sluice_decisions_total", 'policy="api",result="allowed",window="api"', "0+600x45"),
        series("sluice_near_limit_total", 'policy="api",window="api"', "0+360x45"),
        series("sluice_decisions_total", 'policy="ok",result="allowed",window="ok"', "0+600x45"),
        series("sluice_near_limit_total", 'policy="ok",window="ok"', "0+60x45"),
    ], [(10, []), (35, [{"job": "sluice", "policy": "api", "severity": "info"}])]),
    ("SluiceEvictionPressure", [
        series("sluice_evictions_total", 'policy="api",kind="lru"', "0+60x30"),
        series("sluice_evictions_total", 'policy="other",kind="fresh"', "0+6000x30"),
    ], [(5, []), (25, [{"job": "sluice", "instance": "a:9090", "policy": "api", "severity": "warning"}])]),
    ("SluiceReloadRefused", [
        series("sluice_reloads_total", 'source="sighup",outcome="refused"', "0 0 0 1 1 1 1 1"),
        series("sluice_reloads_total", 'source="admin-api",outcome="ok"', "0 1 2 3 4 5 6 7"),
    ], [(2, []), (5, [{"job": "sluice", "instance": "a:9090", "source": "sighup", "severity": "warning"}])]),
    ("SluiceConnectionsRefused", [
        series("sluice_connections_refused_total", 'listener="http"', "0+120x20"),
        series("sluice_connections_refused_total", 'listener="resp"', "0+6x20"),
    ], [(2, []), (12, [{"job": "sluice", "instance": "a:9090", "listener": "http", "severity": "warning"}])]),
    ("SluiceLogLinesDropped", [
        series("sluice_log_dropped_total", "", "0+120x40"),
    ], [(10, []), (35, [{"job": "sluice", "instance": "a:9090", "severity": "info"}])]),
]


def test_every_alert_has_a_case():
    assert {c[0] for c in CASES} == {r["alert"] for r in alert_rules()}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_promtool_test_rules(tmp_path, case):
    name, inputs, checks = case
    # promtool compares annotations too; the templates are checked by `check rules`
    # above, here only when and for what each alert fires.
    with open(ALERTS) as f:
        doc = yaml.safe_load(f)
    stripped = copy.deepcopy(doc)
    for g in stripped["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    rules = tmp_path / "alerts.yml"
    rules.write_text(yaml.safe_dump(stripped))
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": inputs,
            "alert_rule_test": [
                {"eval_time": "%dm" % t, "alertname": name,
                 "exp_alerts": [{"exp_labels": labels} for labels in exp]}
                for t, exp in checks
            ],
        }],
    }
    tf = tmp_path / "test.yml"
    tf.write_text(yaml.safe_dump(test))
    r = run_promtool("test", "rules", str(tf))
    assert r.returncode == 0, r.stdout + r.stderr


# ---- the dashboard -----------------------------------------------------------------------


def test_dashboard_structure():
    d = dashboard()
    assert d["uid"] and d["title"] and d["schemaVersion"] >= 30
    variables = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "job", "instance", "policy"} <= variables
    ids, boxes = set(), []
    for p in d["panels"]:
        assert p["id"] not in ids, "duplicate panel id %d" % p["id"]
        ids.add(p["id"])
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        for other in boxes:
            ox, oy, ow, oh = other
            overlap = g["x"] < ox + ow and ox < g["x"] + g["w"] and g["y"] < oy + oh and oy < g["y"] + g["h"]
            assert not overlap, "panel %r overlaps another" % p["title"]
        boxes.append((g["x"], g["y"], g["w"], g["h"]))
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p.get("description"), p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            for v in re.findall(r"\$(\w+)", t["expr"]):
                assert v in variables or v.startswith("__"), "unknown variable $%s in %r" % (v, p["title"])
    titles = " / ".join(p["title"] for p in d["panels"]).lower()
    for topic in ("decisions by policy and result", "rejection ratio", "shadow vs enforced", "near limit",
                  "fail-open", "store errors", "store latency", "evictions", "top consumers"):
        assert topic in titles, topic


def test_dashboard_queries_are_valid_promql(tmp_path):
    d = dashboard()
    rules = []
    for i, (title, ref, expr) in enumerate(dashboard_queries(d)):
        rules.append({"record": "dashboard:q%d_%s" % (i, ref), "expr": substitute(expr)})
    assert len(rules) >= 20
    f = tmp_path / "dashboard_rules.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = run_promtool("check", "rules", str(f))
    assert r.returncode == 0, r.stdout + r.stderr


# ---- names: the assets and the docs use what the server exports ----------------------------


def metric_of(token):
    if token in METRICS:
        return token
    for suffix in ("_bucket", "_sum", "_count"):
        base = token[: -len(suffix)]
        if token.endswith(suffix) and base in HISTOGRAMS:
            return base
    return None


def test_assets_use_exported_metrics_labels_and_results():
    used = set()
    for where, expr in all_exprs():
        tokens = re.findall(r"\b((?:sluice|process)_[a-z_]+)\b", expr)
        assert tokens, where
        metrics = set()
        for tok in tokens:
            m = metric_of(tok)
            assert m, "%s uses %s, which the server does not export" % (where, tok)
            metrics.add(m)
        used |= metrics
        allowed = set(TARGET_LABELS) | set().union(*(METRICS[m] for m in metrics))
        if metrics & HISTOGRAMS:
            allowed.add("le")
        for name, body in re.findall(r"\b((?:sluice|process)_[a-z_]+)\{([^}]*)\}", expr):
            m = metric_of(name)
            for label, op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', body):
                ok = METRICS[m] | TARGET_LABELS | ({"le"} if m in HISTOGRAMS else set())
                assert label in ok, "%s: %s has no label %s" % (where, m, label)
                if label == "result":
                    for v in value.split("|"):
                        assert v in RESULTS or v == ".*", "%s: unknown result %r" % (where, v)
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            for label in (x.strip() for x in group.split(",") if x.strip()):
                assert label in allowed, "%s groups by %s, which its metrics do not have" % (where, label)
    # the dashboard shows every family the server exports
    dash_used = set()
    for _, _, e in dashboard_queries(dashboard()):
        dash_used |= {metric_of(t) for t in re.findall(r"\b((?:sluice|process)_[a-z_]+)\b", e)}
    missing = set(METRICS) - dash_used - {"process_virtual_memory_bytes"}
    assert not missing, "not on the dashboard: %s" % sorted(missing)


def test_docs_list_every_metric():
    with open(DOCS) as f:
        doc = f.read()
    for m in METRICS:
        assert "`%s" % m in doc, "docs/observability.md does not describe %s" % m
    for r in RESULTS:
        assert "`%s`" % r in doc, "docs/observability.md does not describe the result %s" % r
    for a in {r["alert"] for r in alert_rules()}:
        assert a in doc, "docs/observability.md does not list the alert %s" % a
