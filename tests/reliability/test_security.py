"""Security: exposure needs a token, tokens guard every entry point, foreign origins are
refused, the file tools stay in their workspace, and API keys never leave the process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from kernel.settings import Settings
from kernel.testing import running_kernel
from plugins.commands.builtin import BUILTIN_COMMANDS
from plugins.providers.echo import EchoProvider
from plugins.tools.builtin import BUILTIN_TOOLS
from tests.fakes.openai_server import fake_openai_server
from tests.reliability._support import (
    RawWebSocket,
    frames,
    gateway_child,
    live_gateway,
    stdio_pipes,
    transport_config,
)
from tests.subprocess_gateway import gateway_env
from transports.http.server import HttpApp
from transports.openfang.server import build_app

pytestmark = pytest.mark.anyio

NETWORK = ["openfang", "agent-cli", "http"]
WEBSOCKETS = ["openfang", "agent-cli"]
TOKEN = "s3cret-token-for-tests"


# ------------------------------------------------------------------ exposure


@pytest.mark.parametrize("transport", NETWORK)
def test_an_off_loopback_bind_without_a_token_does_not_start(transport: str, tmp_path: Path) -> None:
    env = gateway_env(tmp_path / "g.db")
    section = transport.replace("-", "_")
    args = ["serve", "-t", transport, "--set", f'{section}.host="0.0.0.0"', "--set", f"{section}.port=0"]
    done = subprocess.run([sys.executable, "-m", "gateway", *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "refusing to bind to non-loopback host '0.0.0.0' without a token" in done.stderr, done.stderr
    assert "ready on" not in done.stderr


# ------------------------------------------------------------------ tokens


def entry_points(name: str, kernel: Any) -> list[tuple[str, str, bool]]:
    """Every HTTP route of a dialect, from its own routers: (method, path, needs a token)."""
    if name == "openfang":
        routers = [build_app(kernel, transport_config("openfang"))]
    else:
        app = HttpApp(kernel, transport_config("http"))
        routers = [app.native, app.openai, app.anthropic]
    agent = kernel.settings.agents[0].agent_id()
    out = []
    for router in routers:
        for route in router._http:
            path = route.pattern.replace("{id}", agent) if name == "openfang" else route.pattern
            path = re.sub(r"\{[^}]+\}", "no-such-thing", path)
            for method in sorted(route.methods):
                out.append((method, path, route.auth))
    return out


def refused(name: str, path: str, response: httpx.Response) -> bool:
    """A 401 in the dialect's own error shape."""
    if response.status_code != 401:
        return False
    body = response.json()
    if name == "openfang":
        return body == {"error": "Missing or invalid token"}
    if path.startswith("/v1/messages"):  # Anthropic's (its /v1/models, asked without anthropic-version, is OpenAI's)
        return body["type"] == "error" and body["error"]["type"] == "authentication_error"
    if path.startswith(("/v1/chat", "/v1/models", "/v1/responses")):  # the OpenAI dialects
        return body["error"]["code"] == "invalid_api_key" and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]["code"] == "unauthorized"


async def answer(client: httpx.AsyncClient, method: str, path: str, **options: Any) -> httpx.Response:
    """The response to one request; a live event stream (logs, comms) is closed after its
    head, since it never ends by itself."""
    async with client.stream(method, path, **options) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aread()
    return response


#: Routes open without a token, whoever asks: health and readiness probes, OpenFang's
#: logo, and the public agent card of its A2A routes (A2A clients read it first).
OPEN_ROUTES = {"/health", "/api/health", "/livez", "/readyz", "/logo.png", "/.well-known/agent.json"}


async def test_every_entry_point_checks_the_token() -> None:
    configs = {name.replace("-", "_"): {"token": TOKEN} for name in NETWORK}
    async with live_gateway(NETWORK, EchoProvider(), **configs) as live:
        for name in ("openfang", "http"):
            routes = entry_points(name, live.kernel)
            assert len(routes) > 15
            async with httpx.AsyncClient(base_url=live.urls[name], timeout=10) as client:
                for method, path, needs_token in routes:
                    client.cookies.clear()  # no login cookie (the console's ``/?token=`` sets one) carried over
                    body = {"message": "hi"} if method in ("POST", "PATCH") else None
                    missing = await answer(client, method, path, json=body)
                    wrong = await answer(client, method, path, json=body, headers={"authorization": "Bearer not-it"})
                    bearer = await answer(client, method, path, json=body, headers={"authorization": f"Bearer {TOKEN}"})
                    query = await answer(client, method, path, json=body, params={"token": TOKEN})
                    if needs_token:
                        assert refused(name, path, missing) and refused(name, path, wrong), (method, path, missing.text)
                    elif path == "/api/auth/check":  # OpenFang's dashboard asks it before it has a key: it tells only that
                        assert missing.json() == wrong.json() == {"authenticated": False, "mode": "none"}
                    elif path == "/":  # the console's page checks the token itself: its login page (401) instead
                        assert missing.status_code == wrong.status_code == 401 and missing.headers["content-type"].startswith("text/html")
                        assert "/console/app.js" not in missing.text + wrong.text
                    elif path.startswith("/console/"):  # the page's scripts and styles, the same for everyone
                        assert missing.status_code == 404  # (no such file)
                    else:
                        assert path in OPEN_ROUTES and missing.status_code == 200, (method, path, missing.status_code)
                    assert bearer.status_code != 401 and query.status_code != 401, (method, path)

        def upgrades() -> dict[str, list[int | None]]:
            out: dict[str, list[int | None]] = {}
            for name in WEBSOCKETS:
                statuses = []
                for query, headers in (("", {}), ("?token=nope", {}), (f"?token={TOKEN}", {}), ("", {"authorization": f"Bearer {TOKEN}"})):
                    client = RawWebSocket(live.ws(name, query), headers=headers)
                    statuses.append(client.status)
                    client.close()
                out[name] = statuses
            return out

        statuses = await anyio.to_thread.run_sync(upgrades)
        assert statuses == {name: [401, 401, 101, 101] for name in WEBSOCKETS}


