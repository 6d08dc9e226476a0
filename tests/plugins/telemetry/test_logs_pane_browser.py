"""The console's Logs pane in headless Chromium: the backlog, a line logged while the page is
open, the level filter — and no error on the page."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.sync_api import Page, expect

from kernel import LOG_RING
from kernel.testing import running_kernel
from tests.browser import BrowserPage, open_page, screenshot
from tests.transports.http._helpers import http_server

pytestmark = pytest.mark.anyio

TIMEOUT_MS = 15_000


@pytest.fixture
def log_ring() -> Iterator[Any]:
    root = logging.getLogger()
    level = root.level
    root.addHandler(LOG_RING)
    root.setLevel(logging.INFO)
    yield LOG_RING
    root.removeHandler(LOG_RING)
    root.setLevel(level)


async def test_the_logs_pane_shows_the_gateways_lines_live(tmp_path: Path, log_ring: Any) -> None:
    marker = secrets.token_hex(6)
    log = logging.getLogger("gateway.test")
    log.warning("logged before the page opened %s", marker)
    async with running_kernel() as kernel, http_server(kernel) as url:

        def open_logs(page: Page) -> None:
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{url}/")
            page.locator(".logs-link").click()
            expect(page.locator(".logs-head h1")).to_have_text("Logs")
            expect(page.locator(".log-line", has_text=f"logged before the page opened {marker}")).to_have_count(1)
            expect(page.locator(".logs-head .muted")).to_have_text("live")

        def see_live_line_and_filter(page: Page) -> None:
            live = page.locator(".log-line", has_text=f"logged while the page is open {marker}")
            expect(live).to_have_count(1)
            expect(live.locator(".log-level")).to_have_text("ERROR")
            page.locator(".logs-head select").select_option("ERROR")
            expect(page.locator(".log-line", has_text=f"logged before the page opened {marker}")).to_be_hidden()
            expect(live).to_be_visible()
            screenshot(page, tmp_path, "logs-pane")

        with anyio.fail_after(120):
            browser: BrowserPage
            async with open_page() as browser:
                await browser.do(open_logs)
                log.error("logged while the page is open %s", marker)
                await browser.do(see_live_line_and_filter)
                assert browser.errors == []
