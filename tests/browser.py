"""Headless Chromium for the browser tests, driven by Playwright for Python.

Debian's ``chromium`` is used through ``executable_path`` (Playwright never downloads a
browser here). Where it is missing, the setup installs it with ``apt-get`` when it can
(as root, with apt); otherwise the tests skip with one line naming what is missing, or
fail when ``GATEWAY_REQUIRE_SERVICES`` is set (``tests/services.py``).

Playwright's sync API belongs to the thread that started it, so one worker thread owns
the browser and its page, and async tests on the asyncio and the trio backend hand it
work: ``async with open_page() as browser: await browser.do(lambda page: ...)`` — the
same page across steps, while the test drives other clients in between. Every console
message of type ``error`` and every uncaught page exception is collected in
``browser.errors``.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread

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
VIEWPORT = {"width": 1360, "height": 860}
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


def require_browser() -> str:
    """Chromium's path, and Playwright importable; else the test skips (or fails in CI)."""
    executable = chromium_path()
    if executable is None:
        unavailable("headless Chromium is not installed and cannot be installed here (apt-get install chromium)")
        raise AssertionError("unreachable")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        unavailable("Playwright for Python is not installed (pip install playwright)")
    return executable


class _Job(Generic[T]):
    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None

    def run(self, page: Any) -> None:
        try:
            self.value = self.fn(page)
        except BaseException as exc:  # handed to the awaiting test
            self.error = exc
        finally:
            self.done.set()

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class BrowserPage:
    """One page of a fresh headless Chromium, owned by a worker thread (see the module)."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.errors: list[str] = []
        self._jobs: queue.Queue[_Job[Any] | None] = queue.Queue()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="browser", daemon=True)

    def _run(self) -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=self.executable, headless=True, args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page(viewport=VIEWPORT)
                    page.on("console", lambda message: self.errors.append(f"console: {message.text}") if message.type == "error" else None)
                    page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
                    self._ready.set()
                    while (job := self._jobs.get()) is not None:
                        job.run(page)
                finally:
                    browser.close()
        except BaseException as exc:
            self._failure = exc
        finally:
            self._ready.set()
            while not self._jobs.empty():  # nobody will run what is left: fail it
                job = self._jobs.get()
                if job is not None:
                    job.error = RuntimeError(f"the browser stopped: {self._failure!r}")
                    job.done.set()

    async def start(self) -> None:
        self._thread.start()
        await anyio.to_thread.run_sync(self._ready.wait, abandon_on_cancel=True)
        if self._failure is not None:
            raise RuntimeError(f"Chromium did not start: {self._failure!r}")

    async def do(self, fn: Callable[[Any], T]) -> T:
        """``fn(page)`` in the browser's thread; its result, or its exception raised here."""
        job: _Job[T] = _Job(fn)
        self._jobs.put(job)
        await anyio.to_thread.run_sync(job.done.wait, abandon_on_cancel=True)
        return job.result()

    async def stop(self) -> None:
        self._jobs.put(None)
        await anyio.to_thread.run_sync(lambda: self._thread.join(30), abandon_on_cancel=True)


@asynccontextmanager
async def open_page() -> AsyncIterator[BrowserPage]:
    """A fresh page in a new headless Chromium for the block (skips when there is none)."""
    executable = await anyio.to_thread.run_sync(require_browser)
    page = BrowserPage(executable)
    await page.start()
    try:
        yield page
    finally:
        with anyio.CancelScope(shield=True):
            await page.stop()


async def in_browser(fn: Callable[[Any], T]) -> T:
    """``fn(page)`` on a fresh page, in the browser's worker thread (both backends)."""
    async with open_page() as page:
        return await page.do(fn)


def screenshot(page: Any, folder: Path, name: str) -> Path:
    """The page as it looks now, as ``folder/name.png`` (the test's record of each step)."""
    path = folder / f"{name}.png"
    page.screenshot(path=str(path))
    return path