async def test_cross_origin_websockets_and_requests_are_refused() -> None:
    async with live_gateway(NETWORK, EchoProvider()) as live:
        async with httpx.AsyncClient(base_url=live.urls["http"], timeout=10) as client:
            for path in ("/v1/agents", "/v1/models"):  # the http API has no sockets: any request with a foreign Origin
                assert (await client.get(path, headers={"origin": "https://evil.example"})).status_code == 403
                assert (await client.get(path)).status_code == 200

        def upgrades() -> dict[str, list[int | None]]:
            out: dict[str, list[int | None]] = {}
            for name in WEBSOCKETS:
                statuses = []
                for origin in ("https://evil.example", "http://localhost.evil.example", "null", "http://localhost:5173", None):
                    client = RawWebSocket(live.ws(name), headers={"origin": origin} if origin else {})
                    statuses.append(client.status)
                    client.close()
                out[name] = statuses
            return out

        statuses = await anyio.to_thread.run_sync(upgrades)
    assert statuses == {name: [403, 403, 403, 101, 101] for name in WEBSOCKETS}


# ------------------------------------------------------------------ file tools


async def test_file_tools_never_leave_the_workspace(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOPSECRET")
    (workspace / "inside.txt").write_text("fine")
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / "up").symlink_to(outside)
    (workspace / "dangling").symlink_to(outside / "created-through-a-link.txt")
    settings = Settings()
    settings.tools.workspace = str(workspace)
    attempts = [
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": str(outside / "secret.txt")}),
        ("read_file", {"path": "link.txt"}),
        ("read_file", {"path": "up/secret.txt"}),
        ("read_file", {"path": "inside.txt/../../outside/secret.txt"}),
        ("list_directory", {"path": ".."}),
        ("list_directory", {"path": "up"}),
        ("write_file", {"path": "../outside/evil.txt", "content": "x"}),
        ("write_file", {"path": str(outside / "evil.txt"), "content": "x"}),
        ("write_file", {"path": "up/evil.txt", "content": "x"}),
        ("write_file", {"path": "dangling", "content": "x"}),
    ]
    kernel_cm = running_kernel(EchoProvider(), settings=settings, tools=BUILTIN_TOOLS, commands=BUILTIN_COMMANDS)
    async with kernel_cm as kernel, stdio_pipes(kernel, session_id="files") as pipes:
        for n, (tool, args) in enumerate([*attempts, ("read_file", {"path": "inside.txt"})]):
            rid = f"t{n}"
            start = len(pipes.reader.lines)
            pipes.send({"type": "prompt", "text": f"/tool {tool} {json.dumps(args)}", "request_id": rid})
            while True:  # write_file asks first: say yes, the workspace must still hold
                lines = await pipes.reader.until(
                    lambda x, rid=rid: x.get("request_id") == rid and x["type"] in ("run_finished", "run_failed", "tool_approval_requested"),
                    start=start,
                )
                asked = [x for x in lines[start:] if x["type"] == "tool_approval_requested"]
                if not asked or any(x["type"] == "run_finished" for x in lines[start:] if x.get("request_id") == rid):
                    break
                start = len(lines)
                pipes.send({"type": "resolve_tool_approval", "call_id": asked[0]["call_id"], "approved": True, "request_id": f"a{n}"})
            result = next(x for x in pipes.reader.lines if x.get("request_id") == rid and x["type"] == "tool_result")
            if n < len(attempts):
                assert result.get("is_error") and "outside the workspace" in result["result"], (tool, args, result)
            else:
                assert not result.get("is_error") and result["result"] == "fine"
    everything = json.dumps(pipes.reader.lines)
    assert "TOPSECRET" not in everything and "secret.txt\\n" not in everything
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


# ------------------------------------------------------------------ API keys


