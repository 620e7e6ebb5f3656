# SPDX-License-Identifier: Apache-2.0
"""The scripts behind `make run` and `make test`, as a newcomer meets them: deps.sh
installs by purpose (running never pulls in the test servers or the fuzzing toolchain)
and, without apt, says what to install instead of failing with "command not found";
CMake stops at configure time naming the Debian packages that are missing; run.sh turns
HTTP/RESP/GRPC/ADMIN into flags and names a port that is already taken."""
import os
import re
import shutil
import socket
import subprocess
import tempfile

from conftest import SRC, free_port

DEPS = os.path.join(SRC, "scripts", "deps.sh")
RUN = os.path.join(SRC, "scripts", "run.sh")


def listed(*purposes):
    args = []
    for p in purposes:
        args += ["--for", p]
    r = subprocess.run(["bash", DEPS, "--list"] + args, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def test_deps_by_purpose():
    run, build, test = listed("run"), listed("build"), listed("test")
    bench, fuzz = listed("bench"), listed("fuzz")
    assert {"cmake", "libyaml-dev", "libhiredis-dev", "protobuf-c-compiler", "tzdata"} <= run
    assert not run & {"clang", "nginx-light", "redis-server", "python3-pytest", "scdoc", "caddy"}
    assert build == run | {"scdoc", "libcurl4-openssl-dev"}
    assert build < test and {"nginx-light", "caddy", "haproxy", "redis-server", "debhelper",
                             "python3-pytest", "librsvg2-bin", "man-db"} <= test
    assert {"wrk", "haproxy", "nginx-light", "redis-tools"} <= bench and "clang" not in bench
    assert {"clang", "libclang-rt-14-dev"} <= fuzz and build <= fuzz
    assert listed() == build | test                      # no argument: what CI needs
    # debian/control builds with the same libraries
    with open(os.path.join(SRC, "debian", "control")) as f:
        field = re.search(r"^Build-Depends:(.*?)^\S", f.read(), re.S | re.M).group(1)
    build_depends = {re.match(r"\s*([a-z0-9.+-]+)", d).group(1) for d in field.split(",") if d.strip()}
    assert build - {"build-essential", "tzdata"} <= build_depends, build - build_depends


def test_deps_without_apt_says_what_to_install(tmp_path):
    # a PATH with bash and nothing Debian-specific
    (tmp_path / "bash").symlink_to(shutil.which("bash"))
    r = subprocess.run([str(tmp_path / "bash"), DEPS, "--for", "run"], capture_output=True,
                       text=True, timeout=30, env={"PATH": str(tmp_path)})
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Install by hand" in r.stderr and "libyaml" in r.stderr and "cmake" in r.stderr
    bad = subprocess.run(["bash", DEPS, "--for", "nonsense"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "run, build, test, bench or fuzz" in bad.stderr


def test_cmake_names_missing_debian_packages():
    with tempfile.TemporaryDirectory() as build:
        empty = os.path.join(build, "no-pc-files")
        os.mkdir(empty)
        env = dict(os.environ, PKG_CONFIG_LIBDIR=empty, PKG_CONFIG_PATH="")
        r = subprocess.run(["cmake", "-S", SRC, "-B", os.path.join(build, "b")], env=env,
                           capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    for pkg in ("libyaml-dev", "libjansson-dev", "libhiredis-dev", "libnghttp2-dev",
                "libprotobuf-c-dev"):
        assert pkg in r.stderr, (pkg, r.stderr[-2000:])
    assert "scripts/deps.sh --for build" in r.stderr


def run_sh(env_extra, tmp_path):
    """run.sh with /bin/echo as the program: prints the command it would start."""
    env = dict(os.environ, HTTP="", RESP="", GRPC="", ADMIN="", STORE="", WORKERS="")
    env.update(env_extra)
    return subprocess.run(["bash", RUN, "/bin/echo", "examples/sluice.yaml"], env=env,
                          capture_output=True, text=True, timeout=30)


def test_run_passes_ports_as_flags(tmp_path):
    ports = [free_port() for _ in range(3)]
    r = run_sh({"HTTP": "127.0.0.1:%d" % ports[0], "RESP": "127.0.0.1:%d" % ports[1],
                "GRPC": "off", "ADMIN": "127.0.0.1:%d" % ports[2], "WORKERS": "2"}, tmp_path)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last == ("serve -c examples/sluice.yaml --http 127.0.0.1:%d --resp 127.0.0.1:%d "
                    "--grpc off --admin 127.0.0.1:%d --workers 2" % tuple(ports))
    banner = r.stdout.splitlines()[0]
    assert "http 127.0.0.1:%d" % ports[0] in banner and "grpc off" in banner
    assert "http://127.0.0.1:%d/v1/auth" % ports[0] in r.stdout   # the try-it lines follow


def test_run_names_a_taken_port(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        r = run_sh({"HTTP": "127.0.0.1:%d" % port, "RESP": "off", "GRPC": "off", "ADMIN": "off"},
                   tmp_path)
    finally:
        busy.close()
    assert r.returncode == 1 and "HTTP" in r.stderr and "make run HTTP=" in r.stderr, r.stderr
    assert "serve -c" not in r.stdout
