"""SIGKILL the gateway mid-run: on restart every completed exchange is there, the store is sound."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import anyio
import pytest

from tests.subprocess_gateway import gateway_env, gateway_process

pytestmark = pytest.mark.anyio


def is_end(msg: dict) -> bool:
    return msg.get("type") in ("run_finished", "run_failed")


async def test_sigkill_during_a_run_loses_nothing_acknowledged(tmp_path: Path, anyio_backend: str) -> None:
    db = tmp_path / "g.db"
    env = gateway_env(db, GATEWAY_ECHO_DELAY_S="0.02")
    args = ["serve", "--transport", "stdio", "--backend", anyio_backend, "--set", 'stdio.session_id="crash"']
    async with gateway_process(args, env, cwd=tmp_path) as client:
        await client.receive(timeout_s=30)
        for i in range(3):
            await client.send({"type": "prompt", "text": f"exchange {i}"})
            await client.until(is_end)
        await client.send({"type": "prompt", "text": " ".join(["unfinished"] * 300)})
        await client.until(lambda m: m.get("type") == "text_delta")
        client.process.send_signal(signal.SIGKILL)
        with anyio.fail_after(10):
            await client.process.wait()

    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()

    async with gateway_process(args, env, cwd=tmp_path) as client:
        hello = await client.receive(timeout_s=30)
        assert hello["session"]["message_count"] == 7
        await client.send({"type": "get_history", "request_id": "h"})
        history = (await client.until(lambda m: m.get("request_id") == "h"))[-1]["messages"]
        pairs = [(m["role"], m["content"]) for m in history]
        for i in range(3):
            assert ("user", f"exchange {i}") in pairs and ("assistant", f"echo: exchange {i}") in pairs
        assert pairs[-1][0] == "user" and pairs[-1][1].startswith("unfinished")
        await client.send({"type": "prompt", "text": "still works"})
        assert (await client.until(is_end))[-1]["text"] == "echo: still works"
        await client.close_stdin()
        await client.rest()
        assert await client.process.wait() == 0
