# SPDX-License-Identifier: Apache-2.0
"""What `sluice serve` holds in memory on the config the package installs and starts
(examples/sluice.yaml, max_keys 1 M): a small footprint when idle, growing with the keys
it tracks, not with max_keys (the store's tables grow on demand)."""
import re
import subprocess
import time

import requests

from conftest import BIN, EXAMPLE_CONFIG, Server


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def store_bytes(server):
    text = requests.get(server.admin + "/metrics", timeout=5).text
    return sum(int(float(m)) for m in re.findall(r"^sluice_store_bytes(?:\{[^}]*\})? (\S+)$", text, re.M))


def asan_build():
    """A sanitizer build (build-asan): its binary links the ASan runtime."""
    out = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    return "libasan" in out


def test_example_config_starts_small_and_grows_with_keys():
    max_keys = int(re.search(r"^\s*max_keys:\s*(\d+)", open(EXAMPLE_CONFIG).read(), re.M).group(1))
    assert max_keys >= 1000000  # the case the issue measured (207 MB RSS at start)
    s = Server(config_path=EXAMPLE_CONFIG, workers=2)
    try:
        time.sleep(0.5)
        idle = rss_kib(s.proc.pid)
        idle_bytes = store_bytes(s)
        # ASan's shadow memory and allocator add their own; the tables were 200 MB before
        limit = 100 * 1024 if asan_build() else 30 * 1024
        assert idle < limit, "idle RSS %d KiB with max_keys %d" % (idle, max_keys)
        assert idle_bytes < 8 << 20, idle_bytes

        c = s.resp()
        n, batch = 60000, 500
        for start in range(0, n, batch):
            cmds = b"".join(b"*3\r\n$8\r\nSL.CHECK\r\n$3\r\napi\r\n$%d\r\n%s\r\n" % (len(k), k)
                            for k in (b"fp:%d" % i for i in range(start, start + batch)))
            c.send_raw(cmds)
            for _ in range(batch):
                r = c.read()
                assert not isinstance(r, str), r
        c.close()
        grown = rss_kib(s.proc.pid)
        grown_bytes = store_bytes(s)
        # 60,000 token-bucket keys (32-byte entries) are held, at a load of at most 0.85
        # of the grown shards and at least 0.4 (a shard doubles past 0.85)
        assert grown_bytes > idle_bytes, (idle_bytes, grown_bytes)
        assert grown_bytes >= n * 32, (idle_bytes, grown_bytes)
        assert grown_bytes - idle_bytes <= n * 32 * 3, (idle_bytes, grown_bytes)
        assert grown - idle >= (grown_bytes - idle_bytes) // 2048, (idle, grown)
    finally:
        s.stop()
    s.assert_clean()
