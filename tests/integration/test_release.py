# SPDX-License-Identifier: Apache-2.0
"""What a release is made of, as users and packagers see it: one version everywhere
(CMake, the header, debian/changelog, the newest release in CHANGELOG.md), the version
built into the program and the library from `git describe` (or a packager's version, or
the project version without git), and `sluice --version` agreeing with sluice_version()."""
import os
import re
import subprocess
import tempfile

from conftest import BIN, SRC

BUILD = os.path.dirname(os.path.abspath(BIN))


def read(*parts):
    with open(os.path.join(SRC, *parts)) as f:
        return f.read()


def project_version():
    return re.search(r"project\(sluice VERSION (\d+\.\d+\.\d+)", read("CMakeLists.txt")).group(1)


def test_one_version_everywhere():
    v = project_version()
    header = re.search(r'#define SLUICE_VERSION "([^"]+)"', read("include", "sluice.h")).group(1)
    deb = re.match(r"sluice \(([^)]+)\)", read("debian", "changelog")).group(1)
    released = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]? - \d{4}-\d\d-\d\d$", read("CHANGELOG.md"), re.M)
    assert released, "CHANGELOG.md names no release"
    assert (header, deb.split("-")[0], released[0]) == (v, v, v)


def describe(tmp, fallback="1.2.3", override=""):
    out = os.path.join(tmp, "v.h")
    subprocess.run(["cmake", "-DSRC=" + tmp, "-DOUT=" + out, "-DFALLBACK=" + fallback,
                    "-DOVERRIDE=" + override, "-P", os.path.join(SRC, "cmake", "version.cmake")],
                   check=True, capture_output=True, timeout=60)
    with open(out) as f:
        return re.search(r'SLUICE_BUILD_VERSION "([^"]*)"', f.read()).group(1)


def git(tmp, *args):
    subprocess.run(["git", "-C", tmp, "-c", "user.name=t", "-c", "user.email=t@t",
                    "-c", "commit.gpgsign=false"] + list(args),
                   check=True, capture_output=True, timeout=60)


def test_version_comes_from_git_describe_else_the_project_version():
    with tempfile.TemporaryDirectory() as tmp:
        assert describe(tmp) == "1.2.3"                      # no git: the fallback
        git(tmp, "init", "-q")
        with open(os.path.join(tmp, "f"), "w") as f:
            f.write("a\n")
        git(tmp, "add", "f")
        git(tmp, "commit", "-qm", "one")
        assert describe(tmp) == "1.2.3"                      # git, but no release tag
        git(tmp, "tag", "v9.8.7")
        assert describe(tmp) == "9.8.7"                      # on the tag
        with open(os.path.join(tmp, "f"), "w") as f:
            f.write("b\n")
        git(tmp, "commit", "-qam", "two")
        v = describe(tmp)
        assert re.fullmatch(r"9\.8\.7-1-g[0-9a-f]{7,}", v), v  # one commit past it
        with open(os.path.join(tmp, "f"), "w") as f:
            f.write("c\n")
        assert describe(tmp).endswith("-dirty")               # uncommitted changes
        assert describe(tmp, override="4.5.6") == "4.5.6"     # a packager's version wins


def test_the_program_and_the_library_report_the_built_version():
    """sluice_version() from the built library is the string cmake/version.cmake writes
    for this tree, and `sluice --version` prints the same."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "v.c")
        with open(src, "w") as f:
            f.write('#include <stdio.h>\n#include <sluice.h>\n'
                    'int main(void) { puts(sluice_version()); return 0; }\n')
        exe = os.path.join(tmp, "v")
        cache = read(os.path.join(BUILD, "CMakeCache.txt"))
        san = ["-fsanitize=address,undefined"] if "SLUICE_SANITIZE:BOOL=ON" in cache else []
        flags = subprocess.run(["pkg-config", "--libs", "yaml-0.1", "jansson"], check=True,
                               capture_output=True, text=True).stdout.split()
        subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-I", os.path.join(SRC, "include"),
                        src, os.path.join(BUILD, "libsluice.a"), "-o", exe, "-lpthread", "-lm"]
                       + flags + san, check=True, capture_output=True, timeout=120)
        lib = subprocess.run([exe], check=True, capture_output=True, text=True,
                             timeout=30).stdout.strip()
        with open(os.path.join(BUILD, "sluice_version.h")) as f:
            built = re.search(r'SLUICE_BUILD_VERSION "([^"]*)"', f.read()).group(1)
    assert lib == built, (lib, built)
    out = subprocess.run([BIN, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "sluice " + lib, out.stdout
