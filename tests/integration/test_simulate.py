# SPDX-License-Identifier: Apache-2.0
"""`sluice simulate` shows the documented differences between the algorithms."""
import os
import subprocess

BIN = os.environ.get("SLUICE_BIN", "build/sluice")


def simulate(pattern):
    out = subprocess.run([BIN, "simulate", pattern], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if not parts or "/" not in parts[-1] and "ms" not in parts[-1]:
            continue
        for i, p in enumerate(parts):
            if "/" in p and p.split("/")[0].isdigit() and p.split("/")[1].isdigit():
                label = line[:31].strip()
                rows[label] = (int(p.split("/")[0]), int(p.split("/")[1]))
                break
    return rows


def test_burst_after_idle_admits_bucket_capacity():
    rows = simulate("burst")
    # 30 at once after idle, then 32 more at 8/s: the buckets admit their capacity of
    # 20 from the burst and everything after it.
    assert rows["token_bucket 10/s b20"] == (52, 62)
    assert rows["gcra 10/s b20"] == (52, 62)
    # The windows admit 10 of the burst.
    assert rows["fixed_window 10/s"][0] == 42
    assert rows["sliding_log 10/s"][0] == 42


def test_fixed_window_boundary_burst_is_twice_the_limit():
    rows = simulate("boundary")
    assert rows["fixed_window 10/s"] == (20, 40)      # 10 before and 10 after the edge
    assert rows["sliding_log 10/s"] == (10, 40)       # exact: 10 in any second
    assert rows["sliding_window 10/s"][0] <= 11       # approximation, within its bound


def test_steady_under_rate_is_never_rejected():
    rows = simulate("steady")
    for label, (ok, sent) in rows.items():
        if not label.startswith("quota"):
            assert ok == sent == 240, label
    assert rows["quota 100/day UTC"] == (100, 240)


def test_unknown_pattern_is_an_error():
    r = subprocess.run([BIN, "simulate", "nope"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "unknown pattern 'nope'" in r.stderr
