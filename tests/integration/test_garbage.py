# SPDX-License-Identifier: Apache-2.0
"""Random and truncated bytes on every listener (deterministic seed): the server answers
or closes, never crashes or hangs, and keeps serving well-formed clients."""
import random
import socket

import requests

from conftest import Resp

SEEDS_HTTP = [b"GET /v1/auth HTTP/1.1\r\nHost: x\r\nX-Api-Key: a\r\n\r\n",
              b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 27\r\n\r\n{\"policy\":\"api\",\"key\":\"k\"}",
              b"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n0\r\n\r\n"]
SEEDS_RESP = [b"*3\r\n$8\r\nSL.CHECK\r\n$3\r\napi\r\n$1\r\nk\r\n",
              b"*5\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$1\r\n5\r\n$1\r\n1\r\n$1\r\n1\r\n",
              b"SL.CHECKREQ PATH /x HEADER x-api-key \"a b\"\r\n"]


def mutate(rng, data):
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randint(0, 3)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1 and b:
            del b[rng.randrange(len(b)):]
        elif op == 2:
            b[rng.randrange(len(b) + 1):0] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            b += b[: rng.randint(0, len(b))]
    return bytes(b)


def blast(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
    except OSError:
        pass
    finally:
        s.close()


def test_garbage_on_every_listener(server):
    rng = random.Random(0x51CE)
    for i in range(150):
        blast(server.http_port, mutate(rng, rng.choice(SEEDS_HTTP)))
        blast(server.resp_port, mutate(rng, rng.choice(SEEDS_RESP)))
        if i % 10 == 0:
            blast(server.admin_port, mutate(rng, rng.choice(SEEDS_HTTP)))
            blast(server.grpc_port, mutate(rng, rng.choice(SEEDS_HTTP + SEEDS_RESP)))
    assert server.proc.poll() is None
    assert requests.get(server.http + "/healthz", timeout=5).text == "ok\n"
    assert Resp(server.resp_port).command("PING") == "PONG"
    assert requests.get(server.admin + "/readyz", timeout=5).status_code == 200
