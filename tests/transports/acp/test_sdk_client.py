"""The gateway as an ACP agent, driven by the official Python SDK (``agent-client-protocol``).

Each test starts ``python -m gateway serve --transport acp --backend B`` in a
temporary directory (the tools' workspace) with its own SQLite file and no API
key, so the offline echo model answers: it streams "echo: <prompt>" word by
word, and "/tool NAME {json}" makes it call that tool once.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import acp
import pytest
from acp import RequestError

from ._client import BACKENDS, RecordingClient, capabilities, run, spawn

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def tool_prompt(name: str, **args: object) -> list[object]:
    return [acp.text_block(f"/tool {name} {json.dumps(args)}")]


async def _open(conn: object, cwd: Path, caps: object = None) -> str:
    init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps or capabilities())  # type: ignore[attr-defined]
    assert init.protocol_version == 1
    session = await conn.new_session(cwd=str(cwd), mcp_servers=[])  # type: ignore[attr-defined]
    return session.session_id


def test_initialize_new_session_and_commands(backend: str, tmp_path: Path) -> None:
    client = RecordingClient()

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities())
            assert init.protocol_version == 1
            assert init.agent_capabilities.load_session is True
            prompt_caps = init.agent_capabilities.prompt_capabilities
            assert (prompt_caps.image, prompt_caps.audio, prompt_caps.embedded_context) == (True, False, True)
            assert init.agent_info.name == "gateway" and init.auth_methods == []
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            assert len(session.session_id) == 32
            assert session.modes.current_mode_id == "default"
            for _ in range(100):
                if client.of("available_commands_update"):
                    break
                await asyncio.sleep(0.02)
            names = [c.name for c in client.of("available_commands_update")[0].available_commands]
            assert {"help", "clear", "model"} <= set(names)
        assert proc.returncode == 0

    run(scenario())


def test_prompt_streams_chunks_and_usage(backend: str, tmp_path: Path) -> None:
    client = RecordingClient()

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            reply = await conn.prompt(session_id=sid, prompt=[acp.text_block("hello streaming world")])
            assert reply.stop_reason == "end_turn"
            assert client.text() == "echo: hello streaming world"
            usage = client.of("usage_update")
            assert usage and usage[-1].used > 0 and usage[-1].size >= usage[-1].used
            assert reply.usage is not None and reply.usage.output_tokens > 0
            again = await conn.prompt(session_id=sid, prompt=[acp.text_block("second")])
            assert again.stop_reason == "end_turn" and client.text().endswith("echo: second")
        assert proc.returncode == 0

    run(scenario())


def test_tool_permission_allowed_writes_the_file(backend: str, tmp_path: Path) -> None:
    client = RecordingClient(permission="allow_once")

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            reply = await conn.prompt(session_id=sid, prompt=tool_prompt("write_file", path="out.txt", content="hi there"))
            assert reply.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    assert (tmp_path / "out.txt").read_text() == "hi there"
    [(tool_call, options)] = client.permission_requests
    assert tool_call.kind == "edit" and tool_call.raw_input == {"path": "out.txt", "content": "hi there"}
    assert {o.kind for o in options} == {"allow_once", "allow_always", "reject_once", "reject_always"}
    [start] = client.of("tool_call")
    assert (start.tool_call_id, start.status, start.kind) == (tool_call.tool_call_id, "pending", "edit")
    assert [u.status for u in client.of("tool_call_update")] == ["in_progress", "completed"]
    assert "tool write_file returned: wrote 8 bytes" in client.text()


def test_tool_permission_rejected(backend: str, tmp_path: Path) -> None:
    client = RecordingClient(permission="reject_once")

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            reply = await conn.prompt(session_id=sid, prompt=tool_prompt("write_file", path="no.txt", content="x"))
            assert reply.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    assert not (tmp_path / "no.txt").exists()
    assert len(client.permission_requests) == 1
    [update] = client.of("tool_call_update")
    assert update.status == "failed" and "declined" in update.content[0].content.text


def test_permission_allow_always_is_remembered(backend: str, tmp_path: Path) -> None:
    client = RecordingClient(permission="allow_always")

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            for name in ("a.txt", "b.txt"):
                reply = await conn.prompt(session_id=sid, prompt=tool_prompt("write_file", path=name, content=name))
                assert reply.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    assert (tmp_path / "a.txt").read_text() == "a.txt" and (tmp_path / "b.txt").read_text() == "b.txt"
    assert len(client.permission_requests) == 1
    assert [u.status for u in client.of("tool_call_update")] == ["in_progress", "completed", "in_progress", "completed"]


def test_permission_cancelled_by_the_editor_rejects(backend: str, tmp_path: Path) -> None:
    client = RecordingClient(permission=None)

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            reply = await conn.prompt(session_id=sid, prompt=tool_prompt("write_file", path="c.txt", content="x"))
            assert reply.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    assert not (tmp_path / "c.txt").exists()
    assert client.of("tool_call_update")[-1].status == "failed"


def test_cancel_mid_stream_answers_cancelled(backend: str, tmp_path: Path) -> None:
    client = RecordingClient()
    words = " ".join(f"w{i}" for i in range(400))

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.02") as (conn, proc):
            sid = await _open(conn, tmp_path)
            first_chunk = asyncio.Event()
            client.on_update = lambda u: first_chunk.set() if u.session_update == "agent_message_chunk" else None
            prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[acp.text_block(words)]))
            await asyncio.wait_for(first_chunk.wait(), 10)
            await conn.cancel(session_id=sid)
            reply = await asyncio.wait_for(prompt, 10)
            assert reply.stop_reason == "cancelled"
            assert 0 < len(client.text()) < len("echo: " + words)
            # The session lives on: the next prompt is answered normally.
            again = await conn.prompt(session_id=sid, prompt=[acp.text_block("after")])
            assert again.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())


def test_load_session_after_restart_replays_history(backend: str, tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    first = RecordingClient(permission="allow_once")

    async def create() -> str:
        async with spawn(first, backend, tmp_path, db) as (conn, proc):
            sid = await _open(conn, tmp_path)
            await conn.prompt(session_id=sid, prompt=[acp.text_block("remember the walrus")])
            await conn.prompt(session_id=sid, prompt=tool_prompt("write_file", path="w.txt", content="walrus"))
        assert proc.returncode == 0
        return sid

    sid = run(create())
    second = RecordingClient()

    async def load() -> None:
        async with spawn(second, backend, tmp_path, db) as (conn, proc):
            init = await conn.initialize(protocol_version=1, client_capabilities=capabilities())
            assert init.agent_capabilities.load_session
            reply = await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
            assert reply.modes.current_mode_id == "default"
            assert [o.id for o in reply.config_options] == ["mode", "model", "max_turns"]
            with pytest.raises(RequestError) as missing:
                await conn.load_session(cwd=str(tmp_path), session_id="no-such-session", mcp_servers=[])
            assert missing.value.code == -32002 and "no-such-session" in str(missing.value)
            again = await conn.prompt(session_id=sid, prompt=[acp.text_block("still here")])
            assert again.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(load())
    kinds = second.kinds()
    assert kinds.index("user_message_chunk") < kinds.index("agent_message_chunk") < kinds.index("tool_call")
    assert second.text("user_message_chunk").startswith("remember the walrus")
    user, answer = second.of("user_message_chunk")[0], second.of("agent_message_chunk")[0]
    assert user.message_id and answer.message_id and user.message_id != answer.message_id
    assert second.text().startswith("echo: remember the walrus")
    [call] = second.of("tool_call")
    assert call.kind == "read" or call.title.startswith("Write file")
    assert [u.status for u in second.of("tool_call_update")] == ["completed"]


def test_image_and_embedded_resource_prompt(backend: str, tmp_path: Path) -> None:
    client = RecordingClient()
    resource = acp.resource_block(acp.embedded_text_resource(f"file://{tmp_path}/notes.md", "# notes", mime_type="text/markdown"))

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            blocks = [acp.text_block("look at"), acp.image_block(base64.b64encode(PNG).decode(), "image/png"), resource]
            reply = await conn.prompt(session_id=sid, prompt=blocks)
            assert reply.stop_reason == "end_turn"
            link = acp.resource_link_block("spec.md", f"file://{tmp_path}/spec.md")
            reply = await conn.prompt(session_id=sid, prompt=[link])
            assert reply.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    text = client.text()
    assert f"[image image/png, {len(PNG)} bytes]" in text
    assert f"File: file://{tmp_path}/notes.md (text/markdown)" in text and "# notes" in text
    assert f"linked resource: spec.md <file://{tmp_path}/spec.md>" in text


def test_read_file_is_delegated_to_the_editor(backend: str, tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("content on disk")
    client = RecordingClient(files={str(tmp_path / "x.txt"): "unsaved buffer in the editor"})

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path, capabilities(read=True))
            reply = await conn.prompt(session_id=sid, prompt=tool_prompt("read_file", path="x.txt"))
            assert reply.stop_reason == "end_turn"
            reply = await conn.prompt(session_id=sid, prompt=tool_prompt("read_file", path="../outside.txt"))
            assert reply.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    assert client.reads == [(str(tmp_path / "x.txt"), None, None)]
    assert "unsaved buffer in the editor" in client.text() and "content on disk" not in client.text()
    assert "outside the project directory" in client.text()
    [first, _second] = client.of("tool_call")
    assert first.kind == "read" and first.locations[0].path == str(tmp_path / "x.txt")
    assert client.permission_requests == []


def test_write_file_is_delegated_to_the_editor(backend: str, tmp_path: Path) -> None:
    client = RecordingClient(permission="allow_once")

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path, capabilities(read=True, write=True))
            reply = await conn.prompt(session_id=sid, prompt=tool_prompt("write_file", path="sub/new.txt", content="from the model"))
            assert reply.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    assert client.writes == [(str(tmp_path / "sub" / "new.txt"), "from the model")]
    assert not (tmp_path / "sub").exists()
    [(tool_call, _)] = client.permission_requests
    assert tool_call.content[0].type == "diff" and tool_call.content[0].new_text == "from the model"


def test_slash_command_and_modes(backend: str, tmp_path: Path) -> None:
    client = RecordingClient(permission="reject_once")

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            reply = await conn.prompt(session_id=sid, prompt=[acp.text_block("/help")])
            assert reply.stop_reason == "end_turn" and "Available commands" in client.text()
            # Default mode: a query tool runs without asking.
            await conn.prompt(session_id=sid, prompt=tool_prompt("current_time"))
            assert client.permission_requests == []
            await conn.set_session_mode(session_id=sid, mode_id="ask")
            await conn.prompt(session_id=sid, prompt=tool_prompt("current_time"))
            assert len(client.permission_requests) == 1
            assert "current_mode_update" in client.kinds()
            with pytest.raises(RequestError) as bad:
                await conn.set_session_mode(session_id=sid, mode_id="yolo")
            assert bad.value.code == -32602
            with pytest.raises(RequestError) as unknown:
                await conn.prompt(session_id="nope", prompt=[acp.text_block("hi")])
            assert unknown.value.code == -32002 and "nope" in str(unknown.value)
        assert proc.returncode == 0

    run(scenario())
