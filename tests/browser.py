"""Headless Chromium for page tests, driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages separated by NUL bytes on file descriptors 3 and
4), so that no browser-automation package is needed: the page's own requests are seen one by
one (``Network.requestWillBeSent``), unlike a net log, which also holds the browser's.

Chromium comes from Debian's package ``chromium``; a test skips when it is absent unless
``REQUIRE_BROWSER=1`` (CI) makes that a failure."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in CI containers
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",  # the browser's own calls home: not the page's
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--remote-debugging-pipe",
]


def chromium() -> str:
    """The browser's path; skips the test (or fails it under REQUIRE_BROWSER=1)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    why = "no Chromium on PATH (Debian: apt-get install chromium)"
    if os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail(why)
    pytest.skip(why)


@dataclass
class Page:
    """What a page did: its requests (URLs) and its text once loaded."""

    requests: list[str] = field(default_factory=list)
    text: str = ""
    html: str = ""


class Browser:
    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds_3_and_4() -> None:  # in the child: commands in on fd 3, replies out on fd 4
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)  # neither may be 3 or 4 now
            os.dup2(r, 3)
            os.dup2(w, 4)

        browser = chromium()
        self.proc = subprocess.Popen(
            [browser, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),  # kept open past the preexec function's dup2
            preexec_fn=fds_3_and_4,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, timeout: float) -> dict[str, Any] | None:
        end = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                return None
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, session: str | None = None, timeout: float = 30, **params):
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self._read(end - time.monotonic())
            if got is None:
                break
            if got.get("id") == self._id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return got.get("result", {})
            self.events.append(got)
        raise TimeoutError(f"{method}: no reply from Chromium in {timeout} s")

    def open(self, url: str, settle: float = 3.0) -> Page:
        """Load ``url`` in a new tab; return its requests and its text after it settled."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Network.enable", session)
        self.send("Page.enable", session)
        self.events.clear()
        self.send("Page.navigate", session, url=url)
        end = time.monotonic() + 30
        loaded = False
        while time.monotonic() < end and not loaded:
            got = self._read(end - time.monotonic())
            if got is None:
                break
            self.events.append(got)
            loaded = got.get("method") == "Page.loadEventFired"
        quiet_until = time.monotonic() + settle  # let scripts render and fetch what they would
        while (left := quiet_until - time.monotonic()) > 0:
            got = self._read(left)
            if got is not None:
                self.events.append(got)
        page = Page()
        page.requests = [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == session
        ]
        js = "[document.body.innerText, document.documentElement.outerHTML]"
        value = self.send("Runtime.evaluate", session, expression=js, returnByValue=True)
        page.text, page.html = value["result"]["value"]
        self.send("Target.closeTarget", targetId=target)
        return page

    def screenshot(self, url: str, path: str, width: int = 1400, height: int = 1800) -> None:
        """A PNG of ``url`` (for the docs' screenshots)."""
        import base64

        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send(
            "Emulation.setDeviceMetricsOverride", session, width=width, height=height,
            deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        self.send("Page.enable", session)
        self.send("Page.navigate", session, url=url)
        time.sleep(3)
        top = "for (const e of [window, ...document.querySelectorAll('*')]) e.scrollTo?.(0, 0)"
        self.send("Runtime.evaluate", session, expression=top)
        time.sleep(0.5)
        data = self.send("Page.captureScreenshot", session, format="png")["data"]
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(data))
        self.send("Target.closeTarget", targetId=target)


def outside(requests: list[str]) -> list[str]:
    """The requests that leave the file: anything but file:, data: and blob: URLs."""
    return [u for u in requests if not u.startswith(("file:", "data:", "blob:", "about:"))]
