"""A real headless browser for tests: Debian's ``chromium``, driven over the DevTools protocol.

``open_page(path)`` loads a local HTML file and returns what a reader would see: every console
error or uncaught exception, every request for something outside the page (a self-contained
report makes none), the state of each image once loaded, and a full-page screenshot.
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
from dataclasses import dataclass, field
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
REQUIRE_ENV = "LAYERCACHE_REQUIRE_BROWSER"
"""Set to 1 (``.ci/run`` does) to fail, not skip, the browser tests when no browser is installed."""


def find_browser() -> str | None:
    """The first headless-capable browser on PATH."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@dataclass
class PageResult:
    """What loading one page produced."""

    console_errors: list[str] = field(default_factory=list)
    outside_requests: list[str] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)
    """Per ``<img>``: ``figure`` (its data-figure), ``complete``, ``width`` / ``height`` (natural size)."""
    screenshot: bytes = b""
    title: str = ""
    value: object = None
    """What ``open_page``'s ``script`` (a JavaScript expression) evaluated to, as JSON data."""


class _DevTools:
    """A minimal DevTools-protocol client over one page's websocket."""

    def __init__(self, url: str):
        import websocket

        self.socket = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        seen = [e for e in self.events if e.get("method") == method]
        while not seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            message = json.loads(self.socket.recv())
            self.events.append(message)
            if message.get("method") == method:
                return message
        return seen[0]

    def close(self) -> None:
        self.socket.close()


def open_page(path: Path, browser: str, width: int = 1280, script: str | None = None) -> PageResult:
    """Load ``path`` in a fresh headless ``browser`` profile, ``width`` CSS pixels wide, and collect a
    :class:`PageResult` (with ``script``, a JavaScript expression, evaluated on the loaded page)."""
    with tempfile.TemporaryDirectory() as profile:
        process = subprocess.Popen(
            [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={width},900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            port = _devtools_port(process)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
                page = next(t for t in json.load(answer) if t["type"] == "page")
            tools = _DevTools(page["webSocketDebuggerUrl"])
            try:
                return _inspect(tools, path, width, script)
            finally:
                tools.close()
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def _devtools_port(process: subprocess.Popen, timeout: float = 30.0) -> int:
    """The port from chromium's ``DevTools listening on ws://127.0.0.1:PORT/...`` line."""
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        lines.append(line)
        found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
        if found:
            return int(found.group(1))
    raise RuntimeError("chromium did not start its DevTools endpoint:\n" + "".join(lines[-20:]))


def _inspect(tools: _DevTools, path: Path, width: int, script: str | None = None) -> PageResult:
    for domain in ("Page", "Runtime", "Log", "Network"):
        tools.call(f"{domain}.enable")
    tools.call("Page.navigate", url=path.resolve().as_uri())
    tools.wait_for("Page.loadEventFired")
    result = PageResult()
    images = tools.call("Runtime.evaluate", returnByValue=True, awaitPromise=True, expression="""
        Promise.all([...document.images].map(img => img.decode().catch(() => null))).then(() =>
          [...document.images].map(img => ({figure: img.dataset.figure || '', complete: img.complete,
                                            width: img.naturalWidth, height: img.naturalHeight})))""")
    result.images = images["result"]["value"]
    result.title = tools.call("Runtime.evaluate", expression="document.title", returnByValue=True)["result"]["value"]
    if script is not None:
        answer = tools.call("Runtime.evaluate", expression=script, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"the script failed: {answer['exceptionDetails'].get('text')}")
        result.value = answer["result"].get("value")
    # the whole page as laid out in the window (its width less the vertical scrollbar), drawn in one view as
    # tall as the content: without that, the scrollbar's width came back to the layout and the shot cut it off
    metrics = tools.call("Page.getLayoutMetrics")
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    view = metrics.get("cssLayoutViewport", {}).get("clientWidth", width)
    tools.call("Emulation.setDeviceMetricsOverride", width=int(view), height=int(size["height"]), deviceScaleFactor=1,
               mobile=False)
    metrics = tools.call("Page.getLayoutMetrics")
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    shot = tools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
    result.screenshot = base64.b64decode(shot["data"])
    for event in tools.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            result.console_errors.append(params["exceptionDetails"].get("text", "exception"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            result.console_errors.append(" ".join(str(a.get("value", "")) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            result.console_errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(("data:", "file:", "about:")):
                result.outside_requests.append(url)
    return result


def require_browser() -> str | None:
    """The browser to use; None when there is none and the environment does not demand one."""
    browser = find_browser()
    if browser is None and os.environ.get(REQUIRE_ENV) == "1":
        raise RuntimeError(f"{REQUIRE_ENV}=1 but no chromium is installed (apt-get install chromium).")
    return browser
