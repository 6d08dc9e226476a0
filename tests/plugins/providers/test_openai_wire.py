"""The ``openai`` provider's reading of an upstream, without I/O: SSE splitting and msgspec decoding."""

from __future__ import annotations

import json
from collections.abc import Mapping

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.model import Usage
from kernel.provider import ReasoningChunk, TextChunk, ToolCallChunk, UsageChunk
from plugins.providers.openai_wire import (
    MAX_EVENT_BYTES,
    SSEData,
    StreamReader,
    UpstreamError,
    answer_chunks,
    decode_completion,
)


def events_of(*pieces: bytes) -> list[bytes]:
    sse = SSEData()
    return [data for piece in pieces for data in sse.feed(piece)]


def chunk(delta: Mapping[str, object] | None = None, finish: str | None = None, **extra: object) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
    return json.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": choices, **extra}).encode()


# ---------------------------------------------------------------- server-sent events


def test_whole_event_pieces_and_the_state_around_them() -> None:
    # One event per piece (the usual upstream write) and the same bytes cut elsewhere agree;
    # a piece that looks whole but continues a held line or a pending event is not taken alone.
    assert events_of(b"data: {}\n\n", b"data: \n\n", b"data: [DONE]\n\n") == [b"{}", b"", b"[DONE]"]
    assert events_of(b"data: x\n", b"data: y\n\n") == [b"x\ny"]
    assert events_of(b"data: {\"a\"", b"data: 1}\n\n") == [b'{"a"data: 1}']
    assert events_of(b"event: e\n\n", b"data:z\n\n") == [b"z"]
    with pytest.raises(ValueError):
        SSEData().feed(b"data: " + b"x" * (MAX_EVENT_BYTES + 1) + b"\n\n")


def test_events_split_on_blank_lines_with_every_line_end() -> None:
    body = b'data: {"a": 1}\n\ndata: {"b": 2}\r\n\r\ndata: {"c": 3}\r\rdata: [DONE]\n\n'
    assert events_of(body) == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}', b"[DONE]"]


def test_event_fields_as_the_spec_reads_them() -> None:
    body = (
        b": a comment\n"
        b"event: message\nid: 7\nretry: 100\n"
        b"data:no-space\n"
        b"data:  two spaces\n"
        b"data\n"
        b"datafield: not data\n"
        b"\n"
        b"\n\n"  # blank lines without data dispatch nothing
        b"event: only-a-name\n\n"
    )
    assert events_of(body) == [b"no-space\n two spaces\n"]


def test_an_event_split_anywhere_is_the_same_event() -> None:
    body = b'data: {"x": "y"}\r\n\r\ndata: second\n\n'
    for cut in range(1, len(body)):
        assert events_of(body[:cut], body[cut:]) == [b'{"x": "y"}', b"second"], cut
    assert events_of(*(bytes([b]) for b in body)) == [b'{"x": "y"}', b"second"]


def test_an_unfinished_event_is_not_handed_out() -> None:
    sse = SSEData()
    assert sse.feed(b"data: half") == []
    assert sse.feed(b" of it\n") == []
    assert sse.feed(b"\n") == [b"half of it"]


def test_an_oversized_event_is_refused() -> None:
    sse = SSEData()
    with pytest.raises(ValueError, match="larger than"):
        for _ in range(MAX_EVENT_BYTES // 65536 + 2):
            sse.feed(b"x" * 65536)  # no line end: one endless line
    with pytest.raises(ValueError, match="larger than"):
        SSEData().feed(b"data: " + b"y" * (MAX_EVENT_BYTES + 1) + b"\n")


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[bytes], bytes, list[int]]:
    payloads = draw(st.lists(st.binary(min_size=1, max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b), max_size=8))
    ends = draw(st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=len(payloads), max_size=len(payloads)))
    body = b"".join(b"data: " + p + end + end for p, end in zip(payloads, ends, strict=True))
    cuts = sorted(draw(st.lists(st.integers(0, max(len(body), 1)), max_size=6)))
    return payloads, body, cuts


@given(streams())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_split_of_any_stream_gives_its_events(case: tuple[list[bytes], bytes, list[int]]) -> None:
    payloads, body, cuts = case
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    got = events_of(*pieces, b"\n")  # a bare CR at the very end needs the next byte to be read
    assert got == payloads


# ---------------------------------------------------------------- decoding


