#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""hold-ports.py PORT... -- COMMAND...: runs COMMAND while 127.0.0.1:PORT is taken for
each PORT (listening, never accepting), the way a developer's `make run` or another
service takes sluice's default ports. A port that some other process already holds is
left to it: the condition is the same. Exits with COMMAND's status.
CI runs `make test` under it with 8080 6380 8081 8082 9090, so a test that assumes a default
port is free fails here instead of on a developer's machine."""
import errno
import socket
import subprocess
import sys


def main(argv):
    if "--" not in argv:
        print("usage: hold-ports.py PORT... -- COMMAND...", file=sys.stderr)
        return 2
    i = argv.index("--")
    ports, cmd = [int(p) for p in argv[:i]], argv[i + 1:]
    held = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
            held.append(s)
            print("hold-ports: holding 127.0.0.1:%d" % port, file=sys.stderr)
        except OSError as e:
            s.close()
            if e.errno != errno.EADDRINUSE:
                raise
            print("hold-ports: 127.0.0.1:%d is already taken by another process" % port,
                  file=sys.stderr)
    try:
        return subprocess.call(cmd)
    finally:
        for s in held:
            s.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
