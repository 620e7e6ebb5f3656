# SPDX-License-Identifier: Apache-2.0
"""The cooperative client (examples/client, built on include/sluice_client.h) against the
real `sluice serve` on the real clock: under a 10/s policy it wants 50 requests/s for 10 s,
paces itself from the RateLimit fields it is sent, and is never refused after its first
answer; the same client without the pacer is refused again and again."""
import os
import re
import subprocess

import pytest

from conftest import BIN

EXAMPLE = os.path.join(os.path.dirname(BIN), "sluice-client-example")

CONFIG = """
workers: 1
policies:
  - name: api
    objective: fairness
    key: [header.x-api-key]
    on_missing_key: reject
    algorithm: token_bucket
    limits:
      - { rate: 10/s, burst: 10 }
"""


def run_client(server, key, *extra, seconds=10):
    assert os.access(EXAMPLE, os.X_OK), (
        "%s is missing: it is built when libcurl is found (Debian libcurl4-openssl-dev)" % EXAMPLE)
    r = subprocess.run([EXAMPLE, "-s", str(seconds), "-r", "50", "-H", "x-api-key: " + key] + list(extra)
                       + [server.http + "/v1/auth"], capture_output=True, text=True, timeout=seconds + 60)
    assert r.returncode == 0, r.stderr
    answers = [line.split() for line in r.stdout.splitlines() if re.match(r"\d+ \d+ ", line)]
    summary = dict(kv.split("=") for kv in r.stdout.splitlines()[-1].split()[1:])
    return answers, {k: int(v) for k, v in summary.items()}


@pytest.fixture
def srv(make_server):
    return make_server(config_text=CONFIG, test_clock=False, workers=1)


def test_paced_client_is_not_refused_after_its_first_answer(srv):
    answers, s = run_client(srv, "paced")
    statuses = [int(a[1]) for a in answers]
    assert statuses and statuses[0] == 200
    assert 429 not in statuses[1:], statuses
    assert s["refused_after_first"] == 0 and s["gave_up"] == 0
    # ... and it still gets close to what it is allowed: 10 at once, then 10/s
    assert 80 <= s["ok"] <= 115, s


def test_without_the_helpers_the_same_client_is_refused(srv):
    # neither pacer nor retry helper: it sends at the 50/s it wants and is refused
    _, s = run_client(srv, "impatient", "-P", "-R", seconds=4)
    assert s["refused"] > 60, s
    # the retry helper alone honours Retry-After: refused now and then, never flooding
    _, s = run_client(srv, "retrying", "-P", seconds=4)
    assert 1 <= s["refused"] <= 12, s
    assert s["ok"] <= 10 + 10 * 4 + 2, s
