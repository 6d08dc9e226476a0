"""The ``run_command`` tool through the editor's terminal, with the SDK's client side
implementing ``terminal/*`` over real subprocesses (``_client.Terminal``).

The echo model calls ``run_command`` when the prompt reads ``/tool run_command {json}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import acp
import pytest

from ._client import BACKENDS, RecordingClient, capabilities, run, spawn

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def run_command(*args: str, **extra: str) -> list[object]:
    return [acp.text_block(f"/tool run_command {json.dumps({'command': sys.executable, 'args': list(args), **extra})}")]


async def _open(conn: object, cwd: Path, terminal: bool = True) -> str:
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities(terminal=terminal))  # type: ignore[attr-defined]
    return (await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id  # type: ignore[attr-defined]


def test_a_command_runs_in_the_editors_terminal(backend: str, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    client = RecordingClient(permission="allow_once")

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            script = "import os; print('hello from', os.path.basename(os.getcwd()))"
            reply = await conn.prompt(session_id=sid, prompt=run_command("-c", script, cwd="sub"))
            assert reply.stop_reason == "end_turn"
            failing = await conn.prompt(session_id=sid, prompt=run_command("-c", "import sys; print('bad input'); sys.exit(3)"))
            assert failing.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    [(call, options)] = client.permission_requests[:1]
    assert call.kind == "execute" and call.title.startswith("Run command ") and "hello from" in call.title
    assert {o.kind for o in options} == {"allow_once", "allow_always", "reject_once", "reject_always"}
    assert client.created[0] == {"command": sys.executable, "args": ["-c", script_of(client)], "cwd": str(tmp_path / "sub"), "output_byte_limit": 1_048_576}
    assert client.terminal_calls == [
        ("create", "term-0"), ("wait_for_exit", "term-0"), ("output", "term-0"), ("release", "term-0"),
        ("create", "term-1"), ("wait_for_exit", "term-1"), ("output", "term-1"), ("release", "term-1"),
    ]
    shown = [u for u in client.of("tool_call_update") if u.content and u.content[0].type == "terminal"]
    assert [(u.status, u.content[0].terminal_id) for u in shown] == [
        ("in_progress", "term-0"), ("completed", "term-0"), ("in_progress", "term-1"), ("failed", "term-1"),
    ]
    text = client.text()
    assert "tool run_command returned: hello from sub" in text
    assert "exit code 3" in text and "bad input" in text


def script_of(client: RecordingClient) -> str:
    return str(client.created[0]["args"][1])  # type: ignore[index]


def test_cancelling_the_prompt_kills_the_command(backend: str, tmp_path: Path) -> None:
    client = RecordingClient(permission="allow_once")
    marker = tmp_path / "started"

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path)
            sleeper = f"import pathlib, time; pathlib.Path({str(marker)!r}).write_text('x'); time.sleep(120)"
            prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=run_command("-c", sleeper)))
            async with asyncio.timeout(15):
                while not marker.exists():
                    await asyncio.sleep(0.02)
            process = client.terminals["term-0"].process
            assert process.returncode is None
            await conn.cancel(session_id=sid)
            reply = await asyncio.wait_for(prompt, 15)
            assert reply.stop_reason == "cancelled"
            assert process.returncode is not None and process.returncode < 0  # killed, not finished
            after = await conn.prompt(session_id=sid, prompt=[acp.text_block("still fine")])
            assert after.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    assert client.terminal_calls == [("create", "term-0"), ("wait_for_exit", "term-0"), ("kill", "term-0"), ("release", "term-0")]
    assert client.of("tool_call_update")[-1].status == "failed"


def test_no_terminal_no_run_command(backend: str, tmp_path: Path) -> None:
    client = RecordingClient(permission="allow_once")

    async def scenario() -> None:
        async with spawn(client, backend, tmp_path, tmp_path / "g.db") as (conn, proc):
            sid = await _open(conn, tmp_path, terminal=False)
            reply = await conn.prompt(session_id=sid, prompt=run_command("-c", "print(1)"))
            assert reply.stop_reason == "end_turn"
        assert proc.returncode == 0

    run(scenario())
    # The tool is not offered at all (the echo model calls only offered tools: it echoes).
    assert client.created == [] and client.permission_requests == [] and client.of("tool_call") == []
    assert client.text().startswith("echo: /tool run_command")
