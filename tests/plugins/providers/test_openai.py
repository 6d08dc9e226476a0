"""The ``openai`` provider against a real (fake) OpenAI-compatible HTTP server."""

from __future__ import annotations

import base64
import contextlib
import email.utils
import gzip
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing

import anyio
import anyio.lowlevel
import httpx
import msgspec
import pytest

from kernel.model import FilePart, ImagePart, Message, TextPart, ToolCall, Usage
from kernel.provider import (
    Chunk,
    FinishChunk,
    Provider,
    ProviderError,
    ProviderRequest,
    ReasoningChunk,
    ResponseStarted,
    TextChunk,
    ToolCallChunk,
    ToolSpec,
    UsageChunk,
)
from kernel.settings import OpenAISettings, Settings
from plugins.providers import openai as openai_provider
from plugins.providers.openai import OpenAIProvider, parse_retry_after, provider_factory
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    Reply,
    ToolCallScript,
    echo,
    fake_openai_server,
)

pytestmark = [
    # Under trio the SDK leaves internal async generators unfinalized (see ARCHITECTURE.md).
    pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning"),
]

KEY = "sk-test-SECRET-0123456789abcdef"
HELLO = ProviderRequest(model="fake-model", messages=(Message(role="user", content="hi there"),))


@contextlib.asynccontextmanager
async def provider_for(server: FakeOpenAIServer, **overrides: object) -> AsyncIterator[OpenAIProvider]:
    options: dict[str, object] = {"api_key": KEY, "base_url": server.base_url, "timeout_s": 5.0, "max_retries": 0}
    options.update(overrides)
    provider = OpenAIProvider(OpenAISettings(**options))  # type: ignore[arg-type]
    try:
        yield provider
    finally:
        await provider.aclose()


async def stream_of(provider: OpenAIProvider, request: ProviderRequest = HELLO) -> list[Chunk]:
    """Every chunk the provider yields, ``ResponseStarted`` included."""
    with anyio.fail_after(10):
        async with aclosing(provider.stream(request)) as chunks:  # type: ignore[type-var]
            return [c async for c in chunks]


async def collect(provider: OpenAIProvider, request: ProviderRequest = HELLO) -> list[Chunk]:
    """The answer's chunks (a streamed answer's leading ``ResponseStarted`` left out:
    test_the_upstreams_acceptance_comes_first is about it)."""
    chunks = await stream_of(provider, request)
    return chunks[1:] if chunks[:1] == [ResponseStarted()] else chunks


async def fails(provider: OpenAIProvider, request: ProviderRequest = HELLO) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(provider, request)
    assert KEY not in str(info.value) and KEY not in info.value.message
    return info.value


# ---------------------------------------------------------------- streaming


@pytest.mark.anyio
async def test_text_stream_usage_and_finish() -> None:
    async with fake_openai_server([Reply(text="Hello brave new world", chunks=4, usage=(12, 4))]) as server:
        async with provider_for(server) as provider:
            chunks = await collect(provider)
    assert chunks == [
        TextChunk("Hello "),
        TextChunk("brave"),
        TextChunk(" new "),
        TextChunk("world"),
        UsageChunk(Usage(input_tokens=12, output_tokens=4)),
        FinishChunk("stop"),
    ]
    assert "".join(c.text for c in chunks if isinstance(c, TextChunk)) == "Hello brave new world"
    assert server.completed == 1 and server.disconnects == []


@pytest.mark.anyio
async def test_the_upstreams_acceptance_comes_first() -> None:
    """A streamed answer begins with ``ResponseStarted`` once the upstream's 200 and headers
    are in (a dialect can send its own headers then); an answer that comes whole (JSON) has
    nothing to announce; a refusal raises before anything is yielded."""
    completion = {
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "whole"}}],
    }
    script = [Reply(text="Hello world", chunks=2), Reply.raw([json.dumps(completion).encode()], content_type="application/json"),
              Reply.rate_limited(retry_after=3)]
    async with fake_openai_server(script) as server, provider_for(server) as provider:
        streamed = await stream_of(provider)
        assert streamed[0] == ResponseStarted() and streamed.count(ResponseStarted()) == 1
        assert [c for c in streamed if isinstance(c, TextChunk)] == [TextChunk("Hello "), TextChunk("world")]
        whole = await stream_of(provider)
        assert ResponseStarted() not in whole and TextChunk("whole") in whole
        yielded: list[Chunk] = []
        with pytest.raises(ProviderError) as refused:
            async with aclosing(provider.stream(HELLO)) as chunks:  # type: ignore[type-var]
                async for chunk in chunks:
                    yielded.append(chunk)
        assert refused.value.code == "rate_limited" and yielded == []


