"""The start-up banner, read from a real ``gateway serve`` the way a new user reads it:
every address it prints is used as printed, and each one answers."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import anyio
import httpx
import pytest
import websockets

from tests.asyncio_clients import in_asyncio
from tests.subprocess_gateway import LineClient, gateway_env, gateway_process, read_banner

pytestmark = pytest.mark.anyio

TOKEN = "banner token/1"
TRANSPORTS = ["http", "openfang", "agent-cli", "agui", "stdio"]


async def test_every_address_in_the_banner_works_as_printed(tmp_path: Path, anyio_backend: str) -> None:
    env = gateway_env(tmp_path / "banner.db")
    args = ["serve", *(a for name in TRANSPORTS for a in ("-t", name)), "--port", "0", "--token", TOKEN, "--backend", anyio_backend]
    async with gateway_process(args, env, cwd=tmp_path) as gateway:
        banner = await read_banner(gateway)
        assert set(banner) == {*TRANSPORTS, "console", "model", "warning", "store", "loop"}
        assert banner["model"] == ["echo (offline)"] and "no LLM is called" in banner["warning"][0]
        assert banner["store"] == [str(tmp_path / "banner.db")]
        token_query = "?token=banner%20token%2F1"

        # http: the API's base URL (the OpenAI SDK's base_url), and the console's, token included.
        api = banner["http"][0].split()[0]
        consoles = [line.split()[0] for line in banner["console"]]
        assert api.endswith("/v1") and all(url.endswith("/" + token_query) for url in consoles) and len(consoles) == 2
        async with httpx.AsyncClient(timeout=10, follow_redirects=True) as http:
            assert (await http.get(f"{api}/status", headers={"authorization": f"Bearer {TOKEN}"})).json()["type"] == "status"
            models = await http.get(f"{api}/models", headers={"authorization": f"Bearer {TOKEN}"})
            assert "General Assistant" in [model["id"] for model in models.json()["data"]]  # the OpenAI base_url
            for url in consoles:  # the http transport's and OpenFang's: the page, after its login
                async with httpx.AsyncClient(timeout=10, follow_redirects=True) as browser_like:
                    page = await browser_like.get(url)
                    assert page.status_code == 200 and "/console/app.js" in page.text and page.url.query == b""

        # openfang: the WebSocket URL with the real agent id; agent-cli: its socket.
        openfang_ws = banner["openfang"][0].split()[0]
        agent_cli_ws = banner["agent-cli"][0].split()[0]
        assert openfang_ws.startswith("ws://") and "/api/agents/" in openfang_ws and openfang_ws.endswith("/ws" + token_query)

        async def sockets() -> tuple[str, str]:
            async with websockets.connect(openfang_ws) as ws:
                await ws.send(json.dumps({"type": "message", "content": "hello openfang"}))
                with anyio.fail_after(10):
                    while (frame := json.loads(await ws.recv()))["type"] != "response":
                        pass
                openfang_answer = frame["content"]
            async with websockets.connect(agent_cli_ws) as ws:
                await ws.send(json.dumps({"request_id": "r1", "input": {"Text": "hello agent-cli"}, "stream": False}))
                with anyio.fail_after(10):
                    reply = json.loads(await ws.recv())
            return openfang_answer, reply["response"]["Text"]

        assert await in_asyncio(sockets) == ("echo: hello openfang", "echo: hello agent-cli")

        # agui: the endpoint a RunAgentInput is posted to.
        agui = banner["agui"][0]
        run = {"threadId": "banner-thread", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "hello agui"}],
               "state": {}, "tools": [], "context": [], "forwardedProps": {}}
        async with httpx.AsyncClient(timeout=10) as http, http.stream("POST", agui, json=run, headers={"authorization": f"Bearer {TOKEN}"}) as answer:
            assert answer.status_code == 200
            body = "".join([chunk async for chunk in answer.aiter_text()])
        assert "RUN_FINISHED" in body and "hello agui" in body

        # stdio: this process on its pipes, and the command line that starts another one.
        first = await gateway.receive()
        assert first["type"] == "session"
        command = banner["stdio"][0].split("start it as: ", 1)[1]
        assert ("--backend trio" in command) == (anyio_backend == "trio")
        argv = shlex.split(command)
        child = await anyio.open_process(argv, env=env, cwd=tmp_path)
        async with child:
            pipe = LineClient(child)
            assert (await pipe.receive(30))["type"] == "session"
            await pipe.send({"type": "prompt", "text": "hello stdio", "request_id": "p1"})
            events = await pipe.until(lambda message: message.get("type") == "run_finished", timeout_s=30)
            assert events[-1]["text"] == "echo: hello stdio"
            await pipe.close_stdin()
            with anyio.fail_after(30):
                assert await child.wait() == 0


async def test_the_acp_line_is_the_command_an_editor_runs(tmp_path: Path) -> None:
    env = gateway_env(tmp_path / "acp.db")
    async with gateway_process(["serve", "-t", "acp"], env, cwd=tmp_path) as gateway:
        banner = await read_banner(gateway)
        await gateway.close_stdin()
    assert set(banner) == {"acp", "model", "warning", "store", "loop"}
    command = banner["acp"][0].split("an editor starts it as: ", 1)[1]
    assert shlex.split(command)[-4:] == ["gateway", "serve", "--transport", "acp"]
    editor = await anyio.open_process(shlex.split(command), env=env, cwd=tmp_path)
    async with editor:
        pipe = LineClient(editor)
        await pipe.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}})
        answer = await pipe.receive(30)
        assert answer["id"] == 0 and answer["result"]["protocolVersion"] == 1
        await pipe.close_stdin()
        with anyio.fail_after(30):
            assert await editor.wait() == 0


async def test_quiet_prints_no_banner(tmp_path: Path) -> None:
    env = gateway_env(tmp_path / "quiet.db")
    async with gateway_process(["serve", "-t", "stdio", "--quiet"], env, cwd=tmp_path) as gateway:
        assert (await gateway.receive(30))["type"] == "session"  # it is serving
        await gateway.close_stdin()
        stderr = gateway.process.stderr
        assert stderr is not None
        logs = b""
        with anyio.fail_after(30):
            try:
                while True:
                    logs += await stderr.receive()
            except anyio.EndOfStream:
                pass
        assert b"transport stdio ready" in logs and b"is ready (Ctrl+C" not in logs and b"  store " not in logs


@pytest.mark.parametrize(("options", "loop"), [(["--loop", "uvloop"], "asyncio on uvloop"), (["--loop", "asyncio"], "asyncio"), (["--backend", "trio"], "trio")])
async def test_the_loop_is_the_one_asked_for_and_the_banner_says_which(tmp_path: Path, options: list[str], loop: str) -> None:
    env = gateway_env(tmp_path / "loop.db")
    async with gateway_process(["serve", "-t", "stdio", *options], env, cwd=tmp_path) as gateway:
        banner = await read_banner(gateway)
        await gateway.send({"type": "prompt", "parts": [{"type": "text", "text": "on which loop"}]})
        while (event := await gateway.receive(30))["type"] != "run_finished":
            pass
        assert event["text"] == "echo: on which loop"
        await gateway.close_stdin()
        with anyio.fail_after(30):
            assert await gateway.process.wait() == 0
    assert banner["loop"] == [loop]


def test_uvloop_needs_the_asyncio_backend() -> None:
    from gateway.cli import event_loop

    assert event_loop("asyncio", "auto") == ("asyncio", {"use_uvloop": True})
    assert event_loop("asyncio", "asyncio") == ("asyncio", {})
    assert event_loop("trio", "auto") == ("trio", {})
    with pytest.raises(SystemExit, match="needs --backend asyncio"):
        event_loop("trio", "uvloop")
