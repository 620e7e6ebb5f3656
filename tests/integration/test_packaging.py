# SPDX-License-Identifier: Apache-2.0
"""sluice as an operator installs it. The Debian packages are built from this tree with
`dpkg-buildpackage -us -uc -b` (scripts/deb.sh, nocheck: no tests inside the build) and
installed with `dpkg -i` into a scratch root (--root, maintainer scripts run without
chroot, as dpkg does for DPKG_ROOT), then checked as a user would: the files where
Debian puts them, the config as a conffile that an upgrade keeps, the unit accepted by
`systemd-analyze verify` and hardened, the man pages rendered by `man -l` without a
warning, `sluice --version`, the installed config loading and snapshotting into the
service's working directory, and a program built against libsluice-dev.
`make install` (CMake) is checked for the same files and for keeping an existing config."""
import gzip
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import BIN, SRC, free_port

BUILD = os.path.dirname(os.path.abspath(BIN))
SUDO = [] if os.geteuid() == 0 else ["fakeroot"]
MULTIARCH = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], check=True,
                           capture_output=True, text=True).stdout.strip()


def deb_version():
    with open(os.path.join(SRC, "debian", "changelog")) as f:
        return re.match(r"sluice \(([^)]+)\)", f.read()).group(1)


@pytest.fixture(scope="module")
def debs():
    out = tempfile.mkdtemp(prefix="sluice-deb-")
    env = dict(os.environ, DEB_BUILD_OPTIONS="nocheck parallel=2")
    r = subprocess.run(["bash", os.path.join(SRC, "scripts", "deb.sh"), out], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    v = deb_version()
    arch = subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                          text=True).stdout.strip()
    paths = {p: os.path.join(out, "%s_%s_%s.deb" % (p, v, arch))
             for p in ("sluice", "libsluice0", "libsluice-dev")}
    for p in paths.values():
        assert os.path.exists(p), (p, os.listdir(out))
    yield paths
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def root(debs):
    """A scratch root with an empty dpkg database and the three packages installed."""
    r = tempfile.mkdtemp(prefix="sluice-root-")
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"):
        os.makedirs(os.path.join(r, d))
    for f in ("var/lib/dpkg/status", "var/lib/dpkg/available"):
        open(os.path.join(r, f), "w").close()
    dpkg(r, "-i", debs["sluice"], debs["libsluice0"], debs["libsluice-dev"])
    yield r
    shutil.rmtree(r, ignore_errors=True)


