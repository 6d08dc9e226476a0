"""The transport end to end: a real listener on an ephemeral port, a real TCP client,
a kernel whose model is scripted (kernel.testing), on asyncio and on trio."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from gateway_linechat import LinechatConfig, LinechatTransport

from kernel import Kernel, KernelError, SlashCommand, Tool
from kernel.testing import ScriptedProvider, running_kernel, text_turn, tool_turn
from transports.shared import ConfigError

pytestmark = pytest.mark.anyio


class Client:
    """Reads the dialect the way a script would: line by line, or up to a blank line."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)

    async def send(self, line: str) -> None:
        await self.stream.send(line.encode() + b"\n")

    async def line(self) -> str:
        with anyio.fail_after(5):
            return (await self.reader.receive_until(b"\n", 65536)).decode()

    async def response(self) -> list[str]:
        """The lines of one response, without the blank line that ends it."""
        lines = []
        while (line := await self.line()) != "":
            lines.append(line)
        return lines


@asynccontextmanager
async def linechat(kernel: Kernel, **options: object) -> AsyncIterator[tuple[anyio.abc.TaskGroup, int]]:
    """Serve linechat on a free port until the block ends."""
    async with anyio.create_task_group() as tg:
        address = await tg.start(LinechatTransport().serve, kernel, LinechatConfig(port=0, **options))
        assert address.startswith("tcp://127.0.0.1:")
        yield tg, int(address.rsplit(":", 1)[1])
        tg.cancel_scope.cancel()


@asynccontextmanager
async def connect(port: int, token: str | None = None) -> AsyncIterator[Client]:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        client = Client(stream)
        if token is not None:
            await client.send(f"/token {token}")
        yield client


async def shout(args: dict, ctx: object) -> str:
    return str(args["text"]).upper()


SHOUT = Tool(
    name="shout",
    description="Upper-cases text.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    handler=shout,
    requires_approval=True,
)


async def test_a_prompt_streams_its_answer_then_a_blank_line() -> None:
    async with running_kernel(ScriptedProvider([text_turn("Hello", " world")])) as kernel, linechat(kernel) as (_, port):
        async with connect(port) as client:
            greeting = await client.response()
            assert greeting[0].startswith("linechat: session ")
            await client.send("hi")
            assert await client.response() == ["Hello world"]


async def test_tools_show_as_lines_and_approve_deny_answer_them() -> None:
    script = [tool_turn("shout", '{"text":"hi"}'), text_turn("done"), tool_turn("shout", '{"text":"no"}'), text_turn("ok")]
    async with running_kernel(ScriptedProvider(script), tools=[SHOUT]) as kernel, linechat(kernel) as (_, port):
        async with connect(port) as client:
            await client.response()
            await client.send("shout hi")
            assert await client.line() == '[tool shout({"text":"hi"})]'
            assert await client.line() == '[approve shout({"text":"hi"})? /approve or /deny]'
            await client.send("/approve")
            assert await client.response() == ["[result shout: HI]", "done"]
            await client.send("shout no")
            assert (await client.line()).startswith("[tool shout(")
            assert (await client.line()).startswith("[approve shout(")
            await client.send("/deny not now")
            [result, text] = await client.response()
            assert result.startswith("[result shout denied: ") and "not now" in result
            assert text == "ok"


async def test_stop_interrupts_the_answer() -> None:
    slow = ScriptedProvider([text_turn(*["word "] * 200)], delay_s=0.01)
    async with running_kernel(slow) as kernel, linechat(kernel) as (_, port):
        async with connect(port) as client:
            await client.response()
            await client.send("tell me a long story")
            with anyio.fail_after(5):
                first = (await client.reader.receive()).decode()  # some words, no newline yet
            assert first.startswith("word")
            await client.send("/stop")
            text = first + await client.line()
            assert await client.response() == ["[stopped: interrupted]"]
            assert 0 < text.count("word") < 200


async def test_slash_commands_and_errors() -> None:
    async def ping(ctx: object, args: str) -> str:
        return f"pong {args}"

    commands = [SlashCommand(name="ping", description="Answers pong.", handler=ping)]
    async with running_kernel(commands=commands) as kernel, linechat(kernel) as (_, port):
        async with connect(port) as client:
            await client.response()
            await client.send("/ping 42")
            assert await client.response() == ["pong 42"]
            await client.send("/nope")
            assert await client.response() == ["! Unknown command: /nope. Try /help."]
            # A control line that fails answers one "!" line, without ending a response:
            await client.send("/stop")
            await client.send("/ping")
            assert await client.response() == ["! No active model output to interrupt", "pong "]


async def test_a_token_is_the_first_line_when_one_is_configured() -> None:
    async with running_kernel() as kernel, linechat(kernel, token="s3cret") as (_, port):
        async with connect(port, token="s3cret") as client:
            assert (await client.response())[0].startswith("linechat: session ")
        async with connect(port, token="wrong") as client:
            assert await client.response() == ["! unauthorized: the first line must be /token TOKEN"]
            with pytest.raises(anyio.IncompleteRead):
                await client.line()


async def test_bad_settings_fail_before_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATEWAY_TOKEN", raising=False)
    async with running_kernel() as kernel:
        with pytest.raises(ConfigError, match="refusing to bind to non-loopback host '0.0.0.0' without a token"):
            await LinechatTransport().serve(kernel, LinechatConfig(host="0.0.0.0", port=0))
        with pytest.raises(KernelError, match="Agent not found: Nobody"):
            await LinechatTransport().serve(kernel, LinechatConfig(port=0, agent="Nobody"))


async def test_a_client_that_closes_its_side_still_gets_the_whole_answer() -> None:
    slow = ScriptedProvider([text_turn("one", " two", " three")], delay_s=0.02)
    async with running_kernel(slow) as kernel, linechat(kernel) as (_, port):
        async with connect(port) as client:
            await client.send("count")
            await client.stream.send_eof()  # like printf 'count\n' | nc -N 127.0.0.1 7070
            await client.response()
            assert await client.response() == ["one two three"]
            with pytest.raises(anyio.IncompleteRead):
                await client.line()


async def test_shutdown_says_goodbye_and_closes() -> None:
    async with running_kernel() as kernel, linechat(kernel) as (tg, port):
        async with connect(port) as client:
            await client.response()
            tg.cancel_scope.cancel()
            assert await client.line() == "! gateway shutting down"
            with pytest.raises(anyio.IncompleteRead):
                await client.line()
