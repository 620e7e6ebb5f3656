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


EXAMPLE = os.path.join(os.environ.get("SLUICE_SRC", "."), "examples", "sluice.yaml")


def test_every_command_takes_opt_equals_value_and_opt_value():
    """One option parser for every command: --opt=value and --opt value mean the same, and
    an unknown option is one line naming it and the command's --help, exit status 2."""
    port = free_port()  # nobody listens there
    cases = [
        # (args with --opt=value, the same with --opt value, what both print, exit status)
        (["serve", "--resp=off", "--grpc=off", "--admin=off", "--http=nonsense", "-c", EXAMPLE],
         ["serve", "--resp", "off", "--grpc", "off", "--admin", "off", "--http", "nonsense", "-c", EXAMPLE],
         "invalid http address", 1),
        (["explain", "-c", EXAMPLE, "--raw-keys", "--compact", "--ip=10.1.2.3", "--path=/x"],
         ["explain", "-c", EXAMPLE, "--raw-keys", "--compact", "--ip", "10.1.2.3", "--path", "/x"],
         '"ip":"10.1.2.3"', 0),
        (["explain", "--config=" + EXAMPLE, "--cost=x"], ["explain", "--config", EXAMPLE, "--cost", "x"],
         "--cost expects a non-negative number, got: x", 2),
        (["replay", "-c", EXAMPLE, "--format=bogus", "t.log"], ["replay", "-c", EXAMPLE, "--format", "bogus", "t.log"],
         "--format is auto, nginx, json or csv, got 'bogus'", 2),
        (["replay", "--config=" + EXAMPLE, "--max-keys=many", "t.log"],
         ["replay", "--config", EXAMPLE, "--max-keys", "many", "t.log"],
         "--max-keys expects a number, got 'many'", 2),
        (["simulate", "--seconds=3", "burst"], ["simulate", "--seconds", "3", "burst"], "(3 s, ", 0),
        (["simulate", "burst", "--seconds=0"], ["simulate", "burst", "--seconds", "0"], "--seconds takes 1..", 2),
        (["status", "--admin=127.0.0.1:%d" % port], ["status", "--admin", "127.0.0.1:%d" % port],
         "cannot reach the admin listener at 127.0.0.1:%d" % port, 1),
        (["reload", "--admin=127.0.0.1:%d" % port], ["reload", "--admin", "127.0.0.1:%d" % port],
         "cannot reach the admin listener at 127.0.0.1:%d" % port, 1),
    ]
    for eq, sp, text, code in cases:
        a, b = sluice(*eq), sluice(*sp)
        for r, args in ((a, eq), (b, sp)):
            assert r.returncode == code and text in r.stdout + r.stderr, (args, r.returncode, r.stdout[-500:], r.stderr)
        assert a.stdout.replace(" ", "") == b.stdout.replace(" ", "") or eq[0] == "explain", (eq, sp)
    # config check has flags only: both spellings of its file position, a value refused
    assert sluice("config", "check", "--no-state", EXAMPLE).returncode == 0
    assert sluice("config", "check", EXAMPLE, "--no-state").returncode == 0
    r = sluice("config", "check", "--no-state=yes", EXAMPLE)
    assert r.returncode == 2 and "unexpected value for '--no-state'" in r.stderr, r.stderr
    for cmd in (["serve"], ["explain", "-c", EXAMPLE], ["replay", "-c", EXAMPLE, "t.log"], ["simulate"],
                ["status"], ["reload"], ["config", "check", EXAMPLE]):
        name = " ".join(cmd[:2]) if cmd[0] == "config" else cmd[0]
        for bogus in ("--bogus", "--bogus=1"):
            r = sluice(*(cmd + [bogus]))
            assert r.returncode == 2, (cmd, bogus, r.stderr)
            assert r.stderr == "sluice %s: unknown option '%s' (sluice %s --help)\n" % (name, bogus, name), r.stderr
        r = sluice(*(cmd + ["-Z"]))
        assert r.returncode == 2 and "unknown option '-Z'" in r.stderr, (cmd, r.stderr)


