# SPDX-License-Identifier: Apache-2.0
"""The shape of the tree, checked: folders include only folders below them (no include
cycle; scripts/check_layers.py), and libsluice.so is exactly its public headers
(include/sluice.h and include/sluice_client.h): it exports the functions they declare,
nothing else, and needs no library beyond libc."""
import os
import re
import subprocess
import sys
import tempfile

SRC = os.environ.get("SLUICE_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
LIB = os.environ.get("SLUICE_LIB", "")
CHECK = os.path.join(SRC, "scripts", "check_layers.py")


def run_check(src):
    return subprocess.run([sys.executable, CHECK, src, "--graph"], capture_output=True, text=True)


def test_no_include_cycle_between_folders():
    r = run_check(os.path.join(SRC, "src"))
    assert r.returncode == 0, r.stderr
    graph = dict(line.split(" -> ") for line in r.stdout.strip().splitlines())
    graph = {k.strip(): set(v.split(", ")) for k, v in graph.items()}
    # the pipeline's arrows: nothing below the engine reaches up into it or the server
    high = {"engine", "server", "store/redis", "api/grpc", "api/http", "api/resp", "api/admin",
            "config", "cli", "tools"}
    for low in ("core", "algo", "store", "store/memory", "client"):
        assert not graph.get(low, set()) & high, graph
    # the store's interface knows neither store; the Redis store knows no server
    assert not graph.get("store", set()) & {"store/memory", "store/redis"}, graph
    assert not graph.get("store/redis", set()) & {"server", "api/grpc", "api/http", "api/resp",
                                                   "api/admin", "store/memory"}, graph
    # offline tools sit beside the CLI, never under the server
    for n in graph:
        assert "tools" not in graph[n], graph


def test_the_check_finds_a_cycle():
    with tempfile.TemporaryDirectory() as d:
        for a, b in (("low", "high"), ("high", "low")):
            os.makedirs(os.path.join(d, a))
            with open(os.path.join(d, a, a + ".h"), "w") as f:
                f.write('#include "%s/%s.h"\n' % (b, b))
        r = run_check(d)
        assert r.returncode == 1
        assert "include cycle" in r.stderr and "low" in r.stderr and "high" in r.stderr


def header_functions():
    names = set()
    for h in ("sluice.h", "sluice_client.h"):
        text = open(os.path.join(SRC, "include", h)).read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        names |= set(re.findall(r"\b(sluice_[a-z0-9_]+)\s*\(", text))
    return names


def test_library_exports_exactly_the_header():
    assert LIB and os.path.exists(LIB), "SLUICE_LIB not set"
    out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True, check=True).stdout
    exported = {l.split()[-1] for l in out.splitlines() if len(l.split()) == 3 and l.split()[1] in "TDBRW"}
    exported = {s.split("@")[0] for s in exported}
    declared = header_functions()
    assert declared, "no function found in the public headers"
    assert exported == declared, ("exported, not declared: %s; declared, not exported: %s"
                                  % (sorted(exported - declared), sorted(declared - exported)))


def test_library_needs_only_libc():
    out = subprocess.run(["readelf", "-d", LIB], capture_output=True, text=True, check=True).stdout
    needed = set(re.findall(r"Shared library: \[([^\]]+)\]", out))
    allowed = {"libc.so.6", "libm.so.6", "libpthread.so.0"}
    # the policy engine is in the library (issue 25, sluice_engine_*): configuration
    # (libyaml) and sealed settle/release tokens (libcrypto), as Debian shared libraries
    allowed |= {"libyaml-0.so.2", "libcrypto.so.3"}
    # glibc's dynamic loader: the engine's thread-local scratch uses __tls_get_addr
    allowed |= {"ld-linux-x86-64.so.2"}
    # a sanitizer build links its runtimes in (make test-asan); nothing else is allowed
    needed = {n for n in needed if not re.match(r"lib(asan|ubsan)\.so", n)}
    assert needed <= allowed, needed
