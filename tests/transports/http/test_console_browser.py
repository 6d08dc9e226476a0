"""The console in a real browser (Debian's Chromium, headless, driven by Playwright): a
``gateway serve`` whose sessions are driven from three dialects at once — the console's
own (the native API), an OpenFang WebSocket client, and the stdio client that started the
gateway — and the console on OpenFang's port, with reasoning, a tool and the turn limit.

Each step leaves a screenshot in the test's temp dir (``screenshots/``); the page must log
no error. ``GATEWAY_UPDATE_DOCS=1`` also copies the approval step to ``docs/console.png``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import websockets
from playwright.sync_api import Page, expect

from kernel import ReasoningChunk
from kernel.settings import AgentSettings
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from tests.asyncio_clients import in_asyncio
from tests.browser import BrowserPage, open_page, screenshot
from tests.subprocess_gateway import ROOT, gateway_env, gateway_process, read_banner
from transports.http.console import hosted_console
from transports.openfang import OpenFangConfig, OpenFangTransport

from ._helpers import ADD_TOOL

pytestmark = pytest.mark.anyio

TOKEN = "console-browser-token"
TIMEOUT_MS = 15_000
LONG_PROMPT = " ".join(f"word{i}" for i in range(200))
WRITE = '/tool write_file {"path": "notes.txt", "content": "approved in the browser"}'


def shots(tmp_path: Path) -> Path:
    folder = tmp_path / "screenshots"
    folder.mkdir(exist_ok=True)
    return folder


# ------------------------------------------------------------------ page steps (browser thread)


def load(page: Page, url: str, folder: Path) -> None:
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    expect(page.locator(".live")).to_have_text("live")
    expect(page.locator(".session-row .chip[data-transport=stdio]")).to_have_count(1)  # the stdio client's session
    assert "token=" not in page.url  # the login moved the token into a cookie
    screenshot(page, folder, "01-loaded")


def prompt_and_watch_it_stream(page: Page, folder: Path) -> str:
    page.locator(".agent-head .icon-button").first.click()
    expect(page.locator(".session-title")).to_have_text("Untitled session")
    # Count the updates of the answer's text while it streams: several means it arrived in pieces.
    page.evaluate(
        """() => {
            window.answerUpdates = 0;
            new MutationObserver((records) => {
                window.answerUpdates += records.filter((r) => r.target.classList && r.target.classList.contains("text")).length;
            }).observe(document.querySelector(".transcript-inner"), {subtree: true, childList: true});
        }"""
    )
    page.locator(".composer textarea").fill("hello from the browser, streamed word by word")
    page.keyboard.press("Enter")
    answer = page.locator(".run .msg.assistant .text").last
    expect(answer).to_have_text("echo: hello from the browser, streamed word by word")
    expect(page.locator(".run .run-end")).to_be_visible()
    assert page.evaluate("window.answerUpdates") >= 4  # "echo: " and eight more words, as the deltas came
    expect(page.locator(".session-title")).to_have_text("hello from the browser, streamed word by word")
    screenshot(page, folder, "02-streamed")
    return page.url.split("#/s/", 1)[1]


def approve_the_openfang_call(page: Page, folder: Path) -> None:
    row = page.locator(".session-row[data-state=awaiting_tool_approval]")
    expect(row.locator(".chip[data-transport=openfang]")).to_be_visible()
    row.click()
    card = page.locator(".tool.asking[data-tool=write_file]")
    expect(card).to_contain_text('"content": "approved in the browser"')
    expect(page.locator(".stat.attention")).to_contain_text("1 waiting")
    screenshot(page, folder, "03-approval")
    card.locator("button.approve").click()
    done = page.locator(".tool[data-tool=write_file] .badge[data-outcome=ok]")
    expect(done).to_be_visible()
    expect(page.locator(".run .msg.assistant .text").last).to_have_text("echo: tool write_file returned: wrote 23 bytes to notes.txt")
    expect(page.locator(".stat.attention")).to_have_count(0)
    screenshot(page, folder, "04-approved")


def interrupt_a_long_run(page: Page, session_id: str, folder: Path) -> None:
    page.locator(f".session-row[data-session='{session_id}']").click()
    expect(page.locator(".session-title")).to_have_text("hello from the browser, streamed word by word")
    page.locator(".composer textarea").fill(LONG_PROMPT)
    page.keyboard.press("Enter")
    answer = page.locator(".run .msg.assistant .text").last
    expect(answer).to_contain_text("word10")
    page.locator(".composer .button.danger").click()  # Stop
    expect(page.locator(".run-end.interrupted")).to_contain_text("interrupted")
    assert "word199" not in answer.inner_text()
    expect(page.locator(".composer .button.danger")).to_be_hidden()
    screenshot(page, folder, "05-interrupted")


def see_the_stdio_session(page: Page, folder: Path) -> None:
    row = page.locator(".session-row[data-session=stdio-notes]")
    expect(row.locator(".chip[data-transport=stdio]")).to_be_visible()
    expect(row.locator(".row-title")).to_have_text("hello from a stdio client")
    row.click()
    expect(page.locator(".msg.assistant .text").last).to_have_text("echo: hello from a stdio client")
    screenshot(page, folder, "06-stdio-session")


# ------------------------------------------------------------------ the tests


async def openfang_run(ws_url: str) -> list[dict[str, Any]]:
    """An OpenFang client asking for a tool that needs approval, and waiting for its answer."""

    async def client() -> list[dict[str, Any]]:
        frames = []
        async with websockets.connect(ws_url) as ws:
            await ws.send(json.dumps({"type": "message", "content": WRITE}))
            while not frames or frames[-1]["type"] != "response":
                frames.append(json.loads(await ws.recv()))
        return frames

    return await in_asyncio(client)


async def test_the_console_watches_and_steers_three_dialects(tmp_path: Path, anyio_backend: str) -> None:
    folder = shots(tmp_path)
    env = gateway_env(tmp_path / "console.db", GATEWAY_ECHO_DELAY_S="0.03")
    args = ["serve", "-t", "stdio", "-t", "http", "-t", "openfang", "--port", "0", "--token", TOKEN, "--backend", anyio_backend]
    async with gateway_process(args, env, cwd=tmp_path) as stdio:
        banner = await read_banner(stdio)
        console_url = banner["console"][0]  # the http transport's
        openfang_ws = banner["openfang"][0].split()[0]
        openfang_api = banner["openfang"][0].split("REST ", 1)[1].rstrip(")")
        assert (await stdio.receive(30))["type"] == "session"
        with anyio.fail_after(240):
            async with open_page() as browser:
                await browser.do(lambda page: load(page, console_url, folder))
                own = await browser.do(lambda page: prompt_and_watch_it_stream(page, folder))

                # An OpenFang client makes a session of its own (its REST API) and asks for a tool there.
                async with httpx.AsyncClient(timeout=10, headers={"authorization": f"Bearer {TOKEN}"}) as http:
                    agent = (await http.get(f"{openfang_api}/agents")).json()[0]["id"]
                    assert (await http.post(f"{openfang_api}/agents/{agent}/sessions", json={"label": "OpenFang"})).status_code == 200
                async with anyio.create_task_group() as tg:
                    frames: list[dict[str, Any]] = []

                    async def run() -> None:
                        frames.extend(await openfang_run(openfang_ws))

                    tg.start_soon(run)
                    await browser.do(lambda page: approve_the_openfang_call(page, folder))
                assert frames[-1]["content"] == "echo: tool write_file returned: wrote 23 bytes to notes.txt"
                assert any(f.get("command") == "approval" for f in frames)  # the OpenFang client was asked too
                assert (tmp_path / "notes.txt").read_text() == "approved in the browser"

                await browser.do(lambda page: interrupt_a_long_run(page, own, folder))

                await stdio.send({"type": "open_session", "session_id": "stdio-notes", "request_id": "o1"})
                await stdio.send({"type": "prompt", "session_id": "stdio-notes", "text": "hello from a stdio client", "request_id": "p1"})
                await stdio.until(lambda message: message.get("type") == "run_finished" and message.get("request_id") == "p1", timeout_s=30)
                await browser.do(lambda page: see_the_stdio_session(page, folder))
                assert browser.errors == []
    if os.environ.get("GATEWAY_UPDATE_DOCS"):
        shutil.copy(folder / "03-approval.png", ROOT / "docs" / "console.png")
    assert sorted(p.name for p in folder.iterdir()) == [
        "01-loaded.png", "02-streamed.png", "03-approval.png", "04-approved.png", "05-interrupted.png", "06-stdio-session.png",
    ]


@asynccontextmanager
async def openfang_with_console(provider: ScriptedProvider) -> AsyncIterator[str]:
    agent = AgentSettings(name="Researcher", max_turns=1)
    async with running_kernel(provider, tools=[ADD_TOOL], agent=agent) as kernel:
        config = OpenFangConfig(port=0, ping_interval_s=0.0)
        async with anyio.create_task_group() as tg:
            url = await tg.start(lambda *, task_status: OpenFangTransport().serve(kernel, config, task_status=task_status, console=hosted_console))
            try:
                yield url
            finally:
                tg.cancel_scope.cancel()


def reason_call_and_continue(page: Page, url: str, folder: Path) -> None:
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.locator(".agent-head .icon-button").first.click()
    page.locator(".composer textarea").fill("what is 2 + 3?")
    page.keyboard.press("Enter")
    # Reasoning is shown folded; the tool call with its arguments and outcome; then the turn limit asks.
    fold = page.locator("details.reasoning")
    expect(fold.locator("summary")).to_contain_text("5 words")
    assert fold.get_attribute("open") is None
    expect(page.locator(".tool[data-tool=add] .badge[data-outcome=ok]")).to_be_visible()
    expect(page.locator(".tool[data-tool=add] .result")).to_have_text("5")
    question = page.locator(".turn-limit.asking")
    expect(question).to_contain_text("1 of 1 turns")
    screenshot(page, folder, "11-turn-limit")
    row = page.locator(".session-row[data-state=awaiting_turn_confirmation]")
    expect(row.locator(".chip[data-transport=console]")).to_be_visible()  # the live list, on OpenFang's port
    question.locator("button.approve").click()  # Continue
    expect(page.locator(".run .msg.assistant .text").last).to_have_text("The sum is 5.")
    expect(page.locator(".turn-limit")).to_contain_text("continued")
    fold.locator("summary").click()
    expect(fold.locator(".reasoning-text")).to_have_text("I should add the numbers.")
    screenshot(page, folder, "12-reasoning-unfolded")
    page.locator(".head-actions button", has_text="Regenerate").click()
    regenerated = page.locator(".run").last
    expect(regenerated.locator(".note.regenerate")).to_be_visible()
    expect(page.locator(".run")).to_have_count(2)
    regenerated.locator(".turn-limit.asking button.approve").click()  # the session's turn count asks again
    expect(regenerated.locator(".msg.assistant .text")).to_have_text("The sum is 5.")
    expect(regenerated.locator(".run-end")).to_be_visible()
    clear = page.locator(".head-actions button", has_text="Clear")
    clear.click()
    expect(clear).to_contain_text("Clear context?")
    clear.click()
    expect(page.locator(".note.divider")).to_have_text("The context was cleared.")
    expect(page.locator(".msg")).to_have_count(0)
    screenshot(page, folder, "13-cleared")


async def test_the_console_on_openfangs_port_shows_reasoning_tools_and_the_turn_limit(tmp_path: Path) -> None:
    folder = shots(tmp_path)
    provider = ScriptedProvider([[ReasoningChunk("I should add the numbers."), *tool_turn("add", '{"a": 2, "b": 3}')], text_turn("The sum", " is 5.")])
    async with openfang_with_console(provider) as url:
        with anyio.fail_after(120):
            browser: BrowserPage
            async with open_page() as browser:
                await browser.do(lambda page: reason_call_and_continue(page, f"{url}/", folder))
                assert browser.errors == []
