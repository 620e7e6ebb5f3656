# SPDX-License-Identifier: Apache-2.0
"""The command line around the server: `sluice reload` and `sluice status` talk to a
running server's admin API (address and token from flags, variables or the config file),
say what happened, and exit 0/1/2; `sluice help TOPIC` is each command's --help."""
import os
import subprocess

from conftest import BIN, Server, free_port

CONFIG = """
admin: { token: s3cret-admin }
policies:
  - name: api
    objective: fairness
    key: [header.x-k]
    algorithm: gcra
    limits: [ { rate: 10/s } ]
"""


def sluice(*args, env=None):
    e = dict(os.environ)
    for k in ("SLUICE_ADMIN", "SLUICE_ADMIN_TOKEN", "SLUICE_CONFIG"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=30, env=e)


def test_status_and_reload_against_a_running_server():
    s = Server(config_text=CONFIG, test_clock=False)
    try:
        admin = "127.0.0.1:%d" % s.admin_port
        r = sluice("status", "--admin", admin, "--token", "s3cret-admin")
        assert r.returncode == 0 and "ready" in r.stdout and "api" in r.stdout, r.stdout + r.stderr
        # address and token from the variables
        r = sluice("reload", env={"SLUICE_ADMIN": admin, "SLUICE_ADMIN_TOKEN": "s3cret-admin"})
        assert r.returncode == 0 and "reloaded: generation 2" in r.stdout, r.stdout + r.stderr
        # a wrong token is refused and said so, the secret never echoed
        r = sluice("reload", "--admin", admin, "--token", "wrong")
        assert r.returncode == 1 and "token was refused" in r.stderr and "wrong" not in r.stderr
        # a broken file: refused, with file:line:col, and the server keeps its config
        with open(s.config_path, "a") as f:
            f.write("  - name: [broken\n")
        r = sluice("reload", "--admin", admin, "--token", "s3cret-admin")
        assert r.returncode == 1 and "refused (422)" in r.stderr, r.stderr
        assert "sluice.yaml:" in r.stderr, r.stderr
        r = sluice("status", "--admin", admin, "--token", "s3cret-admin")
        assert r.returncode == 0 and "ready" in r.stdout
    finally:
        s.stop()
    s.assert_clean()


def test_the_config_file_names_the_admin_listener_and_token(tmp_path):
    port = free_port()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG + "listen: { admin: 127.0.0.1:%d }\n" % port)
    s = Server(config_path=str(cfg), test_clock=False)  # the flag wins: another admin port
    try:
        r = sluice("status", "-c", str(cfg))  # the file's port: nobody there
        assert r.returncode == 1 and "cannot reach the admin listener at 127.0.0.1:%d" % port in r.stderr
        r = sluice("status", "-c", str(cfg), "--admin", "127.0.0.1:%d" % s.admin_port)
        assert r.returncode == 0 and "api" in r.stdout  # token from the file
    finally:
        s.stop()


def test_usage_errors_and_help_topics():
    r = sluice("reload", "--bogus")
    assert r.returncode == 2 and "unknown option '--bogus'" in r.stderr
    r = sluice("status", "extra")
    assert r.returncode == 2
    r = sluice("help", "serve")
    assert r.returncode == 0 and "usage: sluice serve" in r.stdout and "SLUICE_" in r.stdout
    r = sluice("help", "reload")
    assert r.returncode == 0 and "usage: sluice reload" in r.stdout
    r = sluice("help", "nope")
    assert r.returncode == 2 and "no help on 'nope'" in r.stderr
    r = sluice("nope")
    assert r.returncode == 2