@pytest.mark.anyio
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_deltas(field: str) -> None:
    reply = Reply(text="42", chunks=1, reasoning="Let me think.", reasoning_chunks=2, reasoning_field=field, usage=(3, 5))
    async with fake_openai_server([reply]) as server:
        async with provider_for(server) as provider:
            chunks = await collect(provider)
    assert chunks == [
        ReasoningChunk("Let me "),
        ReasoningChunk("think."),
        TextChunk("42"),
        UsageChunk(Usage(input_tokens=3, output_tokens=5)),
        FinishChunk("stop"),
    ]


@pytest.mark.anyio
async def test_tool_call_fragments_in_order() -> None:
    calls = [
        ToolCallScript("get_weather", '{"city": "Paris", "unit": "C"}', id="call_a", pieces=3),
        ToolCallScript("clock", '{"tz": "UTC"}', id="call_b", pieces=2),
    ]
    async with fake_openai_server([Reply(text="", tool_calls=calls, usage=(20, 9))]) as server:
        async with provider_for(server) as provider:
            chunks = await collect(provider)
    fragments = [c for c in chunks if isinstance(c, ToolCallChunk)]
    assert fragments == [
        ToolCallChunk(index=0, id="call_a", name="get_weather", arguments=""),
        ToolCallChunk(index=0, arguments='{"city": "'),
        ToolCallChunk(index=0, arguments='Paris", "u'),
        ToolCallChunk(index=0, arguments='nit": "C"}'),
        ToolCallChunk(index=1, id="call_b", name="clock", arguments=""),
        ToolCallChunk(index=1, arguments='{"tz": '),
        ToolCallChunk(index=1, arguments='"UTC"}'),
    ]
    assert chunks[-2:] == [UsageChunk(Usage(input_tokens=20, output_tokens=9)), FinishChunk("tool_calls")]
    joined = {i: "".join(f.arguments for f in fragments if f.index == i) for i in (0, 1)}
    assert json.loads(joined[0]) == {"city": "Paris", "unit": "C"}
    assert json.loads(joined[1]) == {"tz": "UTC"}


