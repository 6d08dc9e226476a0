"""The Anthropic codec on plain values: request plans, errors, tool ids, signatures, and the
answers — every stream event and message validated by the ``anthropic`` SDK's own types;
fuzzed with hypothesis (the request decoder never raises, streams always read as Anthropic's)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel import model as m
from transports.http.anthropic import codec, reply_codec
from transports.http.anthropic.wire import AnthropicError, MessagesRequest

AGENTS = [m.AgentInfo(id="id-1", name="Helper", model="up-model")]
KEY = b"k" * 32
STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)


def plan(body: dict[str, Any]) -> codec.MessagesPlan | AnthropicError:
    body = {"model": "Helper", "max_tokens": 10, **body}
    request = codec.decode_request(json.dumps(body).encode())
    assert isinstance(request, MessagesRequest), request
    return codec.plan_messages(request, AGENTS, context_limit=100, signing_key=KEY)


def refused(body: dict[str, Any]) -> str:
    result = plan(body)
    assert isinstance(result, AnthropicError) and result.status == 400, result
    return result.message


def checked(frames: list[reply_codec.Frame]) -> list[Any]:
    """Each frame as the SDK parses it; its ``event:`` name is its type."""
    parsed = []
    for name, data in frames:
        event = STREAM_EVENT.validate_json(data)
        assert event.type == name
        parsed.append(event)
    return parsed


def test_system_blocks_and_system_turns_make_the_system_prompt() -> None:
    result = plan({
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc=1"}, {"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": [{"type": "text", "text": "B"}]}],
    })
    assert isinstance(result, codec.MessagesPlan)
    assert result.options.system_prompt == "A\n\nB"
    assert result.prompt_parts == (m.TextPart("hi"),) and result.history == ()


def test_user_turn_with_tool_results_then_text() -> None:
    result = plan({
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "x"}, {"type": "tool_use", "id": "gwid_Y2FsbDox", "name": "f", "input": {"a": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "gwid_Y2FsbDox", "content": "r"}, {"type": "text", "text": "and now?"}]},
        ],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}, {"type": "web_search_20250305", "name": "web_search"}],
    })
    assert isinstance(result, codec.MessagesPlan) and not result.continuation
    _, assistant, tool = result.history
    assert assistant.tool_calls == (m.ToolCall(id="call:1", name="f", arguments='{"a":1}'),)
    assert (tool.role, tool.tool_call_id, tool.name, tool.content, tool.outcome) == ("tool", "call:1", "f", "r", "ok")
    assert result.prompt_parts == (m.TextPart("and now?"),)
    assert [t.name for t in result.options.client_tools] == ["f"] and result.hosted_tools == ("web_search",)


def test_only_tool_results_continue_the_run() -> None:
    result = plan({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": [{"type": "text", "text": "bad"}]}]},
    ]})
    assert isinstance(result, codec.MessagesPlan) and result.continuation and result.prompt_parts == ()
    assert result.history[-1].outcome == "error"


def test_images_and_documents() -> None:
    png = base64.b64encode(b"\x89PNG").decode()
    result = plan({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "image", "source": {"type": "url", "url": f"data:image/png;base64,{png}"}},
        {"type": "document", "title": "notes.txt", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}},
        {"type": "text", "text": "look"},
    ]}]})
    assert isinstance(result, codec.MessagesPlan)
    assert result.prompt_parts[:2] == (m.ImagePart(data=b"\x89PNG", mime_type="image/png"),) * 2
    assert result.prompt_parts[2] == m.FilePart(name="notes.txt", data=b"hello", content_type="text/plain")
    assert "does not fetch" in refused({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]})
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": png}}
    assert "text documents only" in refused({"messages": [{"role": "user", "content": [pdf]}]})


def test_refusals() -> None:
    request = codec.decode_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    assert isinstance(request, MessagesRequest)
    missing = codec.plan_messages(request, AGENTS, context_limit=10, signing_key=KEY)
    assert isinstance(missing, AnthropicError) and missing.message == "max_tokens: Field required"
    assert "messages" in refused({"messages": []})
    assert "last turn" in refused({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "prefill"}]})
    assert "role" in refused({"messages": [{"role": "tool", "content": "a"}]})
    assert "temperature" in refused({"messages": [{"role": "user", "content": "a"}], "temperature": 1.5})
    assert "top_p" in refused({"messages": [{"role": "user", "content": "a"}], "top_p": 0})
    assert "stop_sequences" in refused({"messages": [{"role": "user", "content": "a"}], "stop_sequences": ["x", ""]})
    assert "tools.0.name" in refused({"messages": [{"role": "user", "content": "a"}], "tools": [{"name": "bad name", "input_schema": {}}]})
    for raw in (b"", b"[", b'{"model": 1}', b'{"model": "m", "messages": {}}'):
        assert isinstance(codec.decode_request(raw), AnthropicError)


def test_tool_choice_none_offers_no_tools() -> None:
    result = plan({"messages": [{"role": "user", "content": "a"}], "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "none"}})
    assert isinstance(result, codec.MessagesPlan) and result.options.client_tools == ()
    assert result.options.tool_choice == m.ToolChoice(mode="none")


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, None, None),
        ({"type": "any", "disable_parallel_tool_use": True}, m.ToolChoice(mode="required"), False),
        ({"type": "tool", "name": "f"}, m.ToolChoice(mode="tool", name="f"), None),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: m.ToolChoice | None, parallel: bool | None) -> None:
    result = plan({"messages": [{"role": "user", "content": "a"}], "tools": [{"name": "f", "input_schema": {}}], "tool_choice": choice})
    assert isinstance(result, codec.MessagesPlan)
    assert (result.options.tool_choice, result.options.parallel_tool_calls) == (expected, parallel)


def test_tool_choice_and_format_refusals() -> None:
    assert "tool_choice.name" in refused({"messages": [{"role": "user", "content": "a"}], "tool_choice": {"type": "tool"}})
    assert "tool_choice.type" in refused({"messages": [{"role": "user", "content": "a"}], "tool_choice": {"type": "sometimes"}})
    assert "output_config.format" in refused({"messages": [{"role": "user", "content": "a"}], "output_config": {"format": {"type": "xml"}}})


def test_output_format_from_output_config_or_the_beta_field() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for body in ({"output_config": {"effort": "low", "format": {"type": "json_schema", "schema": schema}}}, {"output_format": {"type": "json_schema", "schema": schema}}):
        result = plan({"messages": [{"role": "user", "content": "a"}], **body})
        assert isinstance(result, codec.MessagesPlan)
        assert result.options.output_format == m.OutputFormat(type="json_schema", schema=schema)
    effort_only = plan({"messages": [{"role": "user", "content": "a"}], "output_config": {"effort": "high"}})
    assert isinstance(effort_only, codec.MessagesPlan) and effort_only.options.output_format is None


@pytest.mark.parametrize(
    ("code", "status", "kind", "retry"),
    [
        ("invalid_request", 400, "invalid_request_error", "false"),
        ("unauthorized", 401, "authentication_error", "false"),
        ("forbidden", 403, "permission_error", "false"),
        ("not_found", 404, "not_found_error", "false"),
        ("too_large", 413, "request_too_large", "false"),
        ("rate_limited", 429, "rate_limit_error", "true"),
        ("internal", 500, "api_error", "false"),
        ("provider_error", 502, "api_error", "true"),
        ("upstream_unauthorized", 502, "api_error", "false"),
        ("draining", 529, "overloaded_error", "true"),
        ("timeout", 504, "timeout_error", "true"),
        ("interrupted", 409, "invalid_request_error", "false"),
    ],
)
def test_kernel_errors_in_anthropic_shape(code: str, status: int, kind: str, retry: str) -> None:
    error = codec.from_error_info(m.ErrorInfo(code=code, message="why"))  # type: ignore[arg-type]
    assert (error.status, error.type, error.headers["x-should-retry"]) == (status, kind, retry)
    assert error.body() == {"type": "error", "error": {"type": kind, "message": "why"}}


@given(st.text(max_size=40))
def test_tool_ids_map_both_ways(upstream: str) -> None:
    client = reply_codec.client_tool_id(upstream)
    assert reply_codec.SAFE_ID.match(client) or upstream == ""
    assert reply_codec.upstream_tool_id(client) == upstream


def test_signatures() -> None:
    signature = reply_codec.sign_thinking(KEY, "thought")
    assert reply_codec.check_signature(KEY, "thought", signature) is reply_codec.SignatureCheck.OURS
    assert reply_codec.check_signature(KEY, "edited", signature) is reply_codec.SignatureCheck.FORGED
    assert reply_codec.check_signature(b"other" * 8, "thought", signature) is reply_codec.SignatureCheck.FOREIGN
    assert reply_codec.check_signature(KEY, "thought", "EqQBCkgIAR") is reply_codec.SignatureCheck.FOREIGN


def test_token_estimate() -> None:
    request = codec.decode_count_request(json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 400}]}).encode())
    assert not isinstance(request, AnthropicError)
    assert codec.estimate_tokens(request.system, request.messages, request.tools) == 100 + codec.MESSAGE_TOKENS


def test_model_page() -> None:
    page = codec.model_page(AGENTS, 0, {})
    assert not isinstance(page, AnthropicError)
    assert [x.id for x in page.data] == ["Helper", "up-model"] and page.data[0].created_at == "1970-01-01T00:00:00Z"
    after = codec.model_page(AGENTS, 0, {"after_id": "Helper"})
    assert not isinstance(after, AnthropicError) and [x.id for x in after.data] == ["up-model"] and not after.has_more
    first = codec.model_page(AGENTS, 0, {"limit": "1"})
    assert not isinstance(first, AnthropicError) and first.has_more and first.last_id == "Helper"
    assert isinstance(codec.model_page(AGENTS, 0, {"limit": "0"}), AnthropicError)


IDS = {"session_id": "s", "run_id": "r"}


def finished(**kw: Any) -> m.RunFinished:
    return m.RunFinished(**IDS, **{"text": "", "usage": m.Usage(input_tokens=3, output_tokens=4), **kw})


def test_stream_blocks_signature_and_tool_use() -> None:
    encoder = reply_codec.StreamEncoder(message_id="msg_1", model="Helper", key=KEY, show_thinking=True, input_estimate=9)
    frames = encoder.opening()
    for event in (m.ReasoningDelta(**IDS, text="hm"), m.TextDelta(**IDS, text="Hi"), m.TextDelta(**IDS, text="!")):
        frames += encoder.event(event)
    frames += encoder.closing(finished(text="Hi!", stop_reason="tool_calls", pending_tool_calls=(m.ToolCall(id="c.1", name="f", arguments='{"a": 2}'),)))
    events = checked(frames)
    assert [e.type for e in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop",
    ]
    assert events[0].message.usage.input_tokens == 9
    assert events[3].delta.type == "signature_delta"
    assert reply_codec.check_signature(KEY, "hm", events[3].delta.signature) is reply_codec.SignatureCheck.OURS
    assert events[9].content_block.id == reply_codec.client_tool_id("c.1") and json.loads(events[10].delta.partial_json) == {"a": 2}
    assert events[12].delta.stop_reason == "tool_use" and events[12].usage.output_tokens == 4


def test_message_validates() -> None:
    body = reply_codec.message(
        message_id="msg_1", model="Helper", finished=finished(text="ok"), events=[m.ReasoningDelta(**IDS, text="r")],
        key=KEY, show_thinking=True, input_estimate=1,
    )
    parsed = Message.model_validate_json(msgspec.json.encode(body))
    assert [b.type for b in parsed.content] == ["thinking", "text"] and parsed.stop_reason == "end_turn"


# ---------------------------------------------------------------- fuzz

scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=6)
blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking", "weird"])},
    optional={
        "text": scalars, "id": scalars, "name": scalars, "input": st.dictionaries(st.text(max_size=3), scalars, max_size=2) | scalars,
        "tool_use_id": scalars, "content": scalars | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": scalars}), max_size=2),
        "thinking": scalars, "signature": scalars, "is_error": scalars,
        "source": st.fixed_dictionaries({"type": st.sampled_from(["base64", "url", "text", "content"])}, optional={"data": scalars, "media_type": scalars, "url": scalars}),
    },
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool"]), "content": st.text(max_size=5) | st.lists(blocks, max_size=3)}),
    max_size=4,
)
bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(["Helper", "other", ""]), "messages": messages},
    optional={
        "max_tokens": st.integers(-1, 5), "system": st.text(max_size=4) | st.lists(blocks, max_size=2), "stream": st.booleans(),
        "temperature": st.floats(-1, 3, allow_nan=False), "thinking": st.fixed_dictionaries({"type": st.sampled_from(["enabled", "disabled", "adaptive"])}),
        "tools": st.lists(st.fixed_dictionaries({"name": st.text(max_size=5)}, optional={"input_schema": st.just({"type": "object"}), "type": st.text(max_size=4)}), max_size=2),
        "tool_choice": st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "none", "tool"])}),
    },
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(bodies.map(lambda body: json.dumps(body).encode()) | st.binary(max_size=80))
def test_fuzz_request_codec_never_raises(raw: bytes) -> None:
    request = codec.decode_request(raw)
    if isinstance(request, AnthropicError):
        assert request.status == 400 and request.type == "invalid_request_error"
        return
    result = codec.plan_messages(request, AGENTS, context_limit=10, signing_key=KEY)
    if isinstance(result, AnthropicError):
        assert result.status == 400
        return
    assert result.continuation or result.prompt_parts
    codec.estimate_tokens(request.system, request.messages, request.tools)


run_events = st.one_of(
    st.builds(lambda t: m.TextDelta(**IDS, text=t), st.text(max_size=5)),
    st.builds(lambda t: m.ReasoningDelta(**IDS, text=t), st.text(max_size=5)),
    st.just(m.ToolCallStarted(**IDS, call_id="c", name="add", arguments="{}")),
)
calls = st.lists(st.builds(lambda i, a: m.ToolCall(id=i, name="f", arguments=a), st.text(max_size=6), st.sampled_from(["{}", '{"a":1}', "[1]", "not json"])), max_size=2)


@given(st.lists(run_events, max_size=10), calls, st.booleans())
def test_fuzz_streams_read_as_anthropic(events: list[m.Event], pending: list[m.ToolCall], show: bool) -> None:
    encoder = reply_codec.StreamEncoder(message_id="msg_1", model="Helper", key=KEY, show_thinking=show, input_estimate=1)
    frames = encoder.opening()
    for event in events:
        frames += encoder.event(event)
    frames += encoder.closing(finished(pending_tool_calls=tuple(pending)))
    parsed = checked(frames)
    opened: set[int] = set()
    for event in parsed:  # every block starts before its deltas and stops once
        if event.type == "content_block_start":
            opened.add(event.index)
        elif event.type in ("content_block_delta", "content_block_stop"):
            assert event.index in opened
            if event.type == "content_block_stop":
                opened.discard(event.index)
    assert not opened and parsed[-1].type == "message_stop"


@pytest.mark.parametrize(
    ("kernel_reason", "anthropic_reason"),
    [("end_turn", "end_turn"), ("max_tokens", "max_tokens"), ("refusal", "refusal"), ("tool_iterations", "max_tokens"), ("turn_limit", "max_tokens")],
)
def test_stop_reasons(kernel_reason: str, anthropic_reason: str) -> None:
    assert reply_codec.stop_reason(finished(stop_reason=kernel_reason), ()) == anthropic_reason
    assert reply_codec.stop_reason(finished(stop_reason=kernel_reason), (m.ToolCall(id="c", name="f", arguments="{}"),)) == "tool_use"
