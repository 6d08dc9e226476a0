"""OpenFang 0.6's comms, logs, scheduler and workflow pages against the gateway, called as its
dashboard calls them (``static/js/pages/comms.js``, ``logs.js``, ``scheduler.js``,
``workflows.js``, the logo in ``index_body.html``): the token as ``?token=`` for EventSource,
``Promise.all`` of topology and events, a level filter on the log stream."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from kernel import LOG_RING
from kernel.testing import ScriptedProvider, text_turn
from tests.transports.http._helpers import SSEParser, http_server
from tests.transports.openfang._helpers import Server, make_config, serving

pytestmark = pytest.mark.anyio

TOKEN = "dashboard-s3cret"


class DashboardClient:
    """What OpenFang's ``OpenFangAPI`` does: ``Authorization: Bearer`` on fetches, ``?token=`` on
    EventSource URLs (EventSource cannot send headers)."""

    def __init__(self, server: Server, http: httpx.AsyncClient) -> None:
        self.server = server
        self.http = http

    async def get(self, path: str) -> Any:
        response = await self.http.get(path, headers={"authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    @asynccontextmanager
    async def event_source(self, path: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        sep = "&" if "?" in path else "?"
        async with self.http.stream("GET", f"{path}{sep}token={TOKEN}", headers={"accept": "text/event-stream"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")

            async def messages() -> AsyncIterator[dict[str, Any]]:
                parser = SSEParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None and event.event == "message" and event.data != "ping":
                        yield json.loads(event.data)

            yield messages()


@asynccontextmanager
async def dashboard() -> AsyncIterator[DashboardClient]:
    provider = ScriptedProvider([text_turn("Hi", " there")])
    async with serving(provider, config=make_config(token=TOKEN)) as server, httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        yield DashboardClient(server, http)


async def _openfang_message(client: DashboardClient, text: str) -> None:
    sent = await client.http.post(f"/api/agents/{client.server.agent_id}/message", json={"message": text}, headers={"authorization": f"Bearer {TOKEN}"})
    assert sent.status_code == 200, sent.text


async def test_comms_shows_which_transports_talk_to_which_agent() -> None:
    async with dashboard() as client:
        kernel, agent = client.server.kernel, client.server.agent_id
        async with http_server(kernel, token=TOKEN) as http_url, httpx.AsyncClient(base_url=http_url, headers={"authorization": f"Bearer {TOKEN}"}) as native:
            assert (await native.post("/v1/sessions", json={"session_id": "s-comms"})).status_code in (200, 201)
            done = await native.post("/v1/sessions/s-comms/prompt", json={"text": "over http"}, headers={"accept": "application/json"})
            assert done.status_code == 200, done.text
        await _openfang_message(client, "over openfang")
        # comms.js: Promise.all([topology, events?limit=200])
        results: dict[str, Any] = {}

        async def fetch(name: str, path: str) -> None:
            results[name] = await client.get(path)

        async with anyio.create_task_group() as tg:
            tg.start_soon(fetch, "topology", "/api/comms/topology")
            tg.start_soon(fetch, "events", "/api/comms/events?limit=200")
        topology, events = results["topology"], results["events"]
        nodes = {node["id"]: node for node in topology["nodes"]}
        assert nodes[agent]["name"] == kernel.settings.agents[0].name and nodes[agent]["state"] == "Running"
        assert {nodes[i]["name"] for i in nodes if i != agent} == {"http", "openfang"}
        assert all(set(node) == {"id", "name", "state", "model"} for node in topology["nodes"])
        assert sorted((edge["from"], edge["to"], edge["kind"]) for edge in topology["edges"]) == [
            ("transport:http", agent, "peer"), ("transport:openfang", agent, "peer"),
        ]
        # The page's rootNodes()/peersOf(): no parent_child edge, the agent's peers are the transports.
        assert [event["source_name"] for event in events] == ["openfang", "http"]  # newest first
        for event in events:
            assert set(event) == {"id", "timestamp", "kind", "source_id", "source_name", "target_id", "target_name", "detail"}
            assert (event["kind"], event["target_id"], event["detail"]) == ("agent_message", agent, "3 in / 5 out tokens")
        assert len(await client.get("/api/comms/events?limit=1")) == 1
        assert len(await client.get("/api/comms/events?limit=nonsense")) == 2

        # startSSE(): a run that ends while the page is open arrives on the stream.
        async with client.event_source("/api/comms/events/stream") as stream:
            await _openfang_message(client, "live")
            with anyio.fail_after(10):
                live = await anext(stream)
        assert (live["kind"], live["source_name"], live["target_id"]) == ("agent_message", "openfang", agent)


@pytest.fixture
def log_ring() -> Any:
    root = logging.getLogger()
    level = root.level
    root.addHandler(LOG_RING)
    root.setLevel(logging.INFO)
    yield LOG_RING
    root.removeHandler(LOG_RING)
    root.setLevel(level)


async def test_the_logs_page_streams_the_gateways_log_records(log_ring: Any) -> None:
    marker = secrets.token_hex(6)
    logging.getLogger("gateway.test").info("an info line %s", marker)
    logging.getLogger("gateway.test").warning("a warning before the page opened %s", marker)
    async with dashboard() as client:
        # logs.js startStreaming(): /api/logs/stream?token=…, entries deduplicated by seq.
        async with client.event_source("/api/logs/stream") as stream:
            with anyio.fail_after(10):
                backlog = [entry async for entry in _until(stream, lambda e: "a warning before" in e["detail"] and marker in e["detail"])]
            assert any(marker in e["detail"] and e["action"] == "Info" for e in backlog)
            logging.getLogger("gateway.test").error("an error while the page is open %s", marker)
            with anyio.fail_after(10):
                live = [entry async for entry in _until(stream, lambda e: "while the page is open" in e["detail"])][-1]
        assert set(live) == {"seq", "timestamp", "agent_id", "action", "detail", "outcome", "hash"}
        assert (live["action"], live["detail"], live["outcome"]) == ("Error", f"gateway.test: an error while the page is open {marker}", "error")
        # The level filter (?level=warn), as routes.rs classifies levels.
        async with client.event_source("/api/logs/stream?level=warn") as stream:
            with anyio.fail_after(10):
                warned = [entry async for entry in _until(stream, lambda e: marker in e["detail"])]
        assert [e["action"] for e in warned if marker in e["detail"]] == ["Warning"]  # not the info line before it
        assert {e["action"] for e in warned} <= {"Warning"}
        # Without the token the stream is refused (the page then falls back to polling).
        assert (await client.http.get("/api/logs/stream")).status_code == 401


async def _until(stream: AsyncIterator[dict[str, Any]], last: Any) -> AsyncIterator[dict[str, Any]]:
    async for entry in stream:
        yield entry
        if last(entry):
            return


async def test_scheduler_workflows_and_logo() -> None:
    async with dashboard() as client:
        assert await client.get("/api/cron/jobs") == {"jobs": [], "total": 0}
        assert await client.get("/api/workflows") == []
        logo = await client.http.get("/logo.png")  # an <img>: no token
        assert logo.status_code == 200 and logo.headers["content-type"] == "image/png"
        assert logo.content.startswith(b"\x89PNG\r\n\x1a\n")
        assert (await client.http.get("/api/cron/jobs")).status_code == 401


async def test_the_logs_page_is_the_admins_and_comms_name_no_run(log_ring: Any) -> None:
    async with dashboard() as client:
        await _openfang_message(client, "counted")
        _record, secret = await client.server.kernel.keys.create("reader", scopes=["read"])
        refused = await client.http.get(f"/api/logs/stream?token={secret}")
        assert (refused.status_code, refused.json()) == (403, {"error": "the logs need the 'admin' scope"})
        events = await client.get("/api/comms/events")
        assert [event["id"] for event in events] == ["run-1"]
        runs = {run.run_id for run in client.server.kernel.observers.recent.since(0)}
        assert not runs & {value for event in events for value in event.values()}
