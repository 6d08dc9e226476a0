"""``gateway serve --transport stdio`` as a subprocess: a whole conversation over pipes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.subprocess_gateway import gateway_env, gateway_process

pytestmark = pytest.mark.anyio


def is_end(msg: dict) -> bool:
    return msg.get("type") in ("run_finished", "run_failed")


async def test_conversation_with_tool_call_interrupt_bad_lines_and_eof(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.02")
    args = ["serve", "--transport", "stdio", "--backend", anyio_backend]
    async with gateway_process(args, env, cwd=tmp_path) as client:
        hello = await client.receive(timeout_s=30)
        assert hello["type"] == "session"
        session_id = hello["session"]["session_id"]

        await client.send({"type": "prompt", "text": "hello stdio", "request_id": "p1"})
        seen = await client.until(is_end)
        assert seen[0] == {"type": "accepted", "session_id": session_id, "run_id": seen[0]["run_id"], "request_id": "p1"}
        assert seen[-1]["type"] == "run_finished" and seen[-1]["text"] == "echo: hello stdio"
        assert "".join(m["text"] for m in seen if m["type"] == "text_delta") == "echo: hello stdio"

        await client.send({"type": "prompt", "text": '/tool current_time {"timezone": "UTC"}', "request_id": "p2"})
        seen = await client.until(is_end)
        call = next(m for m in seen if m["type"] == "tool_call")
        result = next(m for m in seen if m["type"] == "tool_result")
        assert call["name"] == "current_time" and result["call_id"] == call["call_id"] and "T" in result["result"]

        await client.send(b"this is not json")
        bad = await client.receive()
        assert bad["type"] == "error" and bad["error"]["code"] == "parse_error"
        await client.send({"type": "warp", "request_id": "w"})
        bad = await client.receive()
        assert bad["request_id"] == "w" and "unknown command type" in bad["error"]["message"]
        await client.send(b"x" * 1_100_000)
        bad = await client.receive()
        assert bad["error"]["code"] == "too_large"

        long_text = " ".join(f"word{i}" for i in range(200))
        await client.send({"type": "prompt", "text": long_text, "request_id": "p3"})
        await client.until(lambda m: m.get("type") == "text_delta")
        await client.send({"type": "interrupt", "request_id": "i1"})
        seen = await client.until(is_end)
        finished = seen[-1]
        assert finished["type"] == "run_finished" and finished["interrupted"] is True
        assert finished["request_id"] == "p3" and 0 < len(finished["text"]) < len(long_text)

        await client.send({"type": "get_history", "request_id": "h"})
        history = await client.until(lambda m: m.get("request_id") == "h" and m.get("type") == "history")
        contents = [msg["content"] for msg in history[-1]["messages"] if msg["role"] == "user"]
        assert contents[0] == "hello stdio" and contents[-1] == long_text

        await client.send({"type": "prompt", "text": "last words before eof", "request_id": "p4"})
        await client.close_stdin()
        rest = await client.rest(timeout_s=20)
        assert rest[-1]["type"] == "run_finished" and rest[-1]["request_id"] == "p4"
        assert rest[-1]["text"] == "echo: last words before eof"
        with anyio.fail_after(10):
            assert await client.process.wait() == 0
        assert client.process.stderr is not None
        errors = (await client.process.stderr.receive(1 << 20)).decode()
        assert "echo model" in errors


async def test_history_continues_in_a_named_session_after_restart(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db")
    args = ["serve", "--transport", "stdio", "--backend", anyio_backend, "--set", "stdio.session_id=\"notes\""]
    for text in ("first run", "second run"):
        async with gateway_process(args, env, cwd=tmp_path) as client:
            hello = await client.receive(timeout_s=30)
            assert hello["session"]["session_id"] == "notes"
            await client.send({"type": "prompt", "text": text})
            await client.until(is_end)
            await client.close_stdin()
            await client.rest()
            assert await client.process.wait() == 0
    async with gateway_process(args, env, cwd=tmp_path) as client:
        hello = await client.receive(timeout_s=30)
        assert hello["session"]["message_count"] == 4
        await client.close_stdin()
        await client.rest()


async def test_sigterm_interrupts_and_exits_zero(tmp_path: Path, anyio_backend: str) -> None:
    import signal

    env = gateway_env(tmp_path / "g.db", GATEWAY_ECHO_DELAY_S="0.05")
    config = tmp_path / "gateway.toml"
    config.write_text("drain_s = 0.5\n")  # SIGTERM drains: the 10 s run outlives the drain
    async with gateway_process(["serve", "--transport", "stdio", "--backend", anyio_backend, "--config", str(config)], env, cwd=tmp_path) as client:
        await client.receive(timeout_s=30)
        await client.send({"type": "prompt", "text": " ".join(["slow"] * 200), "request_id": "s"})
        await client.until(lambda m: m.get("type") == "text_delta")
        client.process.send_signal(signal.SIGTERM)
        rest = await client.rest(timeout_s=15)
        ends = [m for m in rest if is_end(m)]
        assert len(ends) == 1 and ends[0]["interrupted"] is True and ends[0]["interrupt_cause"] == "drain"
        with anyio.fail_after(10):
            assert await client.process.wait() == 0


async def test_deeply_nested_lines_are_parse_errors_not_crashes(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "g.db")
    async with gateway_process(["serve", "--transport", "stdio", "--backend", anyio_backend], env, cwd=tmp_path) as client:
        await client.receive(timeout_s=30)
        deep = b"[" * 200_000 + b"]" * 200_000  # 400 kB: under the default 1 MiB line limit
        await client.send(deep)
        bad = await client.receive()
        assert bad["type"] == "error" and bad["error"]["code"] == "invalid_request", bad  # an array is no command
        for line in (b'{"a":' * 150_000 + b"1" + b"}" * 150_000, b'{"type":"prompt","text":"x","extra":' + deep + b"}"):
            await client.send(line)
            bad = await client.receive()
            assert bad["type"] == "error" and bad["error"]["code"] == "parse_error", bad
        await client.send({"type": "prompt", "text": "still here", "request_id": "after"})
        seen = await client.until(is_end)
        assert seen[-1]["request_id"] == "after" and seen[-1]["text"] == "echo: still here"
        await client.close_stdin()
        await client.rest()
        with anyio.fail_after(10):
            assert await client.process.wait() == 0