def test_explain_without_ip_answers_as_the_server_would():
    """Without --ip, explain used to blame the first policy keyed on the address for a
    missing key (400), which the server, that always has the peer's address, never does:
    now the address of a gateway on this host stands in, and the echo says so."""
    import json
    r = sluice("explain", "-c", EXAMPLE, "--method", "POST", "--path", "/login", "--compact")
    assert r.returncode == 0, r.stderr
    x = json.loads(r.stdout)
    assert x["answer"]["action"] == "allow" and x["answer"]["deciding"]["policy"] == "login", x["answer"]
    assert x["request"]["ip_default"].startswith("127.0.0.1"), x["request"]
    # the same as naming that address
    y = json.loads(sluice("explain", "-c", EXAMPLE, "--method", "POST", "--path", "/login", "--ip",
                          "127.0.0.1", "--compact").stdout)
    assert y["answer"] == x["answer"] and "ip_default" not in y["request"]
    # not an address: refused, exit 2
    for bad in ("notanip", "10.0.0.256", "", "::g"):
        r = sluice("explain", "-c", EXAMPLE, "--ip", bad)
        assert r.returncode == 2 and "--ip expects an IPv4 or IPv6 address" in r.stderr, (bad, r.stderr)
    r = sluice("explain", "-c", EXAMPLE, "--ip", "2001:db8::1", "--compact")
    assert r.returncode == 0, r.stderr


def test_explain_echoes_the_ip_headers_route_and_bytes():
    import json
    args = ["explain", "-c", EXAMPLE, "--compact", "--method", "PUT", "--path", "/files/a",
            "--ip", "192.0.2.7", "--route", "up", "--bytes", "123", "--header", "X-Api-Key: sekrit-key-9",
            "--header", "X-Plan: pro"]
    raw = json.loads(sluice(*(args + ["--raw-keys"])).stdout)["request"]
    assert raw["ip"] == "192.0.2.7" and raw["route"] == "up" and raw["bytes"] == 123, raw
    assert raw["headers"] == [{"name": "X-Api-Key", "value": "sekrit-key-9"}, {"name": "X-Plan", "value": "pro"}]
    # keys are personal data: without raw keys the address and header values are hashes
    r = sluice(*args)
    hashed = json.loads(r.stdout)["request"]
    assert "sekrit-key-9" not in r.stdout and "192.0.2.7" not in r.stdout
    assert hashed["ip_hash"].startswith("k:") and [h["name"] for h in hashed["headers"]] == ["X-Api-Key", "X-Plan"]
    assert all(h["value_hash"].startswith("k:") for h in hashed["headers"])


def test_config_check_says_why_a_file_cannot_be_read(tmp_path):
    r = sluice("config", "check", str(tmp_path / "missing.yaml"))
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[0] == "%s: cannot open the file: No such file or directory " \
        "(expected a readable YAML file)" % (tmp_path / "missing.yaml"), r.stderr
    assert ":0:0" not in r.stderr


def test_every_admin_command_defaults_to_the_admin_listeners_address():
    """`sluice override` talked to 127.0.0.1:9090 (the envoy-compat metrics port) while
    the admin listener defaults to 127.0.0.1:8082, as `sluice status` and `reload` say."""
    for cmd in ("status", "reload", "override"):
        out = sluice(cmd, "--help")
        text = out.stdout + out.stderr
        assert "127.0.0.1:8082" in text, (cmd, text)
        assert "9090" not in text, (cmd, text)
    # and the one it would dial: an unreachable default is named in the error
    env = dict(os.environ, SLUICE_ADMIN="127.0.0.1:%d" % free_port())
    env.pop("SLUICE_ADMIN_TOKEN", None)
    got = sluice("override", "ls", env=env)
    assert got.returncode == 1 and env["SLUICE_ADMIN"] in got.stderr, got.stderr
