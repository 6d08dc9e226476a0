"""Claude Code (npm ``@anthropic-ai/claude-code``, pinned; its native binary comes as the
registry's linux-x64 package) against the gateway's Messages API: ``claude -p`` with
``ANTHROPIC_BASE_URL`` at the gateway, the gateway token as ``ANTHROPIC_API_KEY`` (sent as
``x-api-key``), no non-essential traffic, a clean ``HOME`` and a temp workdir, every request
but loopback sent to a dead proxy.

* over the echo model, Claude Code prints the echo of its prompt;
* over the openai provider and the scripted upstream (``Reply.prompted``), the model asks
  for Claude Code's ``Bash`` tool with the command the prompt names; Claude Code runs it
  itself (``--allowedTools Bash``), sends its output back as a ``tool_result``, the upstream
  receives that output, and Claude Code prints the model's final answer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from kernel.settings import AgentSettings, OpenAISettings, Settings
from kernel.testing import running_kernel
from plugins.providers.echo import EchoProvider
from plugins.providers.openai import OpenAIProvider
from tests.fakes.openai_server import Reply, fake_openai_server
from tests.node_clients import npm_install
from tests.transports.http._helpers import http_server

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning"),
]

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"
AGENT = "Helper"
TOKEN = "claude-code-test-token"


@pytest.fixture(scope="module")
def claude() -> Path:
    """Claude Code's native binary (npm-installed once into the test cache)."""
    _, modules = npm_install("claude-code", [CLAUDE_CODE])
    return modules / ".bin" / "claude"


async def run_claude(claude: Path, base_url: str, prompt: str, tmp_path: Path, *extra: str) -> dict[str, Any]:
    """``claude -p PROMPT --output-format json`` in a temp workdir: its JSON result."""
    home, workdir = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": TOKEN,
        "ANTHROPIC_MODEL": AGENT, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
        # Anything but loopback goes to a port nobody listens on.
        "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost",
        "NO_COLOR": "1",
    }
    command = [str(claude), "-p", prompt, "--output-format", "json", *extra]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, env=env, cwd=workdir, stdin=None, check=False)
    out, err = done.stdout.decode(), done.stderr.decode()
    if done.returncode != 0:
        pytest.fail(f"claude -p failed ({done.returncode}):\n{out[-4000:]}\n{err[-4000:]}", pytrace=False)
    result: dict[str, Any] = json.loads(out)
    return result


async def test_claude_code_answers_from_the_echo_model(claude: Path, tmp_path: Path) -> None:
    settings = Settings(agents=[AgentSettings(name=AGENT)])
    async with running_kernel(EchoProvider(), settings=settings) as kernel, http_server(kernel, token=TOKEN) as url:
        result = await run_claude(claude, url, "Say the word pineapple", tmp_path)
    assert result["is_error"] is False and result["num_turns"] == 1
    assert result["result"].startswith("echo: ") and result["result"].endswith("Say the word pineapple")


async def test_claude_code_runs_its_bash_tool_for_the_model(claude: Path, tmp_path: Path) -> None:
    command = {"command": "echo claude-ran-$((6*7)) > proof.txt && cat proof.txt", "description": "Write the proof file"}
    async with fake_openai_server([Reply.prompted()]) as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-upstream", base_url=upstream.base_url, model="fake-model", timeout_s=20.0, max_retries=0))
        settings = Settings(agents=[AgentSettings(name=AGENT)])
        try:
            async with running_kernel(provider, settings=settings) as kernel, http_server(kernel, token=TOKEN) as url:
                result = await run_claude(claude, url, f"TOOL_CALL Bash {json.dumps(command)}", tmp_path, "--allowedTools", "Bash")
        finally:
            await provider.aclose()
    assert (tmp_path / "work" / "proof.txt").read_text().strip() == "claude-ran-42"  # Claude Code ran it, in its workdir
    asked = [r for r in upstream.requests if any(t["function"]["name"] == "Bash" for t in r.get("tools", []))]
    first, second = asked[0], asked[-1]
    assert first["messages"][0]["role"] == "system" and "Claude" in first["messages"][0]["content"]
    calls = [c for msg in second["messages"] if msg["role"] == "assistant" for c in msg.get("tool_calls") or []]
    assert [c["function"]["name"] for c in calls] == ["Bash"] and json.loads(calls[0]["function"]["arguments"]) == command
    results = [msg for msg in second["messages"] if msg["role"] == "tool"]
    assert len(results) == 1 and results[0]["tool_call_id"] == calls[0]["id"] and "claude-ran-42" in results[0]["content"]
    assert result["is_error"] is False and result["num_turns"] == 2
    assert result["result"] == f"The tool returned: {results[0]['content'].strip()}"
