#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A realistic access log to try `sluice replay` on (docs/replay.md): two hours of an API in
nginx's JSON log format (escape=json, with $msec and $request_time), traffic rising and
falling through the period, API keys with a long-tailed (Zipf) popularity, a few scrapers
that burst, anonymous clients, logins with one credential-stuffing episode from an IPv6
/64, written in completion order like nginx does. Deterministic.

    tests/replay/realistic.py OUT.log.gz [HOURS]
    sluice replay -c examples/sluice.yaml OUT.log.gz --suggest --svg plots --html replay.html
"""
import bisect
import gzip
import json
import math
import random
import sys

T0 = 1767258000.0  # 2026-01-01 09:00 UTC


def main():
    out = sys.argv[1]
    hours = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    rnd = random.Random(2026)
    seconds = int(hours * 3600)
    nkeys = 20000
    weights = [1.0 / (i + 1) ** 1.1 for i in range(nkeys)]
    cum = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)
    recs = []
    for s in range(seconds):
        # 60/s at the edges, 240/s in the middle of the period
        rate = 60 + 180 * math.sin(math.pi * s / seconds) ** 2
        for _ in range(int(rnd.expovariate(1.0) * 0 + rnd.gauss(rate, math.sqrt(rate)))):
            t = s + rnd.random()
            r = rnd.random()
            if r < 0.80:
                k = bisect.bisect_left(cum, rnd.random() * acc)
                key, ip = "ak_%05d" % k, "203.0.%d.%d" % (k >> 8 & 255, k & 255)
                path = rnd.choice(["/v1/items", "/v1/items/%d" % rnd.randint(1, 5000), "/v1/orders",
                                   "/v1/search?q=x"])
                method = "GET" if rnd.random() < 0.9 else "POST"
            elif r < 0.97:
                key, ip = None, "198.51.%d.%d" % (rnd.randint(0, 40), rnd.randint(1, 254))
                path, method = rnd.choice(["/", "/v1/items", "/health"]), "GET"
            else:
                key, ip = None, "192.0.2.%d" % rnd.randint(1, 254)
                path, method = "/login", "POST"
            recs.append((t, method, path, ip, key))
    # scrapers: 5 keys that come back every few minutes with 30-60 s at 25-40/s
    for k in range(5):
        key, ip = "ak_scraper%d" % k, "100.64.0.%d" % (k + 1)
        t = rnd.uniform(0, 600)
        while t < seconds:
            rate, length = rnd.uniform(25, 40), rnd.uniform(30, 60)
            u = t
            while u < min(t + length, seconds):
                recs.append((u, "GET", "/v1/items/%d" % rnd.randint(1, 99999), ip, key))
                u += rnd.expovariate(rate)
            t += length + rnd.uniform(120, 600)
    # credential stuffing: 20 minutes of logins from one /64, 8 addresses, 3/s each
    start = seconds * 0.55
    for a in range(8):
        ip = "2001:db8:bad:1::%x" % (a + 1)
        u = start + rnd.random()
        while u < start + 1200:
            recs.append((u, "POST", "/login", ip, None))
            u += rnd.expovariate(3)
    lines = []
    for t, method, path, ip, key in recs:
        rt = min(30.0, rnd.lognormvariate(-3.0, 1.0))
        end = T0 + t + rt
        lines.append((end, json.dumps({
            "msec": "%.3f" % end, "remote_addr": ip, "request": "%s %s HTTP/1.1" % (method, path),
            "status": 200, "request_time": "%.3f" % rt, "http_host": "api.example.com",
            "http_x_api_key": key or "", "http_user_agent": "client/%d" % (hash(ip) % 7)})))
    lines.sort()
    with gzip.open(out, "wt") as f:
        for _, l in lines:
            f.write(l + "\n")
    print("%s: %d requests over %d s" % (out, len(lines), seconds))


if __name__ == "__main__":
    main()
