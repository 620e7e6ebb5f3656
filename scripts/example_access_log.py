#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""example_access_log.py OUT -- one hour of an API's nginx access log (combined format)
for the replay example in docs/replay.md: 300 clients whose rates fall off like a Zipf
law and ramp up through the hour, logins (10 % failing), and two scrapers that burst on
/api/search and try passwords for a minute in the second half. Fixed seed: the same file
every time (113,969 lines)."""
import math
import random
import sys
import time


def main(out):
    rnd = random.Random(7)
    t0 = 1796284800  # 2026-12-03 08:00 UTC
    rows = []
    for i in range(300):
        ip = "10.%d.%d.%d" % (i // 65536 % 256, i // 256 % 256, i % 256 + 1)
        rate, t = 0.02 + 3.0 / (i + 1), 0.0
        while True:
            t += rnd.expovariate(rate * (0.6 + 0.8 * t / 3600))
            if t >= 3600:
                break
            if rnd.random() < 0.03:
                rows.append((t, ip, "POST", "/login", 200 if rnd.random() < 0.9 else 401))
            else:
                rows.append((t, ip, "GET", rnd.choice(["/api/items", "/api/search?q=x", "/api/items/42"]), 200))
    for ip, start in (("203.0.113.9", 1900), ("198.51.100.77", 2600)):
        t = start
        while t < start + 300:
            t += rnd.expovariate(40)
            rows.append((t, ip, "GET", "/api/search?q=scrape", 200))
        t = start + 60
        while t < start + 120:
            t += rnd.expovariate(2)
            rows.append((t, ip, "POST", "/login", 401))
    rows.sort()
    with open(out, "w") as f:
        for t, ip, method, path, status in rows:
            ts = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(t0 + math.floor(t)))
            f.write('%s - - [%s] "%s %s HTTP/1.1" %d 512 "-" "client/1.0"\n' % (ip, ts, method, path, status))


if __name__ == "__main__":
    main(sys.argv[1])