@pytest.mark.anyio
async def test_echo_mode() -> None:
    request = ProviderRequest(model="fake-model", messages=(Message(role="user", content="one two three"),))
    async with fake_openai_server([echo()]) as server:
        async with provider_for(server) as provider:
            chunks = await collect(provider, request)
            again = await collect(provider, request)  # the last reply repeats
    assert [c.text for c in chunks if isinstance(c, TextChunk)] == ["one ", "two ", "three"]
    assert chunks[-2:] == [UsageChunk(Usage(input_tokens=3, output_tokens=3)), FinishChunk("stop")]
    assert again == chunks
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_api_openai_coms_framing() -> None:
    """api.openai.com opens a stream with a chunk carrying the role alone, and adds
    ``service_tier``, ``system_fingerprint`` and ``usage: null`` to every chunk (the fake's
    ``openai_framing``, which the benchmarks' upstream uses): the provider yields the same
    answer from it, streamed or whole. The role chunk leaves with the headers, ahead of the
    deltas' schedule: here the deltas are held (a stall before the first), the role is not."""
    request = ProviderRequest(model="fake-model", messages=(Message(role="user", content="one two three"),))
    held = Reply(echo=True, openai_framing=True, stall_s=60, stall_after=0)
    async with fake_openai_server([echo(openai_framing=True)] * 3 + [held]) as server:
        async with provider_for(server) as provider:
            framed = await collect(provider, request)
            whole = await collect(provider, msgspec.structs.replace(request, stream=False))
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "one two"}], "stream": True}
            async with client.stream("POST", "/chat/completions", json={**body, "stream_options": {"include_usage": True}}) as response:
                raw = [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: {")]
            first = ""
            async with client.stream("POST", "/chat/completions", json=body) as response:
                with anyio.fail_after(5):
                    async for line in response.aiter_lines():
                        if line.startswith("data: {"):
                            first = line
                            break
    assert [c.text for c in framed if isinstance(c, TextChunk)] == ["one ", "two ", "three"]
    assert framed[-2:] == [UsageChunk(Usage(input_tokens=3, output_tokens=3)), FinishChunk("stop")]
    assert [c for c in whole if isinstance(c, TextChunk)] == [TextChunk("one two three")]
    role = {"role": "assistant", "content": "", "refusal": None}
    assert json.loads(first[6:])["choices"] == [{"index": 0, "delta": role, "finish_reason": None, "logprobs": None}]
    assert [p["choices"][0]["delta"] for p in raw[:3]] == [role, {"content": "one "}, {"content": "two"}]
    assert all(p["service_tier"] == "default" and p["system_fingerprint"] for p in raw)
    assert [p["usage"] for p in raw[:-1]] == [None] * (len(raw) - 1) and raw[-1]["usage"]["total_tokens"] == 4


def sse(*payloads: object, line_end: bytes = b"\n") -> bytes:
    """Server-sent events of these JSON payloads (bytes as they are), OpenAI style."""
    out = b""
    for payload in payloads:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        out += b"data: " + data + line_end + line_end
    return out


def delta(content: str | None = None, finish: str | None = None, **fields: object) -> dict[str, object]:
    body: dict[str, object] = {} if content is None else {"content": content}
    body.update(fields)
    return {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": body, "finish_reason": finish}]}


@pytest.mark.anyio
async def test_events_split_across_writes_with_crlf_and_comments() -> None:
    body = b": keep-alive\r\n\r\n" + sse(delta("Hel"), delta("lo"), delta(None, "stop"), {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}, b"[DONE]", line_end=b"\r\n")
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]  # every event cut across writes
    async with fake_openai_server([Reply.raw(pieces)]) as server:
        async with provider_for(server) as provider:
            chunks = await collect(provider)
    assert chunks == [TextChunk("Hel"), TextChunk("lo"), UsageChunk(Usage(input_tokens=2, output_tokens=1)), FinishChunk("stop")]


@pytest.mark.anyio
async def test_compressed_stream() -> None:
    body = gzip.compress(sse(delta("zipped "), delta("text"), delta(None, "stop"), b"[DONE]"))
    pieces = [body[: len(body) // 2], body[len(body) // 2 :]]
    async with fake_openai_server([Reply.raw(pieces, headers={"content-encoding": "gzip"})]) as server:
        async with provider_for(server) as provider:
            chunks = await collect(provider)
    assert chunks == [TextChunk("zipped "), TextChunk("text"), FinishChunk("stop")]


@pytest.mark.anyio
async def test_reading_a_buffered_burst_lets_other_tasks_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # A burst already in the socket buffer never makes the reader wait; the provider yields
    # to the event loop once its turn is over (here: a turn of zero, after every event), so
    # the writer of the first token, and every other stream, get the loop in between.
    monkeypatch.setattr(openai_provider, "_TURN_S", 0.0)
    ticks = 0
    ticks_at_chunk: list[int] = []

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.lowlevel.checkpoint()
            ticks += 1

    async with fake_openai_server([Reply(text="z" * 300, chunks=300)]) as server:
        async with provider_for(server) as provider, anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            with anyio.fail_after(10):
                async with aclosing(provider.stream(HELLO)) as chunks:  # type: ignore[type-var]
                    async for chunk in chunks:
                        if isinstance(chunk, TextChunk):
                            ticks_at_chunk.append(ticks)
            tg.cancel_scope.cancel()
    assert len(ticks_at_chunk) == 300
    assert all(later > earlier for earlier, later in itertools.pairwise(ticks_at_chunk))


@pytest.mark.anyio
async def test_usage_reported_twice_counts_once() -> None:
    running = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 1}}
    final = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}
    body = sse(delta("a", usage=None), running, delta("b"), delta(None, "length"), final, b"[DONE]")
    async with fake_openai_server([Reply.raw([body])]) as server:
        async with provider_for(server) as provider:
            chunks = await collect(provider)
    assert chunks == [TextChunk("a"), TextChunk("b"), UsageChunk(Usage(input_tokens=4, output_tokens=2)), FinishChunk("length")]


@pytest.mark.anyio
async def test_error_event_inside_the_stream() -> None:
    error = {"error": {"message": f"the model is overloaded (key {KEY})", "type": "server_error"}}
    async with fake_openai_server([Reply.raw([sse(delta("partial "), error)])]) as server:
        async with provider_for(server) as provider:
            error_seen = await fails(provider)  # the key is masked even here
    assert error_seen.code == "provider_error"
    assert "error in the stream" in error_seen.message and "overloaded" in error_seen.message


@pytest.mark.anyio
async def test_deeply_nested_chunk_is_malformed_and_the_provider_lives_on() -> None:
    nested = b'{"choices": [{"index": 0, "delta": {"content": "x", "junk": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}]}"
    async with fake_openai_server([Reply.raw([sse(delta("ok "), nested)]), Reply(text="fine", chunks=1, usage=(1, 1))]) as server:
        async with provider_for(server) as provider:
            error = await fails(provider)
            assert error.code == "provider_error" and "malformed" in error.message and "nested too deeply" in error.message
            assert await collect(provider) == [TextChunk("fine"), UsageChunk(Usage(input_tokens=1, output_tokens=1)), FinishChunk("stop")]


@pytest.mark.anyio
async def test_an_answer_that_is_no_event_stream() -> None:
    page = b"<html><body>Welcome to nginx!</body></html>"
    async with fake_openai_server([Reply.raw([page], content_type="text/html")]) as server:
        async with provider_for(server) as provider:
            error = await fails(provider)
    assert error.code == "provider_error"
    assert "no server-sent events" in error.message and "text/html" in error.message


@pytest.mark.anyio
async def test_json_answer_to_a_stream_request() -> None:
    completion = {
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Checking.", "reasoning": "Time is asked.",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }
    async with fake_openai_server([Reply.raw([json.dumps(completion).encode()], content_type="application/json")]) as server:
        async with provider_for(server) as provider:
            chunks = await collect(provider)
    assert chunks == [
        ReasoningChunk("Time is asked."),
        TextChunk("Checking."),
        ToolCallChunk(index=0, id="call_1", name="clock", arguments="{}"),
        UsageChunk(Usage(input_tokens=7, output_tokens=3)),
        FinishChunk("tool_calls"),
    ]


@pytest.mark.anyio
async def test_connection_is_reused_after_done() -> None:
    async with fake_openai_server([Reply(text="one two", chunks=2, usage=(1, 2))]) as server:
        async with provider_for(server) as provider:
            for _ in range(3):
                await collect(provider)
    assert len(server.client_ports) == 3 and len(set(server.client_ports)) == 1  # one connection, drained each time
    assert server.disconnects == []


# ---------------------------------------------------------------- the request


@pytest.mark.anyio
async def test_request_body() -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    weather = ToolSpec(
        name="get_weather",
        description="Weather for a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    request = ProviderRequest(
        model="gpt-test",
        messages=(
            Message(role="system", content="Be brief."),
            Message(
                role="user",
                parts=(
                    TextPart("What is in these?"),
                    ImagePart(png, "image/png"),
                    FilePart("notes.txt", b"line one\nline two", "text/plain"),
                ),
            ),
            Message(role="assistant", tool_calls=(ToolCall(id="call_1", name="get_weather", arguments='{"city": "Oslo"}'),)),
            Message(role="tool", tool_call_id="call_1", name="get_weather", content="sunny"),
            Message(role="user", content="Thanks"),
        ),
        tools=(weather,),
        max_tokens=64,
        temperature=0.25,
        top_p=0.9,
        stop=("END", "\n\nUser:"),
    )
    async with fake_openai_server() as server:
        async with provider_for(server) as provider:
            await collect(provider, request)
            await collect(provider, HELLO)
    body = server.requests[0]
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 64
    assert body["temperature"] == 0.25
    assert body["top_p"] == 0.9 and body["stop"] == ["END", "\n\nUser:"]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Weather for a city", "parameters": weather.parameters},
        }
    ]
    system, user, assistant, tool, last = body["messages"]
    assert system == {"role": "system", "content": "Be brief."}
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}},
            {"type": "text", "text": "File: notes.txt (text/plain)\n```\nline one\nline two\n```"},  # kernel.file_text: one rendering
        ],
    }
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}],
    }
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    assert last == {"role": "user", "content": "Thanks"}
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"
    # Optional fields are omitted when unset or empty.
    plain = server.requests[1]
    assert "tools" not in plain and "max_tokens" not in plain and "temperature" not in plain
    assert "top_p" not in plain and "stop" not in plain
    assert plain["messages"] == [{"role": "user", "content": "hi there"}]


