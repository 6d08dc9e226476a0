"""Codex CLI (npm ``@openai/codex``, pinned; its Rust binary comes as the registry's
linux-x64 package) against the gateway's Responses API: ``codex exec`` with the gateway as
its ``model_provider`` (``wire_api = "responses"``), in a clean ``HOME``/``CODEX_HOME`` and a
temp workdir, every request but loopback sent to a dead proxy.

* over the echo model, Codex prints the echo of its prompt;
* over the openai provider and the scripted upstream, the model asks for Codex's
  ``exec_command``; Codex runs the command itself, sends its output back (``store: false``:
  the whole conversation again, with the function call and its output), the upstream
  receives that output, and Codex prints the model's final answer;
* an upstream that breaks off mid-answer: the response ends ``response.failed`` and Codex
  fails with the reason instead of printing the partial text as its answer.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from kernel import Kernel
from kernel.settings import AgentSettings, OpenAISettings, Settings
from kernel.testing import running_kernel
from plugins.providers.echo import EchoProvider
from plugins.providers.openai import OpenAIProvider
from tests.fakes.openai_server import Reply, ToolCallScript, fake_openai_server
from tests.node_clients import npm_install
from transports.http.responses import codec as responses_codec

from ._helpers import http_server

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning"),
]

CODEX = "@openai/codex@0.169.0"
AGENT = "Helper"
TOKEN = "codex-test-token"


@pytest.fixture(scope="module")
def codex() -> tuple[str, Path]:
    """Node and Codex's launcher script (npm-installed once into the test cache)."""
    node, modules = npm_install("codex", [CODEX])
    return node, modules / "@openai" / "codex" / "bin" / "codex.js"


def _config(base_url: str) -> str:
    return f"""
model = "{AGENT}"
model_provider = "gateway"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.gateway]
name = "gateway"
base_url = "{base_url}"
wire_api = "responses"
env_key = "GATEWAY_TOKEN"
request_max_retries = 0
stream_max_retries = 0
"""


async def run_codex(
    codex: tuple[str, Path], base_url: str, prompt: str, tmp_path: Path, *, ok: bool = True, resume: bool = False
) -> tuple[str, str]:
    """``codex exec PROMPT`` in a temp workdir; its stdout (the final answer) and stderr.
    ``ok``: whether it must succeed (else: it must fail); ``resume``: continue the last
    session (``codex exec resume --last``) in the same home and workdir."""
    node, launcher = codex
    home, workdir = tmp_path / "home", tmp_path / "work"
    if not resume:
        (home / ".codex").mkdir(parents=True)
        workdir.mkdir()
        (home / ".codex" / "config.toml").write_text(_config(base_url))
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home / ".codex"), "GATEWAY_TOKEN": TOKEN,
        # Anything but loopback goes to a port nobody listens on.
        "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost",
        "RUST_LOG": "error", "NO_COLOR": "1",
    }
    command = [node, str(launcher), "exec", "--skip-git-repo-check", "--color", "never", "-C", str(workdir), *(["resume", "--last"] if resume else []), prompt]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, env=env, cwd=workdir, stdin=None, check=False)
    out, err = done.stdout.decode(), done.stderr.decode()
    if (done.returncode == 0) != ok:
        pytest.fail(f"codex exec ended {done.returncode}:\n{out}\n{err[-4000:]}", pytrace=False)
    return out, err


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The bodies Codex posts to /v1/responses, as the gateway reads them."""
    bodies: list[dict[str, Any]] = []
    decode = responses_codec.decode_request

    def recording(raw: bytes) -> Any:
        bodies.append(json.loads(raw))
        return decode(raw)

    monkeypatch.setattr(responses_codec, "decode_request", recording)
    return bodies


def sealed_text(token: str) -> str:
    """The text inside one of the gateway's sealed reasoning tokens (``gw1.<text>.<tag>``)."""
    prefix, body, _tag = token.split(".")
    assert prefix == "gw1"
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


@asynccontextmanager
async def gateway(provider: Any) -> AsyncIterator[tuple[Kernel, str]]:
    settings = Settings(agents=[AgentSettings(name=AGENT)])
    async with running_kernel(provider, settings=settings) as kernel, http_server(kernel, token=TOKEN) as url:
        yield kernel, f"{url}/v1"


async def test_codex_exec_answers_from_the_echo_model(codex: tuple[str, Path], tmp_path: Path) -> None:
    async with gateway(EchoProvider()) as (_, base_url):
        out, err = await run_codex(codex, base_url, "Say the word pineapple", tmp_path)
    assert out.strip() == "echo: Say the word pineapple", err[-2000:]