def dpkg(root, *args):
    # The scratch database knows none of the host's packages, so dependencies are checked
    # separately (test_dependencies_are_installable); maintainer scripts run as DPKG_ROOT.
    r = subprocess.run(SUDO + ["dpkg", "--root=" + root, "--force-script-chrootless",
                               "--force-depends", "--log=/dev/null", "--force-confold"]
                       + list(args), env=dict(os.environ, DPKG_ROOT=root),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def contents(deb):
    out = subprocess.run(["dpkg-deb", "-c", deb], check=True, capture_output=True,
                         text=True).stdout
    return {l.split()[5].lstrip(".") for l in out.splitlines() if not l.split()[5].endswith("/")}


def test_packages_hold_what_each_user_needs(debs):
    lib = "/usr/lib/" + MULTIARCH
    server = contents(debs["sluice"])
    for f in ["/usr/bin/sluice", "/etc/sluice/sluice.yaml", "/lib/systemd/system/sluice.service",
              "/usr/share/bash-completion/completions/sluice", "/usr/share/man/man1/sluice.1.gz",
              "/usr/share/man/man5/sluice.yaml.5.gz", "/usr/share/doc/sluice/copyright",
              "/usr/share/doc/sluice/getting-started.md.gz", "/usr/share/doc/sluice/operations.md.gz",
              "/usr/share/doc/sluice/examples/nginx/sluice-auth.conf",
              "/usr/share/doc/sluice/examples/caddy/Caddyfile",
              "/usr/share/doc/sluice/examples/haproxy/haproxy.cfg"]:
        assert f in server, f
    shared = contents(debs["libsluice0"])
    assert lib + "/libsluice.so.0" in shared
    assert any(f.startswith(lib + "/libsluice.so.0.") for f in shared), shared
    assert {"/usr/include/sluice.h", lib + "/libsluice.so", lib + "/libsluice.a",
            lib + "/pkgconfig/sluice.pc", "/usr/share/man/man3/libsluice.3.gz"} <= contents(debs["libsluice-dev"])
    assert not any(f.startswith("/usr/local") for d in debs.values() for f in contents(d))
    conf = subprocess.run(["dpkg-deb", "-I", debs["sluice"], "conffiles"], check=True,
                          capture_output=True, text=True).stdout.split()
    assert conf == ["/etc/sluice/sluice.yaml"]


def test_dependencies_are_installable(debs, tmp_path):
    """Every Depends of the packages (but their own) is satisfied by this Debian: checked
    by dpkg-checkbuilddeps on a control file that lists them."""
    deps = []
    for deb in debs.values():
        d = subprocess.run(["dpkg-deb", "-f", deb, "Depends"], check=True, capture_output=True,
                           text=True).stdout.strip()
        deps += [x.strip() for x in d.split(",") if x.strip() and not x.strip().startswith("libsluice")]
    assert any(x.startswith("tzdata") for x in deps), deps
    ctl = tmp_path / "control"
    ctl.write_text("Source: x\nBuild-Depends: %s\n\nPackage: x\nArchitecture: any\n" % ", ".join(deps))
    r = subprocess.run(["dpkg-checkbuilddeps", str(ctl)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_dpkg_install_enables_the_unit_and_an_upgrade_keeps_the_config(root, debs):
    assert os.path.islink(os.path.join(root, "etc/systemd/system/multi-user.target.wants/sluice.service"))
    conf = os.path.join(root, "etc/sluice/sluice.yaml")
    with open(conf, "a") as f:
        f.write("# an operator's edit\n")
    dpkg(root, "-i", debs["sluice"])                 # reinstall = upgrade to the same version
    with open(conf) as f:
        assert f.read().endswith("# an operator's edit\n")


def test_unit_passes_systemd_analyze_and_is_hardened(root, tmp_path):
    with open(os.path.join(root, "lib/systemd/system/sluice.service")) as f:
        unit = f.read()
    for line in ["DynamicUser=yes", "StateDirectory=sluice", "ProtectSystem=strict",
                 "NoNewPrivileges=yes", "CapabilityBoundingSet=\n", "AmbientCapabilities=\n",
                 "ExecReload=/bin/kill -HUP $MAINPID",
                 "ExecStart=/usr/bin/sluice serve -c /etc/sluice/sluice.yaml"]:
        assert line in unit, line
    # systemd-analyze looks at the host's paths: point the unit at the scratch root.
    local = tmp_path / "sluice.service"
    local.write_text(unit.replace("/usr/bin/", root + "/usr/bin/")
                     .replace("/etc/sluice/", root + "/etc/sluice/"))
    env = dict(os.environ, MANPATH=os.path.join(root, "usr/share/man"))
    r = subprocess.run(["systemd-analyze", "verify", str(local)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stderr.strip() == "" and r.stdout.strip() == "", r.stdout + r.stderr
    sec = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(local)],
                         capture_output=True, text=True, timeout=60)
    level = re.search(r"Overall exposure level for sluice.service: ([0-9.]+)", sec.stdout + sec.stderr)
    assert level and float(level.group(1)) <= 2.0, sec.stdout[-2000:]


@pytest.mark.parametrize("page,title", [("man1/sluice.1.gz", "sluice - rate limiting"),
                                        ("man5/sluice.yaml.5.gz", "sluice.yaml - configuration"),
                                        ("man3/libsluice.3.gz", "libsluice - embeddable")])
def test_man_pages_render_without_warnings(root, page, title):
    path = os.path.join(root, "usr/share/man", page)
    r = subprocess.run(["man", "--warnings", "-l", path], env=dict(os.environ, MANWIDTH="80",
                       MAN_KEEP_FORMATTING="0", MANPAGER="cat", PAGER="cat"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    text = re.sub(r".\x08", "", r.stdout)
    assert title in text and "SEE ALSO" in text, text[:500]


def test_installed_program_reports_the_package_version(root):
    r = subprocess.run([os.path.join(root, "usr/bin/sluice"), "--version"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "sluice " + deb_version().split("-")[0]


def test_installed_config_serves_and_snapshots_into_the_working_directory(root, tmp_path):
    """As the unit runs it: from the state directory, with the installed config; the
    relative snapshot path lands there on SIGTERM."""
    binary = os.path.join(root, "usr/bin/sluice")
    conf = os.path.join(root, "etc/sluice/sluice.yaml")
    ok = subprocess.run([binary, "config", "check", conf], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    state = tmp_path / "state"
    state.mkdir()
    for attempt in range(5):
        ports = [free_port() for _ in range(4)]
        p = subprocess.Popen([binary, "serve", "-c", conf] + sum(
            [["--" + n, "127.0.0.1:%d" % port] for n, port in zip(("http", "resp", "grpc", "admin"), ports)], []),
            cwd=state, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 10
        up = False
        while time.time() < deadline and p.poll() is None and not up:
            try:
                up = subprocess.run(["curl", "-sf", "-o", "/dev/null", "-H", "X-Api-Key: k",
                                     "http://127.0.0.1:%d/v1/auth" % ports[0]], timeout=5).returncode == 0
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.05)
        if up:
            break
        p.kill()
        out = p.communicate(timeout=10)[0]
        assert "in use" in out and attempt < 4, out
    p.send_signal(signal.SIGTERM)
    out = p.communicate(timeout=30)[0]
    assert p.returncode == 0, out
    assert (state / "sluice.state").is_file(), (os.listdir(state), out)


def test_program_builds_against_libsluice_dev(root, tmp_path):
    pc = os.path.join(root, "usr/lib", MULTIARCH, "pkgconfig")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "sluice"],
                           env=dict(os.environ, PKG_CONFIG_PATH=pc), check=True,
                           capture_output=True, text=True).stdout.split()
    assert "-I" + os.path.join(root, "usr/include") in [os.path.normpath(f) if not f.startswith("-I")
                                                        else "-I" + os.path.normpath(f[2:]) for f in flags], flags
    src = tmp_path / "v.c"
    src.write_text('#include <stdio.h>\n#include <sluice.h>\n'
                   'int main(void) { puts(sluice_version()); return 0; }\n')
    exe = tmp_path / "v"
    libdir = os.path.join(root, "usr/lib", MULTIARCH)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", str(src), "-o", str(exe),
                    "-Wl,-rpath," + libdir] + flags, check=True, capture_output=True, timeout=120)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == deb_version().split("-")[0]
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert os.path.join(libdir, "libsluice.so.0") in ldd, ldd


def test_dpkg_purge_removes_everything(root, debs):
    dpkg(root, "--purge", "libsluice-dev", "libsluice0", "sluice")
    left = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
            if not os.path.relpath(d, root).startswith("var/lib/dpkg")]
    assert left == [], left


def test_make_install_adds_the_service_files_and_keeps_an_existing_config(tmp_path):
    dest = tmp_path / "dest"
    prefix = "/opt/sluice-test"
    env = dict(os.environ, DESTDIR=str(dest))

    def install():
        r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    install()
    root = str(dest) + prefix
    # GNUInstallDirs: sysconfdir of the prefix /opt/P is /etc/opt/P (test_install)
    assert os.path.exists(str(dest) + "/etc/opt/sluice-test/sluice/sluice.yaml")
    for f in ["bin/sluice", "lib/systemd/system/sluice.service",
              "share/bash-completion/completions/sluice", "share/man/man1/sluice.1",
              "share/man/man5/sluice.yaml.5", "share/man/man3/libsluice.3",
              "share/doc/sluice/examples/sluice.yaml"]:
        assert os.path.exists(os.path.join(root, f)), f
    conf = str(dest) + "/etc/opt/sluice-test/sluice/sluice.yaml"
    with open(conf, "w") as f:
        f.write("# mine\n")
    out = install()
    with open(conf) as f:
        assert f.read() == "# mine\n"
    assert "Keeping existing" in out


def test_lintian_pedantic_finds_no_errors_or_warnings(debs):
    """lintian --pedantic on the three packages: no error, no warning (bogus-mail-host,
    the changelog taken from CHANGELOG.md, the postinst, ... were once among them)."""
    r = subprocess.run(["lintian", "--pedantic"] + sorted(debs.values()), capture_output=True,
                       text=True, timeout=600)
    tags = [l for l in r.stdout.splitlines() if l[:3] in ("E: ", "W: ")]
    assert tags == [], "\n".join(tags)


def test_control_fields_and_symbols(debs):
    fields = {p: subprocess.run(["dpkg-deb", "-f", d], check=True, capture_output=True,
                                text=True).stdout for p, d in debs.items()}
    for p, f in fields.items():
        m = re.search(r"^Maintainer: .*<([^>]+)>$", f, re.M)
        assert m and not m.group(1).endswith("@localhost"), (p, f)
    dev = re.search(r"^Depends: (.*)$", fields["libsluice-dev"], re.M).group(1)
    # libsluice holds the policy engine (issue 25): it links libyaml (configuration) and
    # libcrypto (sealed tokens), so its static users need their -dev packages (sluice.pc's
    # Requires.private); never the server's libraries (jansson, hiredis, nghttp2)
    assert "libyaml-dev" in dev and "libssl-dev" in dev, dev
    assert not any(x in dev for x in ("libjansson", "libhiredis", "libnghttp2", "libprotobuf")), dev
    needed = subprocess.run(["objdump", "-p", os.path.join(BUILD, "libsluice.so")], check=True,
                            capture_output=True, text=True).stdout
    libs = sorted(l.split()[1] for l in needed.splitlines() if l.strip().startswith("NEEDED"))
    assert not any(x in " ".join(libs) for x in ("jansson", "hiredis", "nghttp2", "protobuf")), libs
    sym = subprocess.run(["dpkg-deb", "-I", debs["libsluice0"], "symbols"], capture_output=True,
                         text=True).stdout
    assert sym.startswith("libsluice.so.0 libsluice0 #MINVER#"), sym[:200]
    exported = subprocess.run(["nm", "-D", "--defined-only", os.path.join(BUILD, "libsluice.so")],
                              check=True, capture_output=True, text=True).stdout
    for name in (l.split()[-1] for l in exported.splitlines() if " T " in l):
        assert " %s@Base " % name in sym, name
    with gzip.open(debs_file(debs["sluice"], "./usr/share/doc/sluice/changelog.gz")) as f:
        assert f.read().decode().startswith("sluice (" + deb_version() + ")")


def debs_file(deb, member):
    """One file of a package, extracted to a temporary path."""
    d = tempfile.mkdtemp(prefix="sluice-member-")
    subprocess.run(["dpkg-deb", "-x", deb, d], check=True, capture_output=True, timeout=60)
    return os.path.join(d, member)


def test_the_package_says_what_it_started_and_what_to_edit(debs):
    """The package starts the demo at once: on loopback ports no Debian package takes by
    default (not 9090: Prometheus), and it says where to edit (README.Debian, postinst)."""
    assert "/usr/share/doc/sluice/README.Debian" in contents(debs["sluice"])
    conf = open(debs_file(debs["sluice"], "./etc/sluice/sluice.yaml")).read()
    listen = dict(re.findall(r"^  (http|resp|grpc|admin): (\S+)", conf, re.M))
    assert set(listen) == {"http", "resp", "grpc", "admin"}, listen
    taken = {9090, 9091, 9093, 9100, 3000, 6379, 5432, 3306, 80, 443}  # Debian daemons' defaults
    for name, addr in listen.items():
        host, port = addr.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) not in taken, (name, addr)
    assert "systemctl reload sluice" in conf and "config check" in conf
    readme = open(debs_file(debs["sluice"], "./usr/share/doc/sluice/README.Debian")).read()
    for addr in listen.values():
        assert addr in readme, addr
    assert "/etc/sluice/sluice.yaml" in readme and "systemctl reload sluice" in readme
    post = subprocess.run(["dpkg-deb", "-I", debs["sluice"], "postinst"], check=True,
                          capture_output=True, text=True).stdout
    assert "README.Debian" in post and listen["admin"] in post, post