# ---------------------------------------------------------------- failures


@pytest.mark.anyio
async def test_rate_limited_with_retry_after() -> None:
    async with fake_openai_server([Reply.rate_limited(retry_after=7)]) as server:
        async with provider_for(server) as provider:
            error = await fails(provider)
    assert error.code == "rate_limited"
    assert error.status == 429
    assert error.retry_after_s == 7.0
    assert "429" in error.message and "Rate limit reached" in error.message
    assert len(server.requests) == 1  # max_retries=0: no retry


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "code"),
    [(500, "provider_error"), (503, "provider_error"), (401, "upstream_unauthorized"), (404, "not_found"), (400, "invalid_request")],
)
async def test_http_errors(status: int, code: str) -> None:
    async with fake_openai_server([Reply.error(status, f"upstream says {status}")]) as server:
        async with provider_for(server) as provider:
            error = await fails(provider)
    assert error.code == code
    assert error.status == status
    assert f"HTTP {status}" in error.message and f"upstream says {status}" in error.message


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["drop", "eof"])
async def test_cut_stream_is_an_error(mode: str) -> None:
    async with fake_openai_server([Reply.cut(after=2, mode=mode)]) as server:  # type: ignore[arg-type]
        async with provider_for(server) as provider:
            error = await fails(provider)
    # A cut is reported as what it is, at once: not as the 5 s timeout ("timeout") it would
    # become if the provider kept waiting on the dead stream.
    assert error.code == "provider_error"
    assert server.completed == 0


