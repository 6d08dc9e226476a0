"""The console's server side over real servers with httpx: the page and its files, the
Jupyter-style login (token in the URL once, then a cookie the API accepts), the live
session list, the clear route, and the console on OpenFang's port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from kernel import Kernel
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from transports.http.console import hosted_console
from transports.openfang import OpenFangConfig, OpenFangTransport

from ._helpers import DANGER_TOOL, SSE, SSEParser, http_server, sse_events

pytestmark = pytest.mark.anyio

TOKEN = "console-token"


@asynccontextmanager
async def console(provider: ScriptedProvider | None = None, **config: Any) -> AsyncIterator[tuple[Kernel, str]]:
    async with running_kernel(provider) as kernel, http_server(kernel, sessions_poll_s=0.05, **config) as url:
        yield kernel, url


async def test_the_page_and_its_files_without_a_token() -> None:
    async with console() as (_, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        page = await http.get("/")
        assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
        assert '<script type="module" src="/console/app.js">' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"] and page.headers["x-frame-options"] == "DENY"
        for name, kind in (("app.js", "text/javascript"), ("pane.js", "text/javascript"), ("console.css", "text/css"), ("favicon.svg", "image/svg+xml")):
            asset = await http.get(f"/console/{name}")
            assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind), name
        for missing in ("/console/index.html", "/console/login.html", "/console/.x", "/console/nope.js", "/console/%2e%2e%2fpages.py"):
            refused = await http.get(missing)
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", missing


async def test_the_token_in_the_url_becomes_a_cookie_the_api_accepts() -> None:
    async with console(token=TOKEN) as (_, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        asking = await http.get("/")
        assert asking.status_code == 401 and 'data-wrong="false"' in asking.text and 'name="token"' in asking.text
        wrong = await http.get("/", params={"token": "nope"})
        assert wrong.status_code == 401 and 'data-wrong="true"' in wrong.text and "set-cookie" not in wrong.headers
        assert (await http.get("/v1/status")).status_code == 401
        login = await http.get("/", params={"token": TOKEN})
        assert login.status_code == 303 and login.headers["location"] == "/"
        port = url.rsplit(":", 1)[1]
        cookie = login.headers["set-cookie"]
        assert cookie.startswith(f"gateway_token_{port}={TOKEN};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        # httpx keeps the cookie, as a browser does: the page and every API call now pass.
        page = await http.get("/")
        assert page.status_code == 200 and "/console/app.js" in page.text
        assert (await http.get("/v1/status")).json()["type"] == "status"
        assert (await http.post("/v1/sessions", json={}, headers={"origin": url})).status_code == 201  # the page's own origin
        assert (await http.post("/v1/sessions", json={}, headers={"origin": "http://evil.example"})).status_code == 403
    async with console(token=TOKEN) as (_, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        port = url.rsplit(":", 1)[1]
        stale = await http.get("/v1/status", headers={"cookie": f"gateway_token_{port}=old-token"})
        assert stale.status_code == 401


async def test_the_console_can_be_turned_off() -> None:
    async with console(console=False) as (_, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        assert (await http.get("/")).status_code == 404
        assert (await http.get("/console/app.js")).status_code == 404
        assert (await http.get("/v1/status")).status_code == 200


async def next_event(events: AsyncIterator[SSE], name: str) -> SSE:
    with anyio.fail_after(10):
        async for event in events:
            if event.event == name:
                return event
    raise AssertionError(f"the stream ended before a {name} event")


class ListView:
    """What a client of the live list holds, from the events it has read."""

    def __init__(self, events: AsyncIterator[SSE]) -> None:
        self.events = events
        self.sessions: dict[str, Any] = {}
        self.status: dict[str, Any] = {}
        self.seen: list[str] = []

    async def until(self, done: Any) -> None:
        with anyio.fail_after(10):
            while not done(self):
                event = await anext(self.events)
                self.seen.append(event.event)
                body = event.json()
                if event.event == "sessions":
                    self.sessions = {s["session_id"]: s for s in body["sessions"]}
                elif event.event == "session":
                    self.sessions[body["session"]["session_id"]] = body["session"]
                elif event.event == "session_removed":
                    del self.sessions[body["session_id"]]
                elif event.event == "status":
                    self.status = body


async def test_the_live_session_list_follows_every_change() -> None:
    provider = ScriptedProvider([tool_turn("danger"), text_turn("done")])
    async with running_kernel(provider, tools=[DANGER_TOOL]) as kernel, http_server(kernel, sessions_poll_s=0.05) as url:
        http = httpx.AsyncClient(base_url=url, timeout=10)
        async with http:
            assert (await http.get("/v1/sessions", params={"agent": "nobody"}, headers={"accept": "text/event-stream"})).status_code == 404
            async with http.stream("GET", "/v1/sessions", headers={"accept": "text/event-stream"}) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                view = ListView(sse_events(response, SSEParser()))
                await view.until(lambda v: v.status)
                assert view.seen == ["sessions", "status"] and view.sessions == {} and view.status["active_runs"] == 0
                # A session another transport opens (here: straight through the kernel) appears.
                await kernel.execute(m.OpenSession(session_id="elsewhere"))
                await view.until(lambda v: "elsewhere" in v.sessions)
                assert view.sessions["elsewhere"]["state"] == "idle"
                # Followed over http, its run waits for an approval: the list says so, and who follows.
                async with http.stream("GET", "/v1/sessions/elsewhere/events"):
                    await http.post("/v1/sessions/elsewhere/prompt?wait=false", json={"text": "hi"})
                    await view.until(lambda v: v.sessions["elsewhere"]["state"] == "awaiting_tool_approval" and v.status["active_runs"] == 1)
                    assert view.sessions["elsewhere"]["clients"] == ["http"] and view.sessions["elsewhere"]["pending_call_id"] == "call_1"
                    await http.post("/v1/sessions/elsewhere/approvals", json={"approved": True})
                    await view.until(lambda v: v.sessions["elsewhere"]["state"] == "idle" and v.status["active_runs"] == 0)
                    assert view.sessions["elsewhere"]["message_count"] == 4
                await http.delete("/v1/sessions/elsewhere")
                await view.until(lambda v: "elsewhere" not in v.sessions)
                assert view.seen[-1] == "session_removed"


async def test_clear_tells_every_follower_and_waits_behind_a_run() -> None:
    provider = ScriptedProvider([text_turn("one", " two", " three")], delay_s=0.05)
    async with console(provider) as (_, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        await http.post("/v1/sessions", json={"session_id": "c1"})
        await http.post("/v1/sessions/c1/prompt", json={"text": "hello"}, headers={"accept": "application/json"})
        async with http.stream("GET", "/v1/sessions/c1/events") as response:
            events = sse_events(response, SSEParser())
            queued = await http.post("/v1/sessions/c1/prompt?wait=false", json={"text": "again"})
            assert queued.status_code == 202
            behind = await http.post("/v1/sessions/c1/clear")
            assert behind.status_code == 202 and behind.json() == {"type": "accepted", "session_id": "c1", "queued": True}
            await next_event(events, "run_finished")
            assert (await next_event(events, "context_cleared")).json()["session_id"] == "c1"
        assert (await http.get("/v1/sessions/c1/history")).json()["messages"] == []
        done = await http.post("/v1/sessions/c1/clear")
        assert done.status_code == 200 and done.json() == {"type": "ok", "message": "context cleared"}
        assert (await http.post("/v1/sessions/nope/clear")).status_code == 404


@asynccontextmanager
async def openfang(kernel: Kernel, **overrides: Any) -> AsyncIterator[str]:
    config = OpenFangConfig(port=0, ping_interval_s=0.0, **overrides)
    async with anyio.create_task_group() as tg:
        url = await tg.start(lambda *, task_status: OpenFangTransport().serve(kernel, config, task_status=task_status, console=hosted_console))
        try:
            yield url
        finally:
            tg.cancel_scope.cancel()


async def test_openfang_hosts_the_console_under_its_own_token(tmp_path: Path) -> None:
    async with running_kernel(ScriptedProvider()) as kernel:
        async with openfang(kernel, token=TOKEN) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
            assert (await http.get("/")).status_code == 401  # the login page
            assert (await http.get("/", params={"token": TOKEN})).status_code == 303
            assert "/console/app.js" in (await http.get("/")).text
            created = await http.post("/v1/sessions", json={"session_id": "hosted"})
            assert created.status_code == 201
            # OpenFang's own routes are untouched, and the console's followers are named.
            assert (await http.get("/api/agents")).json()[0]["name"] == "General Assistant"
            async with http.stream("GET", "/v1/sessions/hosted/events"):
                with anyio.fail_after(5):
                    while "console" not in (await http.get("/v1/sessions/hosted")).json()["session"]["clients"]:
                        await anyio.sleep(0.02)
        dashboard = tmp_path / "dash"
        dashboard.mkdir()
        (dashboard / "index.html").write_text("<title>their dashboard</title>")
        async with openfang(kernel, dashboard_dir=str(dashboard)) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
            assert "their dashboard" in (await http.get("/")).text  # a dashboard set there wins
            assert (await http.get("/v1/status")).status_code == 404
        async with openfang(kernel, console=False) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
            assert (await http.get("/")).status_code == 404
