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
  extproc  - one Redis, each request through Envoy's ext_proc protocol on the gRPC listener (a
             grpcio client plays Envoy): the body reserves max_tokens, clamped to what is
             left (on_short: clamp), the response streams through sluice in chunks at the
             generation's pace and is cut at its budget, the final usage event settles
Usage: llm_replicas.py SLUICE_BIN [--seconds 60] [--instances 3] [--clients 30] [--tpm 100000]
Needs redis-server. Loopback only; every server on a free port; everything stopped at the end."""
import argparse
import json
import os
import queue
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


_STUBS = []
_STUBS_LOCK = threading.Lock()


def xp_stubs(tmp):
    """ext_proc's protobuf classes, generated once from src/api/grpc/*.proto."""
    with _STUBS_LOCK:
        if not _STUBS:
            import glob
            import importlib
            src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "api", "grpc")
            out = os.path.join(tmp, "stubs")
            os.makedirs(out, exist_ok=True)
            subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", src, "--python_out", out] +
                           sorted(glob.glob(os.path.join(src, "*.proto"))), check=True)
            sys.path.insert(0, out)
            _STUBS.append(importlib.import_module("ext_proc_pb2"))
        return _STUBS[0]


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
    grpcs = []
    for i in range(args.instances):
        port = free_port()
        gport = free_port()
        grpcs.append("127.0.0.1:%d" % gport)
        path = os.path.join(tmp, "%s-%d.yaml" % (mode, i))
        with open(path, "w") as f:
            f.write(CONFIG.format(http=port, store=store, tpm=args.tpm, algo=args.algorithm))
        procs.append(subprocess.Popen([args.bin, "serve", "-c", path, "--workers", "1",
                                       "--http", "127.0.0.1:%d" % port, "--resp", "127.0.0.1:%d" % free_port(),
                                       "--admin", "127.0.0.1:%d" % free_port(),
                                       "--grpc", "127.0.0.1:%d" % gport], cwd=tmp,
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
        if mode == "extproc":
            return xp_client(k)
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

    def xp_client(k):
        import grpc
        xp = xp_stubs(tmp)
        ch = grpc.insecure_channel(grpcs[k % len(grpcs)])
        P = xp.ProcessingRequest
        call = ch.stream_stream("/envoy.service.ext_proc.v3.ExternalProcessor/Process",
                                request_serializer=P.SerializeToString,
                                response_deserializer=xp.ProcessingResponse.FromString)
        r = random.Random(rnd.random())
        chunk_tokens = 50
        while time.time() < stop:
            q = queue.Queue()
            it = call(iter(q.get, None), timeout=120)

            def send(m):
                q.put(m)
                return next(it)
            h = P(request_headers=xp.HttpHeaders())
            for kk, v in ((":method", "POST"), (":path", "/v1/chat/completions"),
                          ("content-type", "application/json"), ("authorization", "Bearer team")):
                h.request_headers.headers.headers.add(key=kk, raw_value=v.encode())
            send(h)
            body = json.dumps({"model": "gpt-4o-mini", "max_tokens": args.max_tokens, "stream": True,
                               "stream_options": {"include_usage": True},
                               "messages": [{"role": "user", "content": prompt}]}).encode()
            resp = send(P(request_body=xp.HttpBody(body=body, end_of_stream=True)))
            if resp.WhichOneof("response") == "immediate_response":
                with lock:
                    if resp.immediate_response.status.code == 503:
                        unavailable[0] += 1
                    else:
                        refused[0] += 1
                q.put(None)
                list(it)
                time.sleep(0.05)
                continue
            allowed = args.max_tokens
            bm = resp.request_body.response.body_mutation
            if bm.WhichOneof("mutation") == "body":
                allowed = json.loads(bm.body)["max_tokens"]  # clamped: the provider stops there
            t0 = time.time()
            completion = min(r.randint(args.max_tokens // 10, args.max_tokens), allowed)
            send(P(response_headers=xp.HttpHeaders()))
            sent = 0
            while sent < completion:
                n = min(chunk_tokens, completion - sent)
                delta = "abcd" * n  # 4 bytes a token, as bytes_per_token says
                ev = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": delta}}]}).encode() + b"\n\n"
                time.sleep(n / args.tokens_per_s)
                send(P(response_body=xp.HttpBody(body=ev)))
                sent += n
            usage = {"prompt_tokens": args.prompt, "completion_tokens": completion,
                     "total_tokens": args.prompt + completion}
            tail = (b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n" +
                    b"data: [DONE]\n\n")
            send(P(response_body=xp.HttpBody(body=tail, end_of_stream=True)))
            q.put(None)
            list(it)
            with lock:
                admitted.append((t0, args.prompt + completion))
        ch.close()

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
    ap.add_argument("--modes", default="shared,at-end,local,extproc")
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