@pytest.mark.anyio
async def test_malformed_chunk_is_an_error() -> None:
    async with fake_openai_server([Reply.malformed(after=1)]) as server:
        async with provider_for(server) as provider:
            error = await fails(provider)
    assert error.code == "provider_error"
    assert "malformed" in error.message


@pytest.mark.anyio
@pytest.mark.parametrize("after", [None, 2], ids=["before-headers", "mid-stream"])
async def test_stall_times_out(after: int | None) -> None:
    async with fake_openai_server([Reply.stall(30, after=after)]) as server:
        async with provider_for(server, timeout_s=0.5) as provider:
            error = await fails(provider)  # within collect's 10 s bound: the 30 s stall never ends first
    assert error.code == "timeout"
    assert server.completed == 0


@pytest.mark.anyio
async def test_connection_refused_is_provider_error() -> None:
    async with fake_openai_server() as server:
        url = server.base_url
    provider = OpenAIProvider(OpenAISettings(api_key=KEY, base_url=url, timeout_s=2, max_retries=0))
    try:
        error = await fails(provider)
    finally:
        await provider.aclose()
    assert error.code == "provider_error"


@pytest.mark.anyio
async def test_api_key_never_in_error_messages() -> None:
    # The fake quotes the wrong key in full in its 401 body, as a careless upstream might.
    script = [Reply(), Reply.error(400, f"bad request from key {KEY}"), Reply.error(500, f"{KEY} exploded")]
    async with fake_openai_server(api_key="sk-the-right-key-000000") as server:
        async with provider_for(server) as provider:
            unauthorized = await fails(provider)
            assert "Incorrect API key" in unauthorized.message
            assert unauthorized.code == "upstream_unauthorized" and unauthorized.status == 401
            assert KEY not in repr(provider)
        server.api_key = None
        server.script = script
        server.requests.clear()
        async with provider_for(server) as provider:
            await collect(provider)
            errors = [await fails(provider), await fails(provider)]
    assert [e.code for e in errors] == ["invalid_request", "provider_error"]
    for error in (unauthorized, *errors):
        assert KEY not in error.message and KEY not in str(error) and KEY not in repr(error.args)
        assert "sk-…cdef" in error.message  # masked, still recognisable


# ---------------------------------------------------------------- cancellation


@pytest.mark.anyio
async def test_cancel_closes_upstream_response() -> None:
    slow = Reply(text="x" * 400, chunks=400, delay_s=0.02)
    async with fake_openai_server([slow]) as server:
        async with provider_for(server) as provider:
            seen: list[Chunk] = []
            with anyio.CancelScope() as scope:
                async with aclosing(provider.stream(HELLO)) as chunks:  # type: ignore[type-var]
                    async for chunk in chunks:
                        seen.append(chunk)
                        if len(seen) == 3:
                            scope.cancel()
            cancelled_at = time.monotonic()
            assert scope.cancelled_caught
            gone = await server.wait_for_disconnect(timeout=2.0)
    assert len(seen) == 3
    assert gone.request_index == 0
    assert gone.at - cancelled_at < 1.5
    assert gone.events_sent < 400
    assert server.completed == 0


@pytest.mark.anyio
async def test_break_closes_upstream_response() -> None:
    slow = Reply(text="y" * 400, chunks=400, delay_s=0.02)
    async with fake_openai_server([slow]) as server:
        async with provider_for(server) as provider:
            async with aclosing(provider.stream(HELLO)) as chunks:  # type: ignore[type-var]
                async for _ in chunks:
                    break
            closed_at = time.monotonic()
            gone = await server.wait_for_disconnect(timeout=2.0)
            assert gone.at - closed_at < 1.5
            # The client is still usable afterwards.
            server.script = [Reply(text="ok", chunks=1, usage=(1, 1))]
            assert await collect(provider) == [TextChunk("ok"), UsageChunk(Usage(input_tokens=1, output_tokens=1)), FinishChunk("stop")]


