"""Session history, settings, plans and usage, driven by the official ACP SDK.

The gateway runs as an agent subprocess on the backend each test names (see
``test_sdk_client.py``). The config-option test points the gateway's ``openai``
provider at the fake OpenAI server of ``tests/fakes`` (in this process, on
127.0.0.1), which records the model each request names.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import acp
import pytest
from acp import RequestError

from tests.fakes.openai_server import Reply, fake_openai_server

from ._client import BACKENDS, RecordingClient, capabilities, run, spawn, stdio_session

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


async def until(condition: Any, timeout_s: float = 10.0) -> None:
    """Wait (bounded) for an update the gateway sends after a response."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def test_sessions_listed_newest_first_resumed_and_closed(backend: str, tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    elsewhere = stdio_session(backend, tmp_path, db, "a conversation held over stdio")
    client = RecordingClient()

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, db, "--set", "acp.list_page_size=2") as (conn, proc):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities())
            caps = init.agent_capabilities.session_capabilities
            assert caps.list is not None and caps.resume is not None and caps.close is not None
            first = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            await conn.prompt(session_id=first, prompt=[acp.text_block("walruses   and\nseals")])
            second = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            await conn.prompt(session_id=second, prompt=[acp.text_block("otters")])
            titles = {u.title for u in client.of("session_info_update")}
            assert titles == {"walruses and seals", "otters"}

            page = await conn.list_sessions(cwd=str(tmp_path))
            assert [s.session_id for s in page.sessions] == [second, first] and page.next_cursor
            assert [s.title for s in page.sessions] == ["otters", "walruses and seals"]
            assert all(s.cwd == str(tmp_path) and s.updated_at.endswith("Z") for s in page.sessions)
            rest = await conn.list_sessions(cwd=str(tmp_path), cursor=page.next_cursor)
            assert [(s.session_id, s.title) for s in rest.sessions] == [(elsewhere, "a conversation held over stdio")]
            assert rest.next_cursor is None
            with pytest.raises(RequestError) as bad_cursor:
                await conn.list_sessions(cursor="not-a-cursor")
            assert bad_cursor.value.code == -32602

            # Resume attaches without replaying: no message of the stdio conversation arrives.
            seen = len(client.updates)
            resumed = await conn.resume_session(session_id=elsewhere, cwd=str(tmp_path), mcp_servers=[])
            assert resumed.modes.current_mode_id == "default" and [o.id for o in resumed.config_options] == ["mode", "model", "max_turns"]
            assert [u.session_update for u in client.updates[seen:]] in ([], ["available_commands_update"])
            again = await conn.prompt(session_id=elsewhere, prompt=[acp.text_block("and now over ACP")])
            assert again.stop_reason == "end_turn" and client.text().endswith("echo: and now over ACP")
            with pytest.raises(RequestError) as missing:
                await conn.resume_session(session_id="nope", cwd=str(tmp_path), mcp_servers=[])
            assert missing.value.code == -32002

            await conn.close_session(session_id=first)
            with pytest.raises(RequestError) as closed:
                await conn.prompt(session_id=first, prompt=[acp.text_block("still there?")])
            assert closed.value.code == -32002
            # Closed is not deleted: it stays in the list, which the ACP prompt reordered.
            top = await conn.list_sessions()
            tail = await conn.list_sessions(cursor=top.next_cursor)
            assert [s.session_id for s in top.sessions + tail.sessions] == [elsewhere, second, first]
        assert proc.returncode == 0

    run(scenario())


def test_a_config_option_changes_the_model_used_upstream(backend: str, tmp_path: Path) -> None:
    client = RecordingClient()

    async def scenario() -> None:
        async with fake_openai_server([Reply(text="upstream says hi", chunks=3)], models=("fake-small", "fake-large")) as server:
            upstream = {"OPENAI_API_KEY": "sk-test-key", "OPENAI_BASE_URL": server.base_url, "OPENAI_MODEL": "fake-small"}
            async with spawn(client, backend, tmp_path, tmp_path / "g.db", **upstream) as (conn, proc):
                await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities())
                session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
                sid = session.session_id
                model = next(o for o in session.config_options if o.id == "model")
                assert model.category == "model" and model.current_value == "fake-small"
                assert [v.value for v in model.options] == ["fake-small", "fake-large"]
                await conn.prompt(session_id=sid, prompt=[acp.text_block("first")])

                changed = await conn.set_config_option(config_id="model", session_id=sid, value="fake-large")
                assert {o.id: o.current_value for o in changed.config_options} == {"mode": "default", "model": "fake-large", "max_turns": "0"}
                await conn.set_config_option(config_id="max_turns", session_id=sid, value="5")
                reply = await conn.prompt(session_id=sid, prompt=[acp.text_block("second")])
                assert reply.stop_reason == "end_turn" and client.text().endswith("upstream says hi")
                with pytest.raises(RequestError) as unknown:
                    await conn.set_config_option(config_id="model", session_id=sid, value="fake-huge")
                assert unknown.value.code == -32602 and "fake-large" in str(unknown.value.data or unknown.value)

                # Changing the mode through its option also tells mode-only clients.
                await conn.set_config_option(config_id="mode", session_id=sid, value="ask")
                await until(lambda: client.of("current_mode_update"))
                assert client.of("current_mode_update")[-1].current_mode_id == "ask"
            assert proc.returncode == 0
        assert [r["model"] for r in server.requests] == ["fake-small", "fake-large"]

    run(scenario())


PLAN = {
    "entries": [
        {"content": "look at the failing test", "priority": "high", "status": "completed"},
        {"content": "fix the bug", "priority": "high", "status": "in_progress"},
        {"content": "tell the user", "priority": "low", "status": "pending"},
    ]
}


def test_plan_usage_and_title_updates_arrive(backend: str, tmp_path: Path) -> None:
    client = RecordingClient()

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities())
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            reply = await conn.prompt(session_id=sid, prompt=[acp.text_block(f"/tool update_plan {json.dumps(PLAN)}")])
            assert reply.stop_reason == "end_turn"
            [plan] = client.of("plan")
            assert [(e.content, e.priority, e.status) for e in plan.entries] == [(e["content"], e["priority"], e["status"]) for e in PLAN["entries"]]
            [usage] = client.of("usage_update")
            assert 0 < usage.used <= usage.size == 128_000
            [info] = client.of("session_info_update")
            assert info.title.startswith("/tool update_plan") and info.updated_at.endswith("Z")
            chunks = client.of("agent_message_chunk")
            assert chunks and len({c.message_id for c in chunks}) == 1 and chunks[0].message_id
            kinds = client.kinds()
            assert kinds.index("plan") < kinds.index("usage_update")
            # A second prompt keeps the title: no second session_info_update.
            await conn.prompt(session_id=sid, prompt=[acp.text_block("thanks")])
            assert len(client.of("session_info_update")) == 1 and len(client.of("usage_update")) == 2
        assert proc.returncode == 0

    run(scenario())