async def test_codex_runs_its_exec_command_for_the_model(codex: tuple[str, Path], tmp_path: Path, sent: list[dict[str, Any]]) -> None:
    command = {"cmd": "echo codex-ran-$((6*7)) > proof.txt && cat proof.txt"}
    script = [
        Reply(text="Let me run that.", reasoning="The user wants the proof command.",
              tool_calls=[ToolCallScript(name="exec_command", arguments=json.dumps(command), id="call_exec_1")]),
        Reply(text="The command printed codex-ran-42.", chunks=4),
    ]
    async with fake_openai_server(script) as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-upstream", base_url=upstream.base_url, model="fake-model", timeout_s=20.0, max_retries=0))
        try:
            async with gateway(provider) as (_, base_url):
                out, err = await run_codex(codex, base_url, "Run the proof command.", tmp_path)
        finally:
            await provider.aclose()
    assert out.strip() == "The command printed codex-ran-42.", err[-2000:]
    assert (tmp_path / "work" / "proof.txt").read_text().strip() == "codex-ran-42"  # Codex ran it, in its workdir
    first, second = upstream.requests[0], upstream.requests[-1]
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert "exec_command" in offered and "multi_agent_v1__spawn_agent" in offered and "web_search" not in offered
    assert any(m["role"] == "system" and "Codex" in str(m["content"]) for m in first["messages"])
    assert first["messages"][-1] == {"role": "user", "content": "Run the proof command."}
    calls = [m for m in second["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert [c["function"]["name"] for m in calls for c in m["tool_calls"]] == ["exec_command"]
    assert json.loads(calls[0]["tool_calls"][0]["function"]["arguments"]) == command
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(results) == 1 and results[0]["tool_call_id"] == "call_exec_1" and "codex-ran-42" in results[0]["content"]
    assert len(upstream.requests) == 2
    # What Codex sent back on its second request (store: false): the reasoning item with the
    # gateway's sealed copy, the call, and the command's output.
    assert [body["store"] for body in sent] == [False, False]
    replayed = {item.get("type", "message"): item for item in sent[1]["input"]}
    assert sealed_text(replayed["reasoning"]["encrypted_content"]) == "The user wants the proof command."
    assert (replayed["function_call"]["name"], replayed["function_call"]["call_id"]) == ("exec_command", "call_exec_1")
    assert "codex-ran-42" in json.dumps(replayed["function_call_output"]["output"])


async def test_codex_fails_on_an_answer_cut_short(codex: tuple[str, Path], tmp_path: Path) -> None:
    async with fake_openai_server([Reply.cut(after=3, text="partial answer that will be cut off here", chunks=8)]) as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-upstream", base_url=upstream.base_url, model="fake-model", timeout_s=20.0, max_retries=0))
        try:
            async with gateway(provider) as (_, base_url):
                out, err = await run_codex(codex, base_url, "hi", tmp_path, ok=False)
        finally:
            await provider.aclose()
    assert out.strip() == ""  # no final answer
    assert "stream disconnected before completion" in err and "broke off" in err  # the gateway's reason, from response.failed
    assert len(upstream.requests) == 1  # stream_max_retries = 0


async def test_codex_resumes_a_session_with_its_reasoning(codex: tuple[str, Path], tmp_path: Path) -> None:
    script = [Reply(text="First answer.", reasoning="Thinking about one."), Reply(text="Second answer.", reasoning="Thinking about two.")]
    async with fake_openai_server(script) as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-upstream", base_url=upstream.base_url, model="fake-model", timeout_s=20.0, max_retries=0))
        try:
            async with gateway(provider) as (_, base_url):
                first, first_err = await run_codex(codex, base_url, "one", tmp_path)
                second, second_err = await run_codex(codex, base_url, "two", tmp_path, resume=True)
        finally:
            await provider.aclose()
    assert (first.strip(), second.strip()) == ("First answer.", "Second answer.")
    assert "Thinking about one." in first_err and "Thinking about two." in second_err  # reasoning items, shown by Codex
    # The second turn replayed the first (store: false): the model sees the whole conversation.
    turns = [(msg["role"], msg["content"]) for msg in upstream.requests[1]["messages"] if msg["role"] != "system"]
    assert turns[-3:] == [("user", "one"), ("assistant", "First answer."), ("user", "two")]