async def test_the_api_key_never_appears_in_any_answer_or_log_line(tmp_path: Path, anyio_backend: str) -> None:
    key = f"sk-leak-{uuid.uuid4().hex}{uuid.uuid4().hex}"
    secret_part = key[len("sk-leak-") :]
    config = tmp_path / "gateway.toml"
    config.write_text('log_level = "debug"\n[provider.openai]\nmax_retries = 0\ntimeout_s = 5.0\n')
    seen: list[str] = []
    # The upstream expects another key: it answers 401 quoting the key it got, in full.
    async with fake_openai_server(api_key="sk-the-one-upstream-wants") as upstream:
        env = gateway_env(tmp_path / "g.db", OPENAI_API_KEY=key, OPENAI_BASE_URL=upstream.base_url)
        args = [
            "serve", "--backend", anyio_backend, "--config", str(config), "-t", "stdio", "-t", "openfang", "-t", "agent-cli",
            "-t", "http", "--set", "openfang.port=0", "--set", "agent_cli.port=0", "--set", "http.port=0",
            "--set", 'stdio.session_id="keys"',
        ]
        async with gateway_child(args, env, cwd=tmp_path) as child:
            await child.wait_ready(["openfang", "agent-cli", "http"])
            for rid, command in enumerate([
                {"type": "get_settings"},
                {"type": "update_settings", "changes": {"provider": {"openai": {"model": "fake-model"}}}},
                {"type": "run_command", "name": "config"},
                {"type": "run_command", "name": "status"},
                {"type": "run_command", "name": "model"},
                {"type": "get_status"},
                {"type": "list_agents"},
                {"type": "prompt", "text": "does the key leak?"},
            ]):
                await child.send_line({**command, "request_id": f"k{rid}"})
            await child.until_line(lambda x: x.get("type") == "run_failed", timeout_s=20)
            assert (await child.until_line(lambda x: x.get("type") == "run_failed"))["error"]["code"] == "upstream_unauthorized"
            async with httpx.AsyncClient(base_url=child.urls["openfang"], timeout=10) as client:
                agent = (await client.get("/api/agents")).json()[0]["id"]
                for path in ("/api/status", "/api/agents", f"/api/agents/{agent}", "/api/version", "/api/commands"):
                    seen.append((await client.get(path)).text)
                seen.append((await client.post(f"/api/agents/{agent}/message", json={"message": "and over REST?"})).text)
            async with httpx.AsyncClient(base_url=child.urls["http"], timeout=10) as client:
                for path in ("/v1/settings", "/v1/status", "/v1/agents", "/v1/models", "/v1/commands"):
                    seen.append((await client.get(path)).text)
                seen.append((await client.patch("/v1/settings", json={"provider": {"openai": {"api_key": "sk-…" + key[-4:]}}})).text)
                seen.append((await client.get("/v1/settings")).text)
                await client.post("/v1/sessions", json={"session_id": "keys-http"})
                seen.append((await client.post("/v1/sessions/keys-http/prompt", json={"text": "http?"}, headers={"accept": "application/json"})).text)
                seen.append((await client.post("/v1/sessions/keys-http/prompt", json={"text": "http sse?"})).text)
                seen.append((await client.post("/v1/sessions/keys-http/commands", json={"command": "/config"})).text)
                chat = {"model": "General Assistant", "messages": [{"role": "user", "content": "openai?"}]}
                seen.append((await client.post("/v1/chat/completions", json=chat)).text)
                seen.append((await client.post("/v1/chat/completions", json={**chat, "stream": True})).text)

            def sockets() -> list[str]:
                out = []
                openfang = RawWebSocket(child.urls["openfang"].replace("http", "ws") + f"/api/agents/{agent}/ws")
                for text in ("/config", "/status", "/model", "leak over the socket?"):
                    openfang.send_text(json.dumps({"type": "message", "content": text}) if not text.startswith("/") else json.dumps({"type": "command", "command": text[1:]}))
                openfang.read_until(lambda t: sum(f["type"] in ("command_result", "error") for f in frames(t)) >= 4)
                out += openfang.texts
                openfang.close()
                cli = RawWebSocket(child.urls["agent-cli"].replace("http", "ws") + "/")
                for n, request in enumerate([
                    {"Instruction": {"command": "config", "parameters": ""}},
                    {"Instruction": {"command": "status", "parameters": ""}},
                    "GetCommands",
                    {"Text": "leak over agent-cli?"},
                ]):
                    cli.send_text(json.dumps({"request_id": f"c{n}", "input": request}))
                cli.read_until(lambda t: sum(1 for f in frames(t) if f["response"].get("Text") is not None or f["error"]) >= 4)
                out += cli.texts
                cli.close()
                return out

            seen += await anyio.to_thread.run_sync(sockets)
            child.process.terminate()
            with anyio.fail_after(15):
                assert await child.process.wait() == 0
            await anyio.sleep(0.1)
    captured = bytes(child.stderr).decode(errors="replace") + json.dumps(child.lines) + "".join(seen)
    assert "unauthorized" in captured.lower() or "401" in captured  # the failure itself is reported
    for needle in (key, secret_part, secret_part[:16], secret_part[-16:]):
        assert needle not in captured, f"the API key leaked: {needle!r}"
    assert "sk-…" + key[-4:] in captured  # the masked form is what shows
    # HTTP client libraries log requests at debug level: they stay quiet even then.
    assert not re.search(r"(DEBUG|INFO) (httpx|httpcore|openai)", captured)
