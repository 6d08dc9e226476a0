"""The transport end to end: a real listener on an ephemeral port, a real TCP client,
a kernel whose model is scripted (kernel.testing), on asyncio and on trio."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from gateway_linechat import LinechatConfig, LinechatTransport
from kernel import AgentSettings, Kernel, KernelError, SlashCommand, Tool
from kernel import model as m
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
async def linechat(kernel: Kernel, **options: Any) -> AsyncIterator[tuple[anyio.CancelScope, int]]:
    """Serve linechat on a free port until the block ends; cancelling the scope stops the
    server the way the gateway does (and not the test, which runs beside it)."""
    stop = anyio.CancelScope()

    async def serve(*, task_status: TaskStatus[str]) -> None:
        with stop:
            await LinechatTransport().serve(kernel, LinechatConfig(port=0, **options), task_status=task_status)

    async with anyio.create_task_group() as tg:
        address = await tg.start(serve)
        assert address.startswith("tcp://127.0.0.1:")
        yield stop, int(address.rsplit(":", 1)[1])
        stop.cancel()


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
ECHO = Tool(name="echo", description="Says it back.", parameters={"type": "object"}, handler=shout)  # asks nobody


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
        with pytest.raises(ConfigError, match=r"refusing to bind to non-loopback host '0\.0\.0\.0' without a token"):
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
    async with running_kernel() as kernel, linechat(kernel) as (stop, port):
        async with connect(port) as client:
            await client.response()
            stop.cancel()
            assert await client.line() == "! gateway shutting down"
            with pytest.raises(anyio.IncompleteRead):
                await client.line()


async def test_the_configured_policy_answers_when_the_client_is_not_asked() -> None:
    script = [tool_turn("shout", '{"text":"hi"}'), text_turn("done")]
    allow_shout = m.ApprovalPolicy(mode="reject", allow_tools=("shout",))
    for policy, result in [("approve", "[result shout: HI]"), (allow_shout, "[result shout: HI]"), ("reject", "[result shout denied: ")]:
        async with running_kernel(ScriptedProvider(script), tools=[SHOUT]) as kernel, linechat(kernel, tool_approval=policy) as (_, port):
            async with connect(port) as client:
                await client.response()
                await client.send("shout hi")
                [call, answer, text] = await client.response()  # no question line
                assert call == '[tool shout({"text":"hi"})]' and answer.startswith(result) and text == "done"
                if policy == "reject":
                    assert "this linechat server does not allow it" in answer  # the reason the model is told


async def test_a_tool_that_needs_no_approval_asks_nothing() -> None:
    script = [tool_turn("echo", '{"text":"hi"}'), text_turn("done")]
    async with running_kernel(ScriptedProvider(script), tools=[ECHO]) as kernel, linechat(kernel) as (_, port):
        async with connect(port) as client:
            await client.response()
            await client.send("echo hi")
            assert await client.response() == ['[tool echo({"text":"hi"})]', "[result echo: HI]", "done"]


async def test_approve_and_deny_answer_the_turn_limit_too() -> None:
    script = [tool_turn("echo", '{"text":"x"}'), text_turn("went on")]
    async with running_kernel(ScriptedProvider(script), tools=[ECHO], agent=AgentSettings(max_turns=1)) as kernel, linechat(kernel) as (_, port):
        async with connect(port) as client:
            await client.response()
            await client.send("go")
            assert await client.line() == '[tool echo({"text":"x"})]'
            assert await client.line() == "[result echo: X]"
            assert await client.line() == "[turn limit 1/1: /approve to go on, /deny to stop]"
            await client.send("/approve")
            assert await client.response() == ["went on"]
            await client.send("again")  # the session is still over its limit: asked at once
            assert await client.line() == "[turn limit 1/1: /approve to go on, /deny to stop]"
            await client.send("/deny enough")
            assert await client.response() == ["[stopped: turn_limit]"]


async def test_limits_answer_with_one_line_each() -> None:
    async with running_kernel() as kernel, linechat(kernel, max_message_bytes=16, rate_limit_per_minute=2) as (_, port):
        async with connect(port) as client:
            await client.response()
            await client.send("x" * 40)
            assert await client.response() == ["! line of 40 bytes is over the 16-byte limit; ignored"]
            await client.send("hi")
            assert await client.response() == ["Hello world"]
            await client.send("hi")
            [limited] = await client.response()
            assert limited.startswith("! rate limit reached: wait ")


async def test_connections_from_one_address_are_limited() -> None:
    async with running_kernel() as kernel, linechat(kernel, max_connections_per_ip=1) as (_, port):
        async with connect(port) as first:
            await first.response()
            async with connect(port) as second:
                assert await second.response() == ["! too many connections from your address"]
                with pytest.raises(anyio.IncompleteRead):
                    await second.line()


async def test_the_session_is_closed_when_its_client_leaves() -> None:
    async with running_kernel() as kernel, linechat(kernel) as (_, port):
        async with connect(port) as client:
            session_id = (await client.response())[0].split()[2].rstrip(",")
            assert session_id in kernel.sessions  # probing the kernel's internals: a test may
            await client.stream.send_eof()
            with pytest.raises(anyio.IncompleteRead):
                await client.line()
        assert session_id not in kernel.sessions
        info = await kernel.execute(m.GetSession(session_id=session_id))  # its history stays
        assert isinstance(info, m.SessionOpened) and info.session.state == "idle"
