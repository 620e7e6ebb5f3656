#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""llm_replicas.py -- issue 24's replica measurement through the application API: N sluice
instances, C concurrent clients spread over them, one tokens-per-minute budget (total_tokens,
sliding window), each client looping: /v1/check with an LLM request body (max_tokens M),
a simulated generation (the usage it will report: prompt P, completion uniform in
[M/10, M]), /v1/settle with that usage object. Printed: tokens admitted (as the usage
counted them) in the first whole fixed window (one minute) after the clients started, in
three set-ups:
  shared   - one Redis behind all instances, max_tokens reserved, settled to the usage
  at-end   - one Redis, but only 1 token reserved and the usage charged at the end (what a
             gateway that settles only at stream end does: the LiteLLM / ai-gateway #2394 shape)
  local    - each instance its own memory store (the limit x replicas failure)
Usage: llm_replicas.py SLUICE_BIN [--seconds 60] [--instances 3] [--clients 30] [--tpm 100000]
Needs redis-server. Loopback only; every server on a free port; everything stopped at the end."""
import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

CONFIG = """
listen: {{ http: 127.0.0.1:{http} }}
store:
{store}
policies:
  - name: tpm
    match: {{ method: POST, path: /v1/chat/completions }}
    key: [header.authorization]
    llm: {{ bytes_per_token: 4, default_max_tokens: 2000 }}
    cost: {{ default: 1, settle: true, unit: tokens }}
    on_store_error: closed   # a Redis timeout refuses (503) instead of admitting unmetered
    algorithm: {algo}
    limits:
      - {{ name: tpm, rate: {tpm}/min, counts: total_tokens }}
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, t=10):
    end = time.time() + t
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("port %d never opened" % port)


def post(url, obj):
    req = urllib.request.Request(url, data=json.dumps(obj).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def run(mode, args, tmp):
    procs, urls = [], []
    redis = None
    if mode != "local":
        rport = free_port()
        redis = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(rport)
        store = "  type: redis\n  addr: 127.0.0.1:%d\n  timeout: 500ms\n" % rport
    else:
        store = "  type: memory\n"
    for i in range(args.instances):
        port = free_port()
        path = os.path.join(tmp, "%s-%d.yaml" % (mode, i))
        with open(path, "w") as f:
            f.write(CONFIG.format(http=port, store=store, tpm=args.tpm, algo=args.algorithm))
        procs.append(subprocess.Popen([args.bin, "serve", "-c", path, "--workers", "1",
                                       "--http", "127.0.0.1:%d" % port, "--resp", "127.0.0.1:%d" % free_port(),
                                       "--admin", "127.0.0.1:%d" % free_port(),
                                       "--grpc", "127.0.0.1:%d" % free_port()], cwd=tmp,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(port)
        urls.append("http://127.0.0.1:%d" % port)
    lock = threading.Lock()
    admitted = []  # (time, tokens counted)
    refused = [0]
    unavailable = [0]
    # fixed windows start on the store's boundaries: the minute measured is the first whole
    # window, [boundary, boundary + 60 s), with the clients already running before it
    # (fixed windows are aligned on wall-clock multiples of the period since the epoch)
    boundary = (int(time.time()) // 60 + 1) * 60.0
    stop = boundary + args.seconds
    rnd = random.Random(24)
    prompt = "x" * (args.prompt * 4 - 120)

    def client(k):
        url = urls[k % len(urls)]
        r = random.Random(rnd.random())
        while time.time() < stop:
            body = json.dumps({"model": "gpt-4o-mini", "max_tokens": args.max_tokens, "stream": True,
                               "messages": [{"role": "user", "content": prompt}]})
            req = {"request": {"method": "POST", "path": "/v1/chat/completions",
                               "headers": {"authorization": "Bearer team"}, "body": body,
                               "content_type": "application/json"}}
            if mode == "at-end":
                req["cost"] = 1  # reserve nothing to speak of: the usage is charged at the end
            st, j = post(url + "/v1/check", req)
            if st != 200:
                with lock:
                    if st == 503:
                        unavailable[0] += 1
                    else:
                        refused[0] += 1
                time.sleep(0.05)
                continue
            t0 = time.time()
            completion = r.randint(args.max_tokens // 10, args.max_tokens)
            time.sleep(min(completion / args.tokens_per_s, max(0.0, stop - t0)))  # the generation
            usage = {"prompt_tokens": args.prompt, "completion_tokens": completion,
                     "total_tokens": args.prompt + completion}
            if j.get("token"):  # none: admitted without a reservation (a store failure, fail-open)
                post(url + "/v1/settle", {"token": j["token"], "usage": usage})
            with lock:
                admitted.append((t0, args.prompt + completion))

    ths = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for p in procs:
        p.terminate()
        p.wait(10)
    if redis:
        redis.kill()
        redis.wait(10)
    total = sum(n for t, n in admitted if boundary <= t < boundary + args.seconds)
    per_min = total * 60.0 / args.seconds
    return per_min, sum(1 for t, n in admitted if boundary <= t < boundary + args.seconds), refused[0], unavailable[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--clients", type=int, default=30)
    ap.add_argument("--tpm", type=int, default=100000)
    ap.add_argument("--max-tokens", type=int, default=2000)
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--tokens-per-s", type=float, default=400.0)
    ap.add_argument("--modes", default="shared,at-end,local")
    ap.add_argument("--algorithm", default="fixed_window")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sluice-llm-bench-")
    print("instances=%d clients=%d budget=%d TPM max_tokens=%d prompt=%d seconds=%g" %
          (args.instances, args.clients, args.tpm, args.max_tokens, args.prompt, args.seconds))
    try:
        for mode in args.modes.split(","):
            per_min, n, refused, unavail = run(mode, args, tmp)
            print("%-7s admitted %8.0f tokens/min (%.2fx the budget), %d requests admitted in the window, "
                  "%d refused (429), %d store errors (503)" % (mode, per_min, per_min / args.tpm, n, refused, unavail))
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
