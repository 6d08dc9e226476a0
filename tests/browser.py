"""Headless Chromium for the browser tests, driven by Playwright for Python.

Debian's ``chromium`` is used through ``executable_path`` (Playwright never downloads a
browser here). Where it is missing, the setup installs it with ``apt-get`` when it can
(as root, with apt); otherwise the tests skip with one line naming what is missing, or
fail when ``GATEWAY_REQUIRE_SERVICES`` is set (``tests/services.py``).

Playwright's sync API runs in a worker thread, so the same page helpers serve tests on
the asyncio and the trio backend: ``await in_browser(fn)`` calls ``fn(page)`` there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio

from tests.services import unavailable

T = TypeVar("T")

#: Flags this machine kind needs: no sandbox as root, and no background traffic (the
#: closed network refuses it, many connections at a time).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_install_lock = threading.Lock()


def chromium_path() -> str | None:
    """Debian's Chromium, installed now if it is missing and apt can be used."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    with _install_lock:
        found = shutil.which("chromium")
        if found or os.geteuid() != 0 or shutil.which("apt-get") is None:
            return found
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env, capture_output=True, timeout=600, check=False)
        return shutil.which("chromium")


@contextmanager
def browser_page(screenshots: Path | None = None) -> Iterator[Any]:
    """A fresh page in a new headless Chromium (sync Playwright; call from a worker thread)."""
    executable = chromium_path()
    if executable is None:
        unavailable("headless Chromium is not installed and cannot be installed here (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright for Python is not installed (pip install playwright)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            yield page
        finally:
            browser.close()


async def in_browser(fn: Callable[[Any], T]) -> T:
    """``fn(page)`` on a fresh page, in a worker thread (both backends)."""

    def run() -> T:
        with browser_page() as page:
            return fn(page)

    return await anyio.to_thread.run_sync(run)
