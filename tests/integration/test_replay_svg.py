# SPDX-License-Identifier: Apache-2.0
"""The pictures: `sluice replay --svg/--html` and `sluice simulate --svg/--html` write
self-contained SVG (valid XML, no scripts or external references) holding the series the
report describes, with the configured limit drawn; one is rendered to PNG with
rsvg-convert (Debian librsvg2-bin) so a person can look at it."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest

from conftest import BIN, SRC

sys.path.insert(0, os.path.join(SRC, "tests", "replay"))
import tracegen  # noqa: E402

CONFIG = os.path.join(SRC, "tests", "replay", "config.yaml")
NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def out():
    d = tempfile.mkdtemp(prefix="sluice-svg-")
    arr = tracegen.arrivals(seed=7)
    trace = os.path.join(d, "trace.csv")
    tracegen.write(trace, arr, "csv")
    r = subprocess.run([BIN, "replay", "-c", CONFIG, trace, "--suggest", "--svg", os.path.join(d, "plots"),
                        "--html", os.path.join(d, "report.html")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    yield d
    # kept for a person to look at when SLUICE_KEEP_PLOTS is set
    if os.environ.get("SLUICE_KEEP_PLOTS"):
        dest = os.environ["SLUICE_KEEP_PLOTS"]
        shutil.copytree(d, dest, dirs_exist_ok=True)
    shutil.rmtree(d, ignore_errors=True)


def texts(root):
    return [("".join(t.itertext())) for t in root.iter(NS + "text")]


def self_contained(data):
    assert "<script" not in data
    # the only URL is the SVG namespace; references are to ids inside the document
    urls = set(re.findall(r'(?:href|src)="([^"]*)"', data)) | set(re.findall(r"url\((?!#)([^)]*)\)", data))
    assert not urls, urls
    assert set(re.findall(r"https?://[^\"' ]+", data)) <= {"http://www.w3.org/2000/svg"}


def test_traffic_plot(out):
    path = os.path.join(out, "plots", "replay-traffic.svg")
    data = open(path).read()
    self_contained(data)
    root = ET.fromstring(data)
    assert root.tag == NS + "svg"
    t = texts(root)
    assert any("requests per second by outcome" in x for x in t)
    # a panel for all requests and one per policy that saw traffic, each with its series
    for name in ("all requests", "policy api:", "policy login:", "policy search:", "policy plan:"):
        assert any(x.startswith(name) for x in t), (name, t[:20])
    for legend in ("admitted", "rejected by this policy", "shadow: would have rejected"):
        assert legend in t, legend
    assert "requests/s" in t and "time (UTC)" in t
    # clock times on the x axis: the trace starts at 00:00:00 UTC
    assert any(re.fullmatch(r"00:00:[0-5]\d", x) for x in t)
    # bars per second (a 40 s trace) in the documented colours: admitted, rejected, and in a
    # policy's panel the requests another policy rejected
    fills = [p.get("fill") for p in root.iter(NS + "rect")] + [p.get("fill") for p in root.iter(NS + "path")]
    assert fills.count("#2a9d55") >= 5 * 30 and fills.count("#d1495b") >= 100
    assert "rejected by another policy" in t and "#a8a8a8" in fills


def test_peaks_plot_draws_the_limit(out):
    data = open(os.path.join(out, "plots", "replay-peaks.svg")).read()
    self_contained(data)
    root = ET.fromstring(data)
    t = texts(root)
    assert any("per-key peak against the configured limit" in x for x in t)
    assert "limit burst 20 at 10/s" in t          # the api bucket
    assert "limit burst 5 at 5/min" in t          # the login GCRA
    assert "limit 250 per 1min" in t              # the plan's fixed window
    assert any(x.startswith("suggested ") for x in t)
    assert "100%" in t and "keys at or above x" in t
    # the limit is a vertical line in the limit's colour
    lines = [l for l in root.iter(NS + "line") if l.get("stroke") == "#d1495b"]
    assert len(lines) >= 3 and all(l.get("x1") == l.get("x2") for l in lines)


def test_rendered_to_png(out):
    """rsvg-convert renders what sluice drew (a person looks at the PNG)."""
    for name in ("replay-traffic", "replay-peaks"):
        svg = os.path.join(out, "plots", name + ".svg")
        png = os.path.join(out, "plots", name + ".png")
        r = subprocess.run(["rsvg-convert", "-o", png, svg], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        with open(png, "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        assert width == 960 and height > 400


def test_html_page_is_offline(out):
    data = open(os.path.join(out, "report.html")).read()
    assert data.startswith("<!DOCTYPE html>")
    self_contained(data.replace('xmlns="http://www.w3.org/2000/svg"', ""))
    assert data.count("<svg") == 2 and data.count("</svg>") == 2
    assert "Per policy and window" in data and "Per-key peaks" in data
    # inline SVGs keep unique ids (clip paths)
    ids = re.findall(r'id="([^"]+)"', data)
    assert len(ids) == len(set(ids)) and ids
    # no raw keys: the trace's keys and addresses appear nowhere
    assert "key-4" not in data and "198.51.100." not in data
    # each inline SVG is well-formed XML
    for m in re.finditer(r"<svg.*?</svg>", data, re.S):
        ET.fromstring(m.group(0))


def test_simulate_algorithms_side_by_side():
    d = tempfile.mkdtemp(prefix="sluice-sim-")
    try:
        r = subprocess.run([BIN, "simulate", "burst", "--svg", d, "--html", os.path.join(d, "s.html")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        data = open(os.path.join(d, "simulate-burst.svg")).read()
        self_contained(data)
        root = ET.fromstring(data)
        t = texts(root)
        for algo in ("fixed_window 10/s", "sliding_window 10/s", "sliding_log 10/s", "token_bucket 10/s b20",
                     "gcra 10/s b20", "leaky_bucket 10/s q20 (shaped)", "concurrency 3 (300 ms each)",
                     "quota 100/day UTC"):
            assert any(x.startswith(algo + ":") for x in t), algo
        # the numbers in the panel titles are the text table's
        assert "token_bucket 10/s b20: 52 of 62 admitted" in t
        assert "fixed_window 10/s: 42 of 62 admitted" in t
        assert "time since the start of the pattern (s)" in t
        # stacked bars: second 5 of the token bucket row is 20 admitted + 10 rejected
        bars = [b for b in root.iter(NS + "rect") if b.get("fill") in ("#2a9d55", "#d1495b", "#edae49")]
        assert len(bars) > 40
        r = subprocess.run(["rsvg-convert", "-o", os.path.join(d, "b.png"), os.path.join(d, "simulate-burst.svg")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        html = open(os.path.join(d, "s.html")).read()
        assert "<svg" in html and "token_bucket 10/s b20" in html
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_simulate_with_config_and_pattern_file():
    d = tempfile.mkdtemp(prefix="sluice-sim-")
    try:
        pat = os.path.join(d, "storm.txt")
        with open(pat, "w") as f:
            f.write("name storm\ndescribe logins in a storm\nseconds 12\n"
                    "steady 3/s key browser\nburst 40 at 4s within 200ms key attacker  # the storm\n")
        r = subprocess.run([BIN, "simulate", pat, "-c", CONFIG, "--svg", d], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        rows = {}
        for line in r.stdout.splitlines():
            m = re.match(r"(\S+)?\s+(browser|attacker)\s.*\s(\d+)/(\d+)\s*$", line)
            if m:
                pol = m.group(1) or last
                last = pol
                rows[(pol, m.group(2))] = (int(m.group(3)), int(m.group(4)))
        # the config's policies are the rows; each keyed on its own
        assert rows[("api", "browser")] == (36, 36)
        ok, sent = rows[("api", "attacker")]
        assert sent == 40 and 20 <= ok <= 22              # a bucket of 20, refilled 10/s for 0.2 s
        assert rows[("login", "attacker")][0] == 5         # gcra 5/min burst 5
        root = ET.parse(os.path.join(d, "simulate-storm.svg")).getroot()
        t = texts(root)
        assert any(x.startswith("login: ") for x in t) and any("policies of" in x for x in t)
        # a pattern file that is wrong says where
        with open(pat, "w") as f:
            f.write("steady 3/s key a\nburst at 4s\n")
        r = subprocess.run([BIN, "simulate", pat], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "storm.txt:2:" in r.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)
