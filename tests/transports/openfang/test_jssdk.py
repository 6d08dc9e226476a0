"""The answers OpenFang's JavaScript SDK reads, asked for as it asks (``_jssdk.py``), against a real
server: the shapes of OpenFang 0.6.9's ``routes.rs`` for sessions, stop, reset, compact, history,
models, providers, tools, usage, config and approvals, and its UUID rule for session ids."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import anyio
import pytest

from kernel import model as m
from kernel.testing import ScriptedProvider, text_turn, tool_turn
from kernel.tools import Tool
from plugins.providers.echo import EchoProvider
from tests.asyncio_clients import in_asyncio
from transports.openfang.dashboard import DASHBOARD_REJECTION
from transports.openfang.dashboard_codec import NOTHING_TO_SHOW
from transports.openfang.sessionids import alias

from ._helpers import connect, make_config, recv_until, serving
from ._jssdk import OpenFang, OpenFangError

pytestmark = pytest.mark.anyio
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def _refused(call: Any) -> tuple[int, Any]:
    with pytest.raises(OpenFangError) as caught:
        await call
    return caught.value.status, caught.value.json()


async def test_sessions_create_switch_reset_compact_and_history_as_openfang_answers() -> None:
    async with serving(EchoProvider()) as server, OpenFang(server.url) as client:
        agent = server.agent_id
        await client.agents.message(agent, "first")
        first = (await client.agents.session(agent))["session_id"]
        assert UUID.fullmatch(first)

        created = await client.agents.create_session(agent, "work")  # {"label": "work"}
        assert {"session_id": created["session_id"], "label": "work"}.items() <= created.items()
        unlabelled = await client.agents.create_session(agent)  # JSON.stringify({label: undefined}) == "{}"
        assert unlabelled["label"] is None and UUID.fullmatch(unlabelled["session_id"])
        listed = (await client.agents.list_sessions(agent))["sessions"]
        assert [s["session_id"] for s in listed if s["active"]] == [unlabelled["session_id"]]
        assert {s["session_id"] for s in listed} == {first, created["session_id"], unlabelled["session_id"]}
        assert all(UUID.fullmatch(s["session_id"]) for s in listed)

        switched = await client.agents.switch_session(agent, first)
        assert {"status": "ok", "message": "Session switched"}.items() <= switched.items()
        assert (await client.agents.session(agent))["session_id"] == first
        assert await _refused(client.agents.switch_session(agent, "not-a-uuid")) == (400, {"error": "Invalid session ID"})
        assert (await client.agents.switch_session(agent, first.replace("-", "")))["message"] == "Session switched"  # Rust's Uuid reads this too
        assert (await _refused(client.agents.switch_session(agent, str(uuid.uuid4()))))[0] == 404

        compacted = await client.agents.compact_session(agent)
        assert compacted["status"] == "ok" and compacted["message"].startswith("No compaction needed (2 messages")
        reset = await client.agents.reset_session(agent)
        assert {"status": "ok", "message": "Session reset"}.items() <= reset.items()
        assert (await client.agents.session(agent))["messages"] == []

        await client.agents.message(agent, "again")
        cleared = await client.request("DELETE", f"/api/agents/{agent}/history")  # the dashboard's "Clear history"
        assert {"status": "ok", "message": "All history cleared"}.items() <= cleared.items()
        assert {s["message_count"] for s in (await client.agents.list_sessions(agent))["sessions"]} == {0}


async def test_stop_answers_run_cancelled_or_no_active_run() -> None:
    provider = ScriptedProvider([text_turn(*["word "] * 200)], delay_s=0.02)
    async with serving(provider, config=make_config(coalesce_ms=0)) as server, OpenFang(server.url) as client:
        agent = server.agent_id
        assert await client.agents.stop(agent) == {"status": "ok", "message": "No active run"}
        events: list[Any] = []
        stopped: dict[str, Any] = {}

        async def reader() -> None:
            async for event in client.agents.stream(agent, "talk"):
                events.append(event)
                if len(events) == 3:
                    stopped["answer"] = await client.agents.stop(agent)

        with anyio.fail_after(10):
            await reader()
        assert stopped["answer"] == {"status": "ok", "message": "Run cancelled"}
        assert events[-1]["done"] is True and events[-1]["interrupted"] is True
        assert await client.agents.stop(agent) == {"status": "ok", "message": "No active run"}


async def test_sessions_of_other_dialects_are_shown_and_reached_under_a_uuid() -> None:
    """stdio's ``notes`` (not a UUID) is listed, switched to and deleted as ``alias("notes")``;
    its name in a path is refused as OpenFang refuses it, in a body it still reaches it."""
    async with serving(EchoProvider()) as server, OpenFang(server.url) as client:
        agent = server.agent_id
        kernel = server.kernel
        await kernel.execute(m.Prompt(session_id="notes", agent_id=agent, text="kept in notes"))
        await kernel.wait_idle(5)
        shown = alias("notes")
        assert shown in {s["session_id"] for s in (await client.agents.list_sessions(agent))["sessions"]}
        assert shown in {s["session_id"] for s in (await client.sessions.list())["sessions"]}

        await client.agents.switch_session(agent, shown)
        session = await client.agents.session(agent)
        assert session["session_id"] == shown and [msg["content"] for msg in session["messages"]] == ["kept in notes", "echo: kept in notes"]
        reply = await client.agents.message(agent, "and more")
        assert reply["session_id"] == shown
        assert (await client.agents.message(agent, "by name", session_id="notes"))["session_id"] == shown
        history = await kernel.execute(m.GetHistory(session_id="notes"))
        assert isinstance(history, m.HistoryView) and [msg.content for msg in history.messages][-2:] == ["by name", "echo: by name"]

        assert await _refused(client.agents.switch_session(agent, "notes")) == (400, {"error": "Invalid session ID"})
        assert await _refused(client.sessions.delete("notes")) == (400, {"error": "Invalid session ID"})
        assert await client.sessions.delete(shown) == {"status": "deleted", "session_id": shown}
        assert shown not in {s["session_id"] for s in (await client.sessions.list())["sessions"]}
        with pytest.raises(m.KernelError):
            await kernel.execute(m.GetSession(session_id="notes"))
        assert UUID.fullmatch((await client.agents.session(agent))["session_id"])  # a new active session


async def test_models_providers_tools_usage_config_and_the_agents_model() -> None:
    clock = Tool(name="clock", description="The time", parameters={"type": "object"}, handler=_noon)
    provider = ScriptedProvider([text_turn("one"), text_turn("two")])
    async with serving(provider, tools=[clock]) as server, OpenFang(server.url) as client:
        agent = server.agent_id
        models = await client.models.list()
        assert [(entry["id"], entry["provider"], entry["available"]) for entry in models["models"]] == [("scripted-1", "scripted", True)]
        assert (models["total"], models["available"]) == (1, 1)
        assert models["models"][0]["context_window"] == 200_000 and models["models"][0]["tier"] == "balanced"
        providers = await client.providers.list()
        assert providers["total"] == 1
        assert {"id": "scripted", "auth_status": "configured", "model_count": 1, "key_required": False}.items() <= providers["providers"][0].items()

        tools = await client.tools.list()
        assert tools["total"] == 1 and {"name": "clock", "description": "The time", "input_schema": {"type": "object"}}.items() <= tools["tools"][0].items()
        agent_tools = await client.request("GET", f"/api/agents/{agent}/tools")
        assert agent_tools == {"tool_allowlist": [], "tool_blocklist": [], "tools": ["clock"]}

        assert (await client.request("GET", f"/api/agents/{agent}/model"))["model"] == "scripted-1"
        changed = await client.agents.set_model(agent, "bigger-model")
        assert {"status": "ok", "model": "bigger-model", "provider": "scripted"}.items() <= changed.items()
        await client.agents.message(agent, "hi")
        assert provider.requests[-1].model == "bigger-model"
        assert (await client.agents.set_model(agent, "scripted/smaller"))["model"] == "smaller"  # the dashboard's provider/model
        assert await _refused(client.request("PUT", f"/api/agents/{agent}/model", {})) == (400, {"error": "Missing 'model' field"})
        assert (await _refused(client.request("PUT", f"/api/agents/{agent}/model", {"model": "x", "provider": "other"})))[0] == 400

        usage = await client.usage()
        assert [(row["agent_id"], row["name"], row["total_tokens"]) for row in usage["agents"]] == [(agent, "General Assistant", 8)]
        config = await client.config()
        assert config["api_key"] == "not set" and config["default_model"] == {"provider": "scripted", "model": "scripted-1", "api_key_env": ""}
        assert await client.request("GET", "/api/templates") == {"templates": [], "total": 0}
        summary = await client.request("GET", "/api/usage/summary")
        assert summary["total_input_tokens"] + summary["total_output_tokens"] == 8 and summary["total_cost_usd"] == 0.0
        by_model = (await client.request("GET", "/api/usage/by-model"))["models"]
        assert [(row["model"], row["total_input_tokens"] + row["total_output_tokens"]) for row in by_model] == [("smaller", 8)]
        assert await client.request("GET", "/api/mcp/servers") == {"configured": [], "connected": [], "total_configured": 0, "total_connected": 0}
        for path, body in NOTHING_TO_SHOW.items():  # the dashboard's other panels load instead of a 404
            assert await client.request("GET", path) == body, path
        assert await client.request("GET", "/api/auth/check") == {"authenticated": True, "mode": "none"}
        assert (await client.status())["agent_count"] == 1 and (await client.health())["status"] == "ok"


async def _noon(args: dict[str, Any], ctx: Any) -> str:
    return "noon"


async def test_auth_check_and_the_token() -> None:
    async with serving(config=make_config(token="s3cret")) as server:
        async with OpenFang(server.url) as anonymous:
            assert await anonymous.request("GET", "/api/auth/check") == {"authenticated": False, "mode": "none"}
            assert (await _refused(anonymous.tools.list()))[0] == 401  # how the dashboard learns it needs a key
        async with OpenFang(server.url, headers={"Authorization": "Bearer s3cret"}) as client:
            assert await client.request("GET", "/api/auth/check") == {"authenticated": True, "mode": "none"}
            assert (await client.config())["api_key"] == "***"


GUARDED = Tool(name="guarded", description="Needs a yes", parameters={"type": "object"}, handler=_noon, requires_approval=True)


async def test_pending_approvals_are_listed_and_answered_over_rest() -> None:
    """A socket's run waits for approval: ``GET /api/approvals`` lists it, ``POST .../approve`` runs the
    tool (the socket sees its result), ``.../reject`` declines the next one with a reason."""
    provider = ScriptedProvider([tool_turn("guarded", "{}", call_id="c1"), text_turn("ran"), tool_turn("guarded", "{}", call_id="c2"), text_turn("declined")])
    async with serving(provider, tools=[GUARDED]) as server, OpenFang(server.url) as client:
        assert await client.request("GET", "/api/approvals") == {"approvals": [], "total": 0}

        async def pending() -> dict[str, Any]:
            with anyio.fail_after(5):
                while True:
                    listing = await client.request("GET", "/api/approvals")
                    if listing["approvals"]:
                        return listing["approvals"][0]
                    await anyio.sleep(0.02)

        async def chat() -> list[list[dict[str, Any]]]:
            ws = await connect(server.ws_url)
            async with ws:
                turns = []
                for text in ("do it", "again"):
                    await ws.send(json.dumps({"type": "message", "content": text}))
                    turns.append(await recv_until(ws, "response", "error"))
                return turns

        answers: dict[str, Any] = {}

        async def decide() -> None:
            first = await pending()
            assert first["status"] == "pending" and first["call_id"] == "c1" and UUID.fullmatch(first["id"])
            assert first["agent_name"] == "General Assistant" and first["agent_id"] == server.agent_id
            answers["approve"] = await client.request("POST", f"/api/approvals/{first['id']}/approve", {})
            second = await pending()
            answers["reject"] = await client.request("POST", f"/api/approvals/{second['id']}/reject", {})
            answers["again"] = await _refused(client.request("POST", f"/api/approvals/{second['id']}/reject", {}))
            answers["bad"] = await _refused(client.request("POST", "/api/approvals/nope/approve", {}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(decide)
            turns = await in_asyncio(chat)
        assert answers["approve"]["status"] == "approved" and answers["reject"]["status"] == "rejected"
        assert answers["again"][0] == 404 and answers["bad"] == (400, {"error": "Invalid approval ID"})
        results = [next(f for f in frames if f["type"] == "tool_result") for frames in turns]
        assert [(r["id"], r["is_error"]) for r in results] == [("c1", False), ("c2", True)]
        assert [frames[-1]["content"] for frames in turns] == ["ran", "declined"]
        assert DASHBOARD_REJECTION in provider.requests[-1].messages[-1].content
        assert await client.request("GET", "/api/approvals") == {"approvals": [], "total": 0}
