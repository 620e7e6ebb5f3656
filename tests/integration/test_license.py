# SPDX-License-Identifier: Apache-2.0
"""The licence as users, packagers and scanners check it: LICENSE is the Apache License
2.0 word for word, and every C, header, Python, shell and Lua file names it with an
SPDX-License-Identifier line. scripts/spdx.sh adds the lines; this test enforces them
(it fails, naming the files, while any file lacks the line)."""
import os
import stat
import subprocess

from conftest import SRC

SPDX = os.path.join(SRC, "scripts", "spdx.sh")
ID = "SPDX-License-Identifier: Apache-2.0"


def test_license_is_the_apache_2_0_text():
    with open(os.path.join(SRC, "LICENSE")) as f:
        ours = f.read().strip()
    with open("/usr/share/common-licenses/Apache-2.0") as f:  # Debian's copy (base-files)
        reference = f.read().strip()
    assert ours == reference
    with open(os.path.join(SRC, "NOTICE")) as f:
        assert "Apache License, Version 2.0" in f.read()
    with open(os.path.join(SRC, "debian", "copyright")) as f:
        assert "License: Apache-2.0" in f.read()


def test_every_source_file_names_its_licence():
    r = subprocess.run(["bash", SPDX, "--check", SRC], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "run scripts/spdx.sh; files without the line:\n" + r.stdout[-6000:]


def test_spdx_script_adds_one_line_in_each_language_and_only_once(tmp_path):
    files = {
        "a.c": "/*\n * a.c -- what it is for.\n */\nint a;\n",
        "include/b.h": "#ifndef B_H\n#define B_H\n#endif\n",
        "t.py": "#!/usr/bin/python3\n\"\"\"doc\"\"\"\nprint(1)\n",
        "m.py": "import os\n",
        "s.sh": "#!/usr/bin/env bash\nset -e\n",
        "tool": "#!/bin/sh\necho hi\n",
        "x.lua": "-- x.lua -- a script\nreturn 1\n",
        "notes.txt": "not covered\n",
        "tests/fuzz/corpus/fuzz_x/seed.c": "corpus inputs stay byte for byte\n",
    }
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for name in ("s.sh", "tool", "t.py"):
        (tmp_path / name).chmod(0o755)
    (tmp_path / "ok.c").write_text("/* " + ID + " */\nint ok;\n")

    check = subprocess.run(["bash", SPDX, "--check", str(tmp_path)], capture_output=True,
                           text=True, timeout=60)
    flagged = sorted(l.split(": ", 1)[1] for l in check.stdout.splitlines())
    assert check.returncode == 1
    assert flagged == sorted(["a.c", "include/b.h", "t.py", "m.py", "s.sh", "tool", "x.lua"])

    subprocess.run(["bash", SPDX, str(tmp_path)], check=True, capture_output=True, timeout=60)
    got = {n: (tmp_path / n).read_text() for n in files}
    assert got["a.c"] == "/* " + ID + " */\n" + files["a.c"]
    assert got["include/b.h"] == "/* " + ID + " */\n" + files["include/b.h"]
    assert got["t.py"] == "#!/usr/bin/python3\n# " + ID + "\n\"\"\"doc\"\"\"\nprint(1)\n"
    assert got["m.py"] == "# " + ID + "\nimport os\n"
    assert got["s.sh"] == "#!/usr/bin/env bash\n# " + ID + "\nset -e\n"
    assert got["tool"] == "#!/bin/sh\n# " + ID + "\necho hi\n"
    assert got["x.lua"] == "-- " + ID + "\n" + files["x.lua"]
    assert got["notes.txt"] == files["notes.txt"]
    assert got["tests/fuzz/corpus/fuzz_x/seed.c"] == files["tests/fuzz/corpus/fuzz_x/seed.c"]
    assert (tmp_path / "ok.c").read_text() == "/* " + ID + " */\nint ok;\n"
    for name in ("s.sh", "tool", "t.py"):
        assert os.stat(tmp_path / name).st_mode & stat.S_IXUSR, name

    again = subprocess.run(["bash", SPDX, str(tmp_path)], capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and again.stdout == ""
    assert {n: (tmp_path / n).read_text() for n in files} == got
    assert subprocess.run(["bash", SPDX, "--check", str(tmp_path)], capture_output=True,
                          timeout=60).returncode == 0
