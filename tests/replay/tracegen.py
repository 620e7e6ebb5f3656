# SPDX-License-Identifier: Apache-2.0
"""Traces whose ground truth the replay tests know: per-key arrival times (whole
milliseconds, all distinct), written in every format `sluice replay` reads, and the same
arrivals sent to `sluice serve --test-clock` (SL.CLOCK SET + SL.CHECKREQ) for the
decisions the server makes. Deterministic for a seed."""
import calendar
import gzip
import json
import random
import time

T0_MS = 1767225600 * 1000  # 2026-01-01T00:00:00Z


class Arrival:
    __slots__ = ("t_ms", "method", "path", "host", "ip", "key", "rt_ms", "idx")

    def __init__(self, t_ms, method, path, ip, key, rt_ms=0):
        self.t_ms, self.method, self.path, self.ip, self.key = t_ms, method, path, ip, key
        self.host, self.rt_ms, self.idx = "api.example.com", rt_ms, -1


def arrivals(seed=1, seconds=40, whole_seconds=False):
    """About 120 requests/s over `seconds`: steady keys under and over the 10/s bucket,
    bursty keys, clients without a key (their address counts), login storms from a few
    addresses, search traffic for the sliding window. Sorted, distinct times."""
    rnd = random.Random(seed)
    out = []
    end = seconds * 1000

    def steady(rate, key, ip, path="/v1/items", method="GET"):
        t = rnd.uniform(0, 1000.0 / rate)
        while t < end:
            out.append(Arrival(int(t), method, path, ip, key, rnd.randint(1, 400)))
            t += rnd.expovariate(rate) * 1000

    for k in range(4):
        steady(5, "key-%d" % k, "10.0.0.%d" % (k + 1))
    for k in range(4, 8):
        steady(15, "key-%d" % k, "10.0.0.%d" % (k + 1))
    for k in (8, 9):
        for _ in range(4):
            at = rnd.uniform(0, end - 500)
            for j in range(rnd.randint(20, 45)):
                out.append(Arrival(int(at + j * 3), "GET", "/v1/items", "10.0.1.%d" % k, "key-%d" % k, 5))
    for k in (10, 11):
        steady(2, "key-%d" % k, "10.0.2.%d" % k)
        steady(4, "key-%d" % k, "10.0.2.%d" % k, path="/search?q=x")
    steady(4, "key-0", "10.0.0.1", path="/search/advanced")
    for i in range(6):
        steady(3, None, "192.0.2.%d" % (i + 10))
    for i in range(4):
        ip = "198.51.100.%d" % (i + 1)
        for _ in range(3):
            at = rnd.uniform(0, end - 200)
            for j in range(8):
                out.append(Arrival(int(at + j * 7), "POST", "/login", ip, None, 30))
    steady(1, None, "2001:db8::7", path="/v1/items")
    if whole_seconds:
        for a in out:
            a.t_ms -= a.t_ms % 1000
        out.sort(key=lambda a: a.t_ms)
        # a second holds many arrivals: order them as the log will, by (second, source)
        for i, a in enumerate(out):
            a.idx = i
        return out
    out.sort(key=lambda a: a.t_ms)
    last = -1
    for a in out:  # distinct times, so every ordering agrees
        if a.t_ms <= last:
            a.t_ms = last + 1
        last = a.t_ms
    for i, a in enumerate(out):
        a.idx = i
    return out


def _abs_s(a):
    return (T0_MS + a.t_ms) / 1000.0


