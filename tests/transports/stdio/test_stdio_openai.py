"""The whole real path: stdio client → gateway process → openai SDK → fake upstream (127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.openai_server import Reply, ToolCallScript, fake_openai_server
from tests.subprocess_gateway import gateway_env, gateway_process

pytestmark = pytest.mark.anyio


def is_end(msg: dict) -> bool:
    return msg.get("type") in ("run_finished", "run_failed")


async def test_openai_provider_with_tool_call_usage_and_upstream_errors(tmp_path: Path, anyio_backend: str) -> None:
    (tmp_path / "notes.txt").write_text("the secret word is ginger")
    script = [
        Reply(text="", tool_calls=[ToolCallScript(name="read_file", arguments='{"path": "notes.txt"}', pieces=3)]),
        Reply(text="The word is ginger.", chunks=4, usage=(40, 5)),
        Reply.error(429, "slow down", retry_after=3),
        Reply(text="Back again.", chunks=2),
    ]
    async with fake_openai_server(script, api_key="sk-test-key-0001") as upstream:
        env = gateway_env(tmp_path / "g.db", OPENAI_API_KEY="sk-test-key-0001", OPENAI_BASE_URL=upstream.base_url)
        cfg = tmp_path / "g.toml"
        cfg.write_text("[provider.openai]\nmodel = \"fake-model\"\nmax_retries = 0\n")
        args = ["serve", "--transport", "stdio", "--backend", anyio_backend, "--config", str(cfg)]
        async with gateway_process(args, env, cwd=tmp_path) as client:
            await client.receive(timeout_s=30)
            await client.send({"type": "prompt", "text": "what is the word?", "request_id": "1"})
            seen = await client.until(is_end)
            result = next(m for m in seen if m["type"] == "tool_result")
            assert result["name"] == "read_file" and result["result"] == "the secret word is ginger"
            finished = seen[-1]
            assert finished["type"] == "run_finished" and finished["text"] == "The word is ginger."
            assert finished["usage"]["input_tokens"] >= 40 and finished["usage"]["output_tokens"] >= 5
            body = upstream.requests[1]
            assert body["model"] == "fake-model" and body["stream_options"] == {"include_usage": True}
            assert body["messages"][-1] == {"role": "tool", "tool_call_id": body["messages"][-2]["tool_calls"][0]["id"], "content": "the secret word is ginger"}

            await client.send({"type": "prompt", "text": "again", "request_id": "2"})
            failed = (await client.until(is_end))[-1]
            assert failed["type"] == "run_failed" and failed["error"]["code"] == "rate_limited"
            assert failed["error"]["details"]["retry_after_s"] == 3

            await client.send({"type": "prompt", "text": "and now?", "request_id": "3"})
            assert (await client.until(is_end))[-1]["text"] == "Back again."

            await client.send({"type": "get_settings", "request_id": "s"})
            settings = (await client.until(lambda m: m.get("request_id") == "s"))[-1]
            assert settings["settings"]["provider"]["openai"]["api_key"] == "sk-…0001"
            await client.close_stdin()
            output = await client.rest()
            assert await client.process.wait() == 0
            assert client.process.stderr is not None
            logs = (await client.process.stderr.receive(1 << 20)).decode()
        assert "sk-test-key-0001" not in logs and "sk-test-key-0001" not in str(output)