# ---------------------------------------------------------------- construction, the fake itself


def test_factory_and_protocol() -> None:
    settings = Settings()
    settings.provider.openai = OpenAISettings(api_key=KEY, base_url="http://127.0.0.1:9/v1", model="gpt-x")
    provider = provider_factory(settings)
    assert isinstance(provider, Provider)
    assert provider.name == "openai" and provider.model == "gpt-x"
    assert KEY not in repr(provider)
    assert provider_factory(settings.provider.openai).model == "gpt-x"
    assert OpenAIProvider.from_settings(settings).model == "gpt-x"


def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "soon"}) is None
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (parse_retry_after({"retry-after": date}) or 0) <= 31


@pytest.mark.anyio
async def test_fake_server_models_and_non_stream() -> None:
    calls = [ToolCallScript("clock", "{}", id="call_z")]
    async with fake_openai_server([Reply(text="Hi", usage=(2, 1)), Reply(text="", tool_calls=calls)], models=["m1", "m2"]) as server:
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            models = (await client.get("/models")).json()
            first = (await client.post("/chat/completions", json={"model": "m1", "messages": []})).json()
            second = (await client.post("/chat/completions", json={"model": "m1", "messages": []})).json()
    assert [m["id"] for m in models["data"]] == ["m1", "m2"]
    assert first["choices"][0]["message"]["content"] == "Hi"
    assert first["usage"] == {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
    assert second["choices"][0]["finish_reason"] == "tool_calls"
    assert second["choices"][0]["message"]["tool_calls"][0]["id"] == "call_z"


@pytest.mark.anyio
async def test_list_models_asks_the_upstream() -> None:
    async with fake_openai_server(models=("alpha", "beta")) as server:
        async with provider_for(server) as provider:
            assert await provider.list_models() == ["alpha", "beta"]


@pytest.mark.anyio
async def test_a_request_nobody_streams_asks_the_upstream_for_one_answer() -> None:
    calls = [ToolCallScript("clock", '{"tz": "UTC"}', id="call_w")]
    script = [Reply(text="Whole answer", chunks=5, reasoning="Hm.", usage=(4, 2)), Reply(text="", tool_calls=calls)]
    whole = msgspec.structs.replace(HELLO, stream=False)
    async with fake_openai_server(script) as server:
        async with provider_for(server) as provider:
            text = await collect(provider, whole)
            tool = await collect(provider, whole)
    assert all("stream" not in body and "stream_options" not in body for body in server.requests)
    assert text == [ReasoningChunk("Hm."), TextChunk("Whole answer"), UsageChunk(Usage(input_tokens=4, output_tokens=2)), FinishChunk("stop")]
    assert tool[0] == ToolCallChunk(index=0, id="call_w", name="clock", arguments='{"tz": "UTC"}')
    assert tool[-1] == FinishChunk("tool_calls")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (Reply.cut(after=1), "provider_error"),
        (Reply.cut(after=1, mode="eof"), "provider_error"),
        (Reply.malformed(after=1), "provider_error"),
        (Reply.stall(30, after=1), "timeout"),
    ],
    ids=["dropped", "truncated", "malformed", "stalled"],
)
async def test_a_whole_answer_that_breaks_part_way_fails_clearly(fault: Reply, code: str) -> None:
    async with fake_openai_server([fault]) as server:
        async with provider_for(server, timeout_s=0.5) as provider:
            error = await fails(provider, msgspec.structs.replace(HELLO, stream=False))
    assert error.code == code, error
    assert "stream" not in server.requests[0]


@pytest.mark.anyio
async def test_a_whole_answer_is_bounded_like_one_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_provider, "MAX_EVENT_BYTES", 1024)
    pieces = [b'{"choices": [{"index": 0, "message": {"content": "', b"x" * 600, b"x" * 600, b'"}, "finish_reason": "stop"}]}']
    async with fake_openai_server([Reply.raw(pieces, content_type="application/json")]) as server:
        async with provider_for(server) as provider:
            error = await fails(provider, msgspec.structs.replace(HELLO, stream=False))
    assert error.code == "provider_error" and "larger than 1024 bytes" in error.message
