"""The console signed in with a key, in a real browser (headless Chromium via Playwright):
Alice's login shows Alice's sessions only; the admin's shows everyone's, each with its owner."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from playwright.sync_api import Page, expect

from kernel import model as m
from kernel.testing import running_kernel
from tests.browser import BrowserPage, open_page, screenshot
from tests.transports.http._helpers import http_server

pytestmark = pytest.mark.anyio

TOKEN = "console-keys-admin-token"
TIMEOUT_MS = 15_000


def rows(page: Page, url: str, folder: Path, name: str, expected: int) -> list[str]:
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    expect(page.locator(".live")).to_have_text("live")
    expect(page.locator(".session-row")).to_have_count(expected)
    assert "token=" not in page.url  # the login moved the key into a cookie
    screenshot(page, folder, name)
    titles = page.locator(".session-row .row-title").all_inner_texts()
    owners = page.locator(".session-row .session-owner").all_inner_texts()
    return sorted(titles) + sorted(owners)


async def test_the_console_shows_a_keys_sessions_and_the_admin_everyones_with_owners(tmp_path: Path) -> None:
    folder = tmp_path / "screenshots"
    folder.mkdir()
    async with running_kernel(db_path=tmp_path / "g.db") as kernel:
        alice_record, alice = await kernel.keys.create("alice")
        bob_record, _ = await kernel.keys.create("bob")
        for record, session, text in ((alice_record, "alice-s", "alice asks"), (bob_record, "bob-s", "bob asks")):
            caller = m.Caller(principal=record.principal(), transport="test")
            await kernel.execute(m.Prompt(session_id=session, text=text), caller)
        assert await kernel.wait_idle(10)
        async with http_server(kernel, token=TOKEN) as url:
            async with httpx.AsyncClient(base_url=url) as anonymous:  # no login: the login page, no data
                assert (await anonymous.get("/")).status_code == 401
            with anyio.fail_after(120):
                browser: BrowserPage
                async with open_page() as browser:
                    seen = await browser.do(lambda page: rows(page, f"{url}/?token={alice}", folder, "alice", 1))
                    assert seen == ["alice asks", "alice"]
                    assert browser.errors == []
                async with open_page() as browser:
                    seen = await browser.do(lambda page: rows(page, f"{url}/?token={TOKEN}", folder, "admin", 2))
                    assert seen == ["alice asks", "bob asks", "alice", "bob"]
                    assert browser.errors == []