def _time_local(ms):
    return time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(ms // 1000))


def write(path, arr, fmt, compress=False):
    """Writes `arr` in `fmt`; returns the arrival index of each line (1-based lines; the
    header of a CSV is line 1). Formats: csv, json (nginx escape=json), envoy, nginx
    (a custom log_format with $msec/$request_time, written in completion order like
    nginx), combined (nginx's default; whole seconds)."""
    lines, index = [], {}
    if fmt == "csv":
        lines.append("time,method,path,host,client_ip,header.x-api-key,cost")
        for a in arr:
            lines.append("%.3f,%s,%s,%s,%s,%s,1" % (_abs_s(a), a.method, a.path, a.host, a.ip, a.key or ""))
            index[len(lines)] = a.idx
    elif fmt == "json":
        for a in arr:
            end = T0_MS + a.t_ms + a.rt_ms
            d = {"time_local": _time_local(end), "msec": "%.3f" % (end / 1000.0), "remote_addr": a.ip,
                 "request": "%s %s HTTP/1.1" % (a.method, a.path), "status": 200,
                 "request_time": "%.3f" % (a.rt_ms / 1000.0), "http_host": a.host,
                 "http_x_api_key": a.key or "", "http_user_agent": "gen/1.0 \"x\""}
            lines.append(json.dumps(d))
            index[len(lines)] = a.idx
    elif fmt == "envoy":
        for a in arr:
            ms = T0_MS + a.t_ms
            st = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".%03dZ" % (ms % 1000)
            d = {"start_time": st, "method": a.method, "path": a.path, "protocol": "HTTP/1.1",
                 "response_code": 200, "duration": a.rt_ms, "authority": a.host,
                 "downstream_remote_address": ("[%s]:5555" if ":" in a.ip else "%s:5555") % a.ip,
                 "x_api_key": a.key, "upstream_cluster": {"name": "backend"}}
            lines.append(json.dumps(d))
            index[len(lines)] = a.idx
    elif fmt == "nginx":
        # written when each request ends: not in arrival order
        for a in sorted(arr, key=lambda a: (a.t_ms + a.rt_ms, a.idx)):
            end = T0_MS + a.t_ms + a.rt_ms
            lines.append('%s - - [%.3f] "%s %s HTTP/1.1" 200 17 %.3f "%s" "gen/1.0"' % (
                a.ip, end / 1000.0, a.method, a.path, a.rt_ms / 1000.0, a.key or "-"))
            index[len(lines)] = a.idx
    elif fmt == "combined":
        for a in arr:
            assert a.t_ms % 1000 == 0
            lines.append('%s - %s [%s] "%s %s HTTP/1.1" 200 17 "-" "gen/1.0"' % (
                a.ip, a.key or "-", _time_local(T0_MS + a.t_ms), a.method, a.path))
            index[len(lines)] = a.idx
    else:
        raise ValueError(fmt)
    data = ("\n".join(lines) + "\n").encode()
    if compress:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)
    return index


NGINX_FORMAT = '$remote_addr - - [$msec] "$request" $status $body_bytes_sent $request_time "$http_x_api_key" "$http_user_agent"'
# Envoy logs name the API key however the operator chose: map it explicitly.
ENVOY_MAP = ["--map", "header.x-api-key=$x_api_key"]
# The combined format has no API key: the tests put it in $remote_user.
COMBINED_MAP = ["--map", "header.x-api-key=$remote_user"]


def server_decisions(server, arr):
    """The server's answer to every arrival, on its test clock: (allowed, policy)."""
    c = server.resp()
    out = []
    try:
        for a in arr:
            args = ["SL.CHECKREQ", "METHOD", a.method, "PATH", a.path, "HOST", a.host, "IP", a.ip]
            if a.key:
                args += ["HEADER", "x-api-key", a.key]
            r1 = c.command("SL.CLOCK", "SET", T0_MS + a.t_ms)
            assert isinstance(r1, int), r1
            r = c.command(*args)
            d = {r[i].decode(): r[i + 1] for i in range(0, len(r), 2)}
            pol = d["policy"].decode() if isinstance(d["policy"], bytes) else (d["policy"] or "")
            out.append((d["allowed"] == 1, pol))
    finally:
        c.close()
    return out


def read_decisions(path):
    """--decisions output: {(file basename, line): (admitted, policy)}."""
    import os
    res = {}
    with open(path) as f:
        header = f.readline().strip()
        assert header == "time,file,line,outcome,policy,delay_ms", header
        for row in f:
            t, fname, line, outcome, pol, delay = row.rstrip("\n").split(",")
            res[(os.path.basename(fname), int(line))] = (outcome in ("admitted", "delayed"), pol)
    return res
