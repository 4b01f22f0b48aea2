"""A real headless Chromium for tests, driven over the Chrome DevTools protocol.

`ensure_chromium()` installs Debian's `chromium` package when /usr/bin/chromium is missing (CI
machines start clean; the tests run as root there). `Browser` starts it with a fresh profile and
the flags this closed network needs, opens one page and speaks CDP over its websocket
(websocket-client), collecting console errors and uncaught exceptions as they arrive.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--remote-debugging-port=0", "--window-size=1280,900",
)


def ensure_chromium() -> str:
    """The path of a Chromium binary, installing Debian's package if needed. Raises RuntimeError
    with apt's output when that fails."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if shutil.which("apt-get") is None:
        raise RuntimeError(f"{CHROMIUM} is missing and apt-get is not available to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
    proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0:  # a clean machine may have no package lists yet
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env, timeout=600)
        proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0 or not os.path.exists(CHROMIUM):
        raise RuntimeError(f"could not install chromium with apt-get:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return CHROMIUM


class Browser:
    """One headless Chromium with one page. Use as a context manager."""

    def __init__(self, binary: str, timeout_s: float = 60.0) -> None:
        self.binary = binary
        self.timeout_s = timeout_s
        self.events: list[dict[str, Any]] = []
        self._next_id = 0

    def __enter__(self) -> Browser:
        self.profile = tempfile.mkdtemp(prefix="agenttrace-chromium-")
        self.proc = subprocess.Popen([self.binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._devtools_port()
        deadline = time.monotonic() + self.timeout_s
        while True:
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
            pages = [t for t in targets if t.get("type") == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=self.timeout_s, suppress_origin=True)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        return self

    def _devtools_port(self) -> int:
        deadline = time.monotonic() + self.timeout_s
        seen = []
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        raise RuntimeError("chromium did not start its DevTools endpoint:\n" + "".join(seen[-30:]))

    def __exit__(self, *exc: object) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call a CDP method and return its result; events arriving meanwhile are kept."""
        self._next_id += 1
        self.ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str) -> dict[str, Any]:
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == method:
                return msg

    def open(self, path: Path) -> None:
        self.send("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        self.send("Runtime.evaluate", expression="1")  # drain what has arrived
        out = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('text')} {p['exceptionDetails'].get('exception', {})}")
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
