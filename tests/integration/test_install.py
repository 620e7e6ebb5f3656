# SPDX-License-Identifier: Apache-2.0
"""`make install` gives a usable library: header, static and shared libraries, a
relocatable pkg-config file; the shared library exports only the public sluice_* API;
the README's library example compiles against it and runs."""
import os
import re
import subprocess
import tempfile

BIN = os.environ.get("SLUICE_BIN", "build/sluice")
SRC = os.environ.get("SLUICE_SRC", ".")
BUILD = os.path.dirname(os.path.abspath(BIN))


def readme_example():
    text = open(os.path.join(SRC, "README.md")).read()
    block = re.search(r"```c\n(.*?)```", text, re.S).group(1)
    body = "\n".join(l for l in block.splitlines() if not l.startswith("#include"))
    return "#include <stdio.h>\n#include <sluice.h>\nint main(void) {\n" + body + \
        "\nreturn 0;\n}\n"


def test_install_and_build_against_it():
    with tempfile.TemporaryDirectory() as prefix:
        subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], check=True,
                       capture_output=True, timeout=120)
        for f in ["include/sluice.h", "lib/libsluice.a", "lib/libsluice.so",
                  "lib/pkgconfig/sluice.pc", "bin/sluice"]:
            assert os.path.exists(os.path.join(prefix, f)), f
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib/pkgconfig"))
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "sluice"], env=env,
                               check=True, capture_output=True, text=True).stdout.split()
        includes = [os.path.normpath(f[2:]) for f in flags if f.startswith("-I")]
        assert os.path.join(prefix, "include") in includes, flags
        src = os.path.join(prefix, "ex.c")
        open(src, "w").write(readme_example())
        exe = os.path.join(prefix, "ex")
        # A sanitizer build installs an instrumented library: its users link the runtime.
        cache = open(os.path.join(BUILD, "CMakeCache.txt")).read()
        san = ["-fsanitize=address,undefined"] if "SLUICE_SANITIZE:BOOL=ON" in cache else []
        subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", src, "-o", exe,
                        "-Wl,-rpath," + os.path.join(prefix, "lib")] + san + flags,
                       check=True, capture_output=True, timeout=120)
        assert subprocess.run([exe], timeout=30).returncode == 0

        syms = subprocess.run(["nm", "-D", "--defined-only",
                               os.path.join(prefix, "lib/libsluice.so")],
                              check=True, capture_output=True, text=True).stdout.split("\n")
        exported = [l.split()[-1] for l in syms if " T " in l]
        assert exported, "no symbols exported"
        assert all(s.startswith("sluice_") for s in exported), \
            [s for s in exported if not s.startswith("sluice_")]


def test_config_goes_to_sysconfdir_by_the_gnu_rules(tmp_path):
    """`make install PREFIX=/usr` puts the config in /etc/sluice/ (GNUInstallDirs: sysconfdir
    is /etc for the prefix /usr), any other prefix in PREFIX/etc/sluice/; staged by DESTDIR."""
    for prefix, want, not_there in [("/usr", "etc/sluice/sluice.yaml", "usr/etc"),
                                    ("/opt/sl", "etc/opt/sl/sluice/sluice.yaml", "opt/sl/etc"),
                                    ("/usr/local", "usr/local/etc/sluice/sluice.yaml", "etc")]:
        dest = tmp_path / prefix.strip("/").replace("/", "_")
        subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], check=True,
                       capture_output=True, timeout=120, env=dict(os.environ, DESTDIR=str(dest)))
        assert (dest / want).is_file(), sorted(str(p.relative_to(dest)) for p in dest.rglob("sluice.yaml"))
        assert not (dest / not_there / "sluice").exists(), prefix
        assert (dest / prefix.strip("/") / "bin/sluice").is_file()