def test_stream_chunks_to_kernel_chunks() -> None:
    reader = StreamReader()
    assert reader.take(chunk({"role": "assistant", "content": ""})) == []
    assert reader.take(chunk({"reasoning_content": "hmm"})) == [ReasoningChunk("hmm")]
    assert reader.take(chunk({"reasoning": "still"})) == [ReasoningChunk("still")]
    assert reader.take(chunk({"content": "Hi", "refusal": None, "audio": {"id": "skipped"}})) == [TextChunk("Hi")]
    calls = {"tool_calls": [{"index": 1, "id": "call_x", "type": "function", "function": {"name": "clock", "arguments": ""}}]}
    assert reader.take(chunk(calls)) == [ToolCallChunk(index=1, id="call_x", name="clock", arguments="")]
    assert reader.take(chunk({"tool_calls": [{"function": {"arguments": "{}"}}]})) == [ToolCallChunk(index=0, arguments="{}")]
    assert reader.finish is None
    assert reader.take(chunk({}, "function_call")) == []
    assert reader.finish == "tool_calls"
    assert reader.take(chunk(None, usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})) == []
    assert reader.take(chunk(None, usage={"prompt_tokens": "6", "completion_tokens": 3.0})) == []  # lenient numbers
    assert reader.closing() == [UsageChunk(Usage(input_tokens=6, output_tokens=3))]  # the last report counts
    assert not reader.done
    assert reader.take(b"[DONE]") == [] and reader.done


def test_unknown_finish_reasons_and_other_choices() -> None:
    reader = StreamReader()
    other = json.dumps({"choices": [{"index": 1, "delta": {"content": "not ours"}, "finish_reason": "stop"}]}).encode()
    assert reader.take(other) == [] and reader.finish is None
    reader.take(chunk({}, "something_new"))
    assert reader.finish == "stop"
    assert StreamReader().closing() == []


@pytest.mark.parametrize(
    "data",
    [
        b'{"choices": [',
        b"not json",
        b'{"choices": [{"delta": {"content": 42}}]}',
        b'{"choices": {"index": 0}}',
        b'{"usage": {"prompt_tokens": "many"}}',
        b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"choices": [{"delta": {"content": "a", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}]}",
        b"[1, 2]",
    ],
    ids=["cut", "text", "content-not-str", "choices-not-list", "tokens-not-number", "deep-unknown", "deep-in-delta", "not-object"],
)
def test_malformed_chunks_are_decode_errors(data: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        StreamReader().take(data)


def test_error_inside_the_stream() -> None:
    with pytest.raises(UpstreamError, match="overloaded, try later"):
        StreamReader().take(b'{"error": {"message": "overloaded, try later", "type": "server_error"}}')
    with pytest.raises(UpstreamError, match="plain text error"):
        StreamReader().take(b'{"error": "plain text error"}')
    with pytest.raises(UpstreamError, match="the upstream reported an error"):
        StreamReader().take(b'{"error": {"code": 500}}')


def test_completion_to_kernel_chunks() -> None:
    body = {
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [
            {"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Let me check.", "reasoning_content": "The user wants the time.",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "clock", "arguments": '{"tz": "UTC"}'}}],
            }},
            {"index": 1, "finish_reason": "stop", "message": {"content": "ignored"}},
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
    }
    chunks, finish = answer_chunks(decode_completion(json.dumps(body).encode()))
    assert chunks == [
        ReasoningChunk("The user wants the time."),
        TextChunk("Let me check."),
        ToolCallChunk(index=0, id="call_1", name="clock", arguments='{"tz": "UTC"}'),
        UsageChunk(Usage(input_tokens=9, output_tokens=4)),
    ]
    assert finish == "tool_calls"
    with pytest.raises(UpstreamError, match="quota"):
        decode_completion(b'{"error": {"message": "quota"}}')
    with pytest.raises(msgspec.DecodeError):
        decode_completion(b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")


@given(st.lists(st.binary(max_size=64), max_size=8))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_bytes_fail_cleanly(pieces: list[bytes]) -> None:
    sse = SSEData()
    reader = StreamReader()
    for piece in pieces:
        for data in sse.feed(piece):
            try:
                reader.take(data)
            except (msgspec.DecodeError, UpstreamError):
                pass


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["choices", "delta", "content", "usage", "error", "index", "tool_calls", "function", "finish_reason"]), inner, max_size=4),
                    max_leaves=20))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_json_shape_fails_cleanly(value: object) -> None:
    data = json.dumps(value).encode()
    try:
        StreamReader().take(data)
    except (msgspec.DecodeError, UpstreamError):
        pass
    try:
        answer_chunks(decode_completion(data))
    except (msgspec.DecodeError, UpstreamError):
        pass
