# SPDX-License-Identifier: Apache-2.0
"""Debian's chromium, headless, driven through the DevTools protocol over a WebSocket
(python3-websockets): one page, its console and network events recorded, JavaScript
evaluated, screenshots taken. Loopback only; every wait is bounded in time; the browser
gets a fresh profile and is told not to reach anything on its own (no updates, sync or
background networking)."""
import asyncio
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import websockets

from conftest import free_port

CHROMIUM = os.environ.get("SLUICE_CHROMIUM", "/usr/bin/chromium")


class Browser:
    def __init__(self, width=1280, height=800):
        assert os.access(CHROMIUM, os.X_OK), "chromium is missing (scripts/deps.sh --for test)"
        self.profile = tempfile.mkdtemp(prefix="sluice-chromium-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", "--disable-default-apps",
             "--no-default-browser-check", "--user-data-dir=" + self.profile,
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=%d" % self.port,
             "--window-size=%d,%d" % (width, height), "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)  # websockets 10 binds to the current loop
        self.events = []
        self.next_id = 0
        url = None
        deadline = time.time() + 30
        while time.time() < deadline and url is None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/json/version" % self.port, timeout=2) as r:
                    url = json.load(r)["webSocketDebuggerUrl"]
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError("chromium exited with %s" % self.proc.returncode)
                time.sleep(0.1)
        assert url, "chromium did not open its DevTools port"
        self.ws = self.loop.run_until_complete(websockets.connect(url, max_size=None, open_timeout=10))
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Network.enable", "Log.enable"):
            self.call(m, session=True)
        self.viewport(width, height)

    # ---- the protocol ----

    async def _call(self, msg, timeout):
        await self.ws.send(json.dumps(msg))
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("no answer to %s within %ss" % (msg["method"], timeout))
            raw = await asyncio.wait_for(self.ws.recv(), left)
            m = json.loads(raw)
            if m.get("id") == msg["id"]:
                if "error" in m:
                    raise AssertionError("%s: %s" % (msg["method"], m["error"]))
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def call(self, method, params=None, session=False, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        return self.loop.run_until_complete(self._call(msg, timeout))

    def pump(self, seconds):
        """Lets events arrive for a while (nothing else to wait for)."""
        async def drain():
            deadline = time.time() + seconds
            while time.time() < deadline:
                try:
                    raw = await asyncio.wait_for(self.ws.recv(), max(0.01, deadline - time.time()))
                except asyncio.TimeoutError:
                    return
                m = json.loads(raw)
                if "method" in m:
                    self.events.append(m)
        self.loop.run_until_complete(drain())

    # ---- the page ----

    def viewport(self, width, height, mobile=False, scale=1):
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": mobile},
                  session=True)

    def goto(self, url, timeout=20):
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait("document.readyState === 'complete'", timeout)

    def eval(self, expr, timeout=30):
        r = self.call("Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True},
                      session=True, timeout=timeout)
        if "exceptionDetails" in r:
            raise AssertionError("page threw: %s" % json.dumps(r["exceptionDetails"])[:800])
        return r.get("result", {}).get("value")

    def wait(self, expr, timeout=20, what=None):
        """Polls a JavaScript expression until it is truthy (bounded); returns its value."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = self.eval("(() => { try { const v = (%s); return v instanceof Node ? true : v; } "
                             "catch (e) { return null; } })()" % expr)
            if last:
                return last
            self.pump(0.1)
        raise AssertionError("timed out waiting for %s (last: %r)" % (what or expr, last))

    def screenshot(self, path, full=False):
        params = {"format": "png"}
        if full:
            params["captureBeyondViewport"] = True
            m = self.call("Page.getLayoutMetrics", session=True)
            cs = m.get("cssContentSize") or m["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": cs["width"], "height": cs["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", params, session=True)["data"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    # ---- what the page did ----

    def console_errors(self):
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", "") + " " + p["entry"].get("url", ""))
        return out

    def requests(self):
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def bytes_received(self):
        return sum(e["params"].get("encodedDataLength", 0) for e in self.events
                   if e["method"] == "Network.loadingFinished")

    def close(self):
        try:
            self.loop.run_until_complete(asyncio.wait_for(self.ws.close(), 5))
        except Exception:
            pass
        self.loop.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.profile, ignore_errors=True)
