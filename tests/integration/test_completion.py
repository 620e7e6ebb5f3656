# SPDX-License-Identifier: Apache-2.0
"""Bash completion (dist/sluice.bash-completion, installed by `make install` and the
package) offers what the program accepts: every command of `sluice --help`, every flag
of `sluice serve --help`, every pattern of `sluice simulate --help`, and values where a
flag takes a known form. Checked against the built program, so a new flag without its
completion fails here."""
import os
import re
import subprocess

from conftest import BIN, SRC

SCRIPT = os.path.join(SRC, "dist", "sluice.bash-completion")


def complete(line):
    """COMPREPLY for the command line `line` (the cursor at its end)."""
    words = line.split(" ")
    prog = ('source "$1"; COMP_WORDS=(%s); COMP_CWORD=%d; _sluice; printf "%%s\\n" "${COMPREPLY[@]}"'
            % (" ".join("'%s'" % w for w in words), len(words) - 1))
    r = subprocess.run(["bash", "-c", prog, "bash", SCRIPT], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return set(x for x in r.stdout.split("\n") if x)


def help_text(*args):
    r = subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=30)
    return r.stdout + r.stderr


def test_commands():
    listed = set(re.findall(r"^  ([a-z]+)", help_text("--help"), re.M))
    assert {"serve", "config", "simulate", "version"} <= listed
    assert listed <= complete("sluice ")
    assert complete("sluice se") == {"serve"}
    assert complete("sluice config ") >= {"check"}


def test_every_serve_flag_is_offered():
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-z])\b", help_text("serve", "--help")))
    assert {"--http", "--store", "--test-clock", "-c"} <= flags
    assert flags - {"-h"} <= complete("sluice serve -")
    assert complete("sluice serve --h") == {"--http", "--help"}
    assert {"memory:", "redis://", "rediss://", "redis-cluster://", "redis-sentinel://",
            "unix://"} == complete("sluice serve --store ")
    assert "off" in complete("sluice serve --grpc ")


def test_every_simulate_pattern_is_offered():
    text = help_text("simulate", "--help")
    patterns = set(re.findall(r"^  ([a-z]+) ", text[text.index("patterns:"):], re.M))
    assert {"steady", "burst", "boundary", "identities", "all"} <= patterns
    assert patterns <= complete("sluice simulate ")
    assert complete("sluice simulate b") == {"burst", "boundary", "borrow"}


def test_config_files_are_offered(tmp_path):
    (tmp_path / "a.yaml").write_text("x")
    (tmp_path / "b.txt").write_text("x")
    got = complete("sluice config check " + str(tmp_path) + "/")
    assert str(tmp_path / "a.yaml") in got and str(tmp_path / "b.txt") not in got


def test_every_flag_of_every_command_is_offered():
    """Each command's --help and its completion list the same flags (one option parser
    behind them all: sluice CMD --help is what it accepts)."""
    for cmd, line in [(["explain"], "sluice explain -"), (["replay"], "sluice replay -"),
                      (["simulate"], "sluice simulate -"), (["reload"], "sluice reload -"),
                      (["status"], "sluice status -"), (["config", "check"], "sluice config check -")]:
        flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-z])\b", help_text(*cmd, "--help")))
        assert flags, cmd
        missing = flags - {"-h"} - complete(line)
        assert not missing, (cmd, missing)
