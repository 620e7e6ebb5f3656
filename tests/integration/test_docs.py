# SPDX-License-Identifier: Apache-2.0
"""The user documentation stays true to the program: every relative link resolves (to a
file, and to a heading when it names one), every complete config shown in the docs
loads, the manual pages name every flag `sluice serve --help` lists and every config
field the program accepts, benchmark figures live in one place, and no user page
carries developer notes."""
import glob
import os
import re
import subprocess

from conftest import BIN, SRC

OWN_DOCS = ["README.md", "CHANGELOG.md", "DEVELOPERS.md"] + sorted(
    os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, "docs", "*.md")))


def read(rel):
    with open(os.path.join(SRC, rel)) as f:
        return f.read()


def slug(heading):
    """GitHub's anchor for a heading."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def test_relative_links_resolve():
    bad = []
    for doc in OWN_DOCS:
        text = re.sub(r"```.*?```", "", read(doc), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(SRC, os.path.dirname(doc), path)) if path \
                else os.path.join(SRC, doc)
            if not os.path.exists(full):
                bad.append((doc, target))
            elif anchor and full.endswith(".md"):
                with open(full) as f:
                    heads = [slug(h) for h in re.findall(r"^#+ (.*)$", f.read(), re.M)]
                if anchor not in heads:
                    bad.append((doc, target))
    assert bad == []


def test_configs_shown_in_the_docs_load(tmp_path):
    n = 0
    for doc in OWN_DOCS + ["docs/man/sluice.yaml.5.scd"]:
        blocks = [b for lang, b in re.findall(r"^```(\w*)\n(.*?)^```", read(doc), re.S | re.M)
                  if lang in ("yaml", "")]
        for i, block in enumerate(blocks):
            # complete configs only, not field listings with "..." placeholders
            if not re.search(r"^policies:", block, re.M) or "..." in block:
                continue
            f = tmp_path / ("%s.%d.yaml" % (os.path.basename(doc), i))
            f.write_text(block)
            r = subprocess.run([BIN, "config", "check", str(f)], capture_output=True,
                               text=True, timeout=30)
            assert r.returncode == 0, (doc, i, r.stdout + r.stderr)
            n += 1
    assert n >= 4, n


def accepted_fields(tmp_path):
    """The fields the program accepts, as its own diagnostics list them."""
    f = tmp_path / "unknown.yaml"
    f.write_text("bogus: 1\nlisten: { bogus: 1 }\nstore: { bogus: 1 }\npolicies:\n"
                 "  - { name: p, objective: fairness, key: [], algorithm: gcra, bogus: 1,\n"
                 "      limits: [ { rate: 1/s, bogus: 1 } ] }\n")
    r = subprocess.run([BIN, "config", "check", str(f)], capture_output=True, text=True,
                       timeout=30)
    out = r.stdout + r.stderr
    fields = {}
    for where, names in re.findall(r"unknown field 'bogus' in (.*?) \(expected one of: (.*?)\)", out):
        fields[where] = names.split(", ")
    assert set(fields) == {"the config", "listen", "store", "a policy", "a limit"}, out
    return fields


def test_man_pages_cover_the_program(tmp_path):
    man1 = read("docs/man/sluice.1.scd")
    help_text = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True,
                               timeout=30).stdout
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", help_text)) - {"--help"}
    assert flags and all("*%s*" % f in man1 for f in flags), sorted(f for f in flags if "*%s*" % f not in man1)
    man5 = read("docs/man/sluice.yaml.5.scd")
    missing = [(where, n) for where, names in accepted_fields(tmp_path).items() for n in names
               if "*%s" % n not in man5]
    assert missing == []
    server = read("docs/server.md")
    assert all(f in server for f in flags), sorted(f for f in flags if f not in server)


def test_benchmark_figures_live_in_one_place():
    figures = re.compile(r"^\|.*\b\d+(\.\d+)? ?(k/s|M/s|ns|us CPU)", re.M)
    holders = [d for d in OWN_DOCS if figures.search(read(d))]
    assert holders == ["docs/benchmarks.md"], holders


def test_no_developer_notes_in_user_docs():
    for doc in glob.glob(os.path.join(SRC, "docs", "*.md")):
        text = read(os.path.relpath(doc, SRC))
        assert "Seams" not in text and "what comes next" not in text, doc
        assert not re.search(r"\bsl_[a-z]+_[a-z_]+\(", text), doc


def test_every_route_the_server_answers_is_in_server_md():
    """docs/server.md names every path the HTTP and admin listeners dispatch (/v1/finish
    was missing from its table)."""
    doc = read("docs/server.md")
    routes = set()
    for src in ("src/api/http/http_api.c", "src/api/admin/admin_api.c"):
        # (the data listener's routes are its table's ROUTE(...) entries)
        routes |= set(re.findall(r'(?:path_is\(&?x, |ROUTE\()"(/[^"]*)"', read(src)))
    assert {"/v1/check", "/v1/auth", "/v1/finish", "/v1/reload"} <= routes, routes
    missing = sorted(r for r in routes if not re.search(r"[` ]%s[`?\s\[]" % re.escape(r), doc))
    assert missing == [], missing


def test_example_configs_check_without_warnings():
    """The shipped examples pass their own check cleanly: a warning there (a policy that
    needs /v1/finish) is one a new user meets before writing a line."""
    files = sorted(glob.glob(os.path.join(SRC, "examples", "*.yaml")) +
                   glob.glob(os.path.join(SRC, "examples", "envoy", "*.yaml")))
    assert len(files) >= 5
    for f in files:
        r = subprocess.run([BIN, "config", "check", "--no-state", f], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0 and r.stderr == "", (f, r.stderr)
    # the nginx recipe calls /v1/finish, as examples/sluice.yaml's auth.finish says
    nginx = read("examples/nginx/nginx.conf")
    assert "include sluice-finish.conf;" in nginx and "include sluice-finish-location.conf;" in nginx


def test_every_unit_the_parser_accepts_is_documented():
    """10/sec, 10/second, 30 minutes: each spelling the parser takes is in docs/config.md
    and the man page."""
    src = read("src/config/yaml.c")
    table = src[src.index("} units[] = {"):]
    table = table[:table.index("};")]
    names = re.findall(r'\{"(\w+)",', table)
    assert {"s", "sec", "second", "minutes", "week"} <= set(names), names
    for doc in ("docs/config.md", "docs/man/sluice.yaml.5.scd"):
        text = read(doc)
        missing = [n for n in names if not re.search(r"[`*]%s[`*]" % n, text)]
        assert missing == [], (doc, missing)


def test_logrotate_and_layout_say_what_exists():
    """No pid file is written (the unit has no PIDFile=): the docs signal through systemd;
    README's layout names the source folders that exist and every command of --help."""
    unit = read("dist/sluice.service.in")
    for doc in OWN_DOCS + ["docs/man/sluice.1.scd", "debian/README.Debian"]:
        if "PIDFile=" not in unit:
            assert "/run/sluice.pid" not in read(doc), doc
    readme = read("README.md")
    layout = readme[readme.index("## Layout"):]
    layout = layout[:layout.index("```", layout.index("```") + 3)]
    named = set(re.findall(r"\bsrc/(\w+)", layout))
    present = {d for d in os.listdir(os.path.join(SRC, "src")) if os.path.isdir(os.path.join(SRC, "src", d))}
    assert named == present, (named ^ present)
    helped = set(re.findall(r"^  ([a-z]+)", subprocess.run([BIN, "--help"], capture_output=True,
                                                            text=True).stdout, re.M))
    cli = layout[layout.index("src/cli"):]
    cli = cli[:cli.index("\ntests/")]
    assert helped <= set(re.findall(r"[a-z]+", cli)), (helped, cli)
