"""The example plugins as a user installs them (``pip install -e docs/examples/...``):
found through the ``gateway`` entry-point group, listed and served by the real CLI,
and broken neighbours reported by name while everything else still runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from gateway.app import load_registry
from tests.subprocess_gateway import ROOT, gateway_env

EXAMPLES = {
    "gateway-linechat": "linechat = gateway_linechat.plugin",
    "gateway-reverse-provider": "reverse = gateway_reverse",
    "gateway-dice-tool": "dice = gateway_dice",
}
READY = re.compile(rb"transport linechat ready on tcp://127\.0\.0\.1:(\d+)")
ROLLED = r"2d6: [1-6], [1-6] \(total \d+\)"

# Three plugins that go wrong in the three ways a plugin can, installed the way pip
# would (a *.dist-info folder with entry_points.txt) in a folder put on PYTHONPATH.
BROKEN = {
    "broken": ("gateway_no_such_module.plugin", None),
    "dupe": (
        "dupe_stdio",
        "from plugins.hookspecs import hookimpl\n\n"
        "class Stdio:\n    name = 'stdio'\n\n"
        "@hookimpl\ndef gateway_register_transports(register):\n    register('stdio', Stdio)\n",
    ),
    "raising": (
        "raising_plugin",
        "from plugins.hookspecs import hookimpl\n\n"
        "@hookimpl\ndef gateway_register_tools(register):\n    raise RuntimeError('no dice today')\n",
    ),
}
PROBLEMS = (
    "gateway: plugin broken (gateway_no_such_module.plugin): failed to load: "
    "ModuleNotFoundError: No module named 'gateway_no_such_module'",
    "gateway: plugin dupe (dupe_stdio): transport 'stdio' is already registered by transports.stdio.plugin; ignored",
    "gateway: plugin raising (raising_plugin): gateway_register_tools raised RuntimeError: no dice today",
)


@pytest.fixture
def broken_plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    for name, (module, source) in BROKEN.items():
        info = folder / f"gateway_test_{name}-0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gateway-test-{name}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[gateway]\n{name} = {module}\n")
        if source:
            (folder / f"{module}.py").write_text(source)
    return folder


def env_for(tmp_path: Path, extra_path: Path | None = None) -> dict[str, str]:
    env = gateway_env(tmp_path / "gateway.db")
    if extra_path is not None:
        env["PYTHONPATH"] = f"{extra_path}{os.pathsep}{env['PYTHONPATH']}"
    return env


def run_gateway(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_the_examples_are_installed_with_their_entry_points() -> None:
    for name, entry_point in EXAMPLES.items():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            pytest.fail(f"{name} is not installed: pip install -e docs/examples/{name}")
        found = [f"{ep.name} = {ep.value}" for ep in dist.entry_points if ep.group == "gateway"]
        assert found == [entry_point]


def test_entry_points_register_the_examples_next_to_the_builtins() -> None:
    from gateway_dice import ROLL, ROLL_DICE
    from gateway_linechat import LinechatTransport
    from gateway_reverse import provider_factory

    registry = load_registry()
    assert registry.transports["linechat"] is LinechatTransport
    assert registry.origins[("transport", "linechat")] == "linechat (gateway_linechat.plugin)"
    assert registry.providers["reverse"] is provider_factory
    assert registry.tools["roll_dice"] is ROLL_DICE and registry.commands["roll"] is ROLL
    ours = [p for p in registry.problems if p.plugin.split(" ")[0] in ("linechat", "reverse", "dice")]
    assert ours == []


def test_gateway_transports_lists_linechat_and_names_broken_plugins(tmp_path: Path, broken_plugins: Path) -> None:
    result = run_gateway("transports", env=env_for(tmp_path, broken_plugins))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    [at] = [i for i, line in enumerate(lines) if line.startswith("linechat\t")]
    assert lines[at + 1].startswith('\t[transports.linechat] {"host": "127.0.0.1", "port": 7070, "token": null')
    assert any(line.startswith("stdio\tJSON lines") for line in lines)  # the built-in kept its name
    for problem in PROBLEMS:
        assert problem in result.stderr.splitlines()


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--set", 'linechat.port="notanint"'], "Expected `int`, got `str` - at `$.port`"),
        (["--set", "linechat.colour=1"], "Object contains unknown field `colour`"),
    ],
)
def test_an_invalid_linechat_section_stops_start_up_naming_it(tmp_path: Path, args: list[str], reason: str) -> None:
    result = run_gateway("serve", "--transport", "linechat", *args, env=env_for(tmp_path))
    assert result.returncode == 2
    assert f"gateway: [transports.linechat]: {reason}" in result.stderr


def test_a_public_address_without_a_token_is_refused(tmp_path: Path) -> None:
    result = run_gateway("serve", "--transport", "linechat", "--host", "0.0.0.0", "--port", "0", env=env_for(tmp_path))
    assert result.returncode == 2
    assert "transport linechat failed to start: ConfigError: refusing to bind to non-loopback host '0.0.0.0' without a token" in result.stderr


class LineClient:
    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)

    async def send(self, line: str) -> None:
        await self.stream.send(line.encode() + b"\n")

    async def line(self) -> str:
        with anyio.fail_after(10):
            return (await self.reader.receive_until(b"\n", 65536)).decode()

    async def response(self) -> list[str]:
        lines = []
        while (line := await self.line()) != "":
            lines.append(line)
        return lines


@asynccontextmanager
async def gateway_serving_linechat(env: dict[str, str], backend: str, *args: str) -> AsyncIterator[tuple[Process, int, str]]:
    """``gateway serve --transport linechat --port 0``; yields the process, its port and its log so far."""
    command = [sys.executable, "-m", "gateway", "serve", "--transport", "linechat", "--port", "0", "--backend", backend, *args]
    process = await anyio.open_process(command, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        assert process.stderr is not None
        log = b""
        with anyio.fail_after(20):
            while (ready := READY.search(log)) is None:
                try:
                    log += await process.stderr.receive()
                except anyio.EndOfStream:
                    pytest.fail(f"the gateway exited before serving linechat:\n{log.decode()}")
        yield process, int(ready[1]), log.decode()
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.move_on_after(5):
            await process.wait()
        await process.aclose()


@pytest.mark.anyio
async def test_gateway_serve_runs_linechat_with_the_dice_plugin(tmp_path: Path, broken_plugins: Path, anyio_backend: str) -> None:
    async with gateway_serving_linechat(env_for(tmp_path, broken_plugins), anyio_backend) as (process, port, log):
        for problem in PROBLEMS:  # reported at start-up; everything else still runs
            assert problem in log
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            client = LineClient(stream)
            assert (await client.response())[0].startswith("linechat: session ")
            await client.send("hello")
            assert await client.response() == ["echo: hello"]
            await client.send('//tool roll_dice {"count": 2, "sides": 6}')  # the echo model calls the tool
            call, result, answer = await client.response()
            assert call == '[tool roll_dice({"count": 2, "sides": 6})]'
            assert re.fullmatch(rf"\[result roll_dice: {ROLLED}\]", result)
            assert re.fullmatch(rf"echo: tool roll_dice returned: {ROLLED}", answer)
            await client.send("/roll 2d6")
            [rolled] = await client.response()
            assert re.fullmatch(ROLLED, rolled)
            process.send_signal(signal.SIGTERM)
            assert await client.line() == "! gateway shutting down"
            with pytest.raises(anyio.IncompleteRead):
                await client.line()
        with anyio.fail_after(10):
            assert await process.wait() == 0


@pytest.mark.anyio
async def test_gateway_serve_answers_with_the_reverse_provider(tmp_path: Path, anyio_backend: str) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[provider]\ndefault = "reverse"\n')
    async with gateway_serving_linechat(env_for(tmp_path), anyio_backend, "--config", str(config)) as (_, port, _):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            client = LineClient(stream)
            assert (await client.response())[0].endswith("agent General Assistant (reverse-1).")
            await client.send("stressed desserts")
            assert await client.response() == ["stressed desserts"[::-1]]
