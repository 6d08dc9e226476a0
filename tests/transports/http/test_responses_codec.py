"""The Responses codec on plain values: request plans, the event builder (every event it
emits validated by the ``openai`` SDK's own types), the stored-response map; fuzzed
with hypothesis (it never raises, and its streams always read as OpenAI's)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent

from kernel import model as m
from transports.http.openai.wire import OpenAIError
from transports.http.responses import codec
from transports.http.responses import wire as w
from transports.http.responses.stored import ResponseStore, StoredResponse

AGENTS = [m.AgentInfo(id="id-1", name="Helper"), m.AgentInfo(id="id-2", name="Coder")]
STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


def plan(body: dict[str, Any], **kw: Any) -> codec.ResponsePlan | OpenAIError:
    request = codec.decode_request(json.dumps(body).encode())
    assert isinstance(request, w.ResponsesRequest), request
    return codec.plan_response(request, AGENTS, context_limit=100, **kw)


def builder(*client_tools: str) -> codec.ResponseBuilder:
    echo = codec.Echo(tools=tuple(w.FunctionToolOut(name=n, description=None, parameters={"type": "object"}, strict=True) for n in client_tools))
    return codec.ResponseBuilder(response_id="resp_1", created_at=1, model="Helper", echo=echo, client_tools=client_tools, conversation_id="s1")


def checked(frames: list[codec.Frame]) -> list[Any]:
    """Each frame as the SDK parses it; its SSE name is its type."""
    events = []
    for name, data in frames:
        event = STREAM_EVENT.validate_python(json.loads(data))
        assert event.type == name
        events.append(event)
    return events


RUN = {"session_id": "s1", "run_id": "r1", "request_id": "resp_1"}


def test_plan_maps_items_to_history_and_prompt() -> None:
    image = "data:image/png;base64," + base64.b64encode(b"png").decode()
    result = plan({
        "model": "Coder", "instructions": "Be brief.", "max_output_tokens": 9, "temperature": 0.2,
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
        "input": [
            {"role": "system", "content": "Stay kind."},
            {"role": "user", "content": "find x"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'},
            {"type": "function_call", "call_id": "c2", "name": "lookup"},
            {"type": "function_call_output", "call_id": "c1", "output": "x=1"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "none"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": image}]},
        ],
    })
    assert isinstance(result, codec.ResponsePlan)
    assert (result.agent_id, result.agent_named, result.response_model, result.continuation) == ("id-2", True, "Coder", False)
    assert result.prompt_parts == (m.TextPart("see"), m.ImagePart(data=b"png", mime_type="image/png"))
    calls = (m.ToolCall(id="c1", name="lookup", arguments='{"q": "x"}'), m.ToolCall(id="c2", name="lookup", arguments="{}"))
    assert result.history == (
        m.Message(role="user", content="find x"),
        m.Message(role="assistant", content="Looking.", tool_calls=calls),
        m.Message(role="tool", content="x=1", tool_call_id="c1", name="lookup"),
        m.Message(role="tool", content="none", tool_call_id="c2", name="lookup"),
    )
    options = result.options
    assert (options.system_prompt, options.max_tokens, options.temperature, options.model) == ("Be brief.\n\nStay kind.", 9, 0.2, None)
    assert [tool.name for tool in options.client_tools] == ["lookup"] and options.use_tools
    command = codec.run_command(result, "s1", "resp_1")
    assert isinstance(command, m.Prompt) and command.request_id == "resp_1" and command.options is options


def test_plan_continuation_passthrough_model_and_tool_choice_none() -> None:
    result = plan(
        {"model": "gpt-x", "tool_choice": "none", "tools": [{"type": "function", "name": "f"}],
         "input": [{"type": "function_call_output", "call_id": "c9", "output": "done"}]},
        known_calls={"c9": "f"},
    )
    assert isinstance(result, codec.ResponsePlan)
    assert result.continuation and result.history == (m.Message(role="tool", content="done", tool_call_id="c9", name="f"),)
    assert (result.agent_id, result.agent_named, result.options.model) == ("id-1", False, "gpt-x")
    assert result.options.client_tools == () and not result.options.use_tools  # "none": no tool at all
    assert isinstance(codec.run_command(result, "s", "resp_2"), m.Continue)
    stateless = plan({"input": "hi", "store": False, "conversation": {"id": "sess"}})
    assert isinstance(stateless, codec.ResponsePlan) and not stateless.store and stateless.conversation_id == "sess" and not stateless.agent_named


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": []}, "input"),
        ({"input": "  "}, "input"),
        ({"input": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}, "input"),
        ({"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "data:,x"}]}, {"role": "user", "content": "a"}]}, "input[0].content"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}, "input[0].content[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input[0].content[0].type"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file", "file_data": "data:text/plain,x"}]}]}, "input[0].output"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "https://x/a.png"}]}]}, "input[0].output[0]"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0]"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools[0]"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt"),
    ],
)
def test_plan_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    result = plan(body)
    assert isinstance(result, OpenAIError) and result.status == 400 and result.param == param, result


def test_decode_errors() -> None:
    for raw in (b"", b"{", b'{"input": 3}', b'{"reasoning": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}"):
        result = codec.decode_request(raw)
        assert isinstance(result, OpenAIError) and result.status == 400
    deep = codec.decode_request(b'{"reasoning": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}")
    assert isinstance(deep, OpenAIError) and "too deeply" in deep.message


def test_builder_streams_reasoning_text_and_client_calls_in_order() -> None:
    b = builder("lookup")
    frames = b.opening()
    assert not b.shows(m.ToolCallStarted(**RUN, call_id="t", name="add", arguments="{}"))  # the agent's own tool: not output
    for event in [
        m.RunStarted(**RUN), m.ReasoningDelta(**RUN, text="hmm"), m.TextDelta(**RUN, text="Let me "), m.TextDelta(**RUN, text="look."),
        m.ToolCallStarted(**RUN, call_id="t", name="add", arguments="{}"), m.ToolResult(**RUN, call_id="t", name="add", result="3"),
        m.ToolCallStarted(**RUN, call_id="c1", name="lookup", arguments='{"q": 1}', category="client"),
    ]:
        frames += b.feed(event)
    end = m.RunFinished(**RUN, text="Let me look.", usage=m.Usage(input_tokens=5, output_tokens=6), stop_reason="tool_calls",
                        pending_tool_calls=(m.ToolCall(id="c1", name="lookup", arguments='{"q": 1}'),))
    frames += b.finish(end, completed_at=2)
    events = checked(frames)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]
    final = Response.model_validate(json.loads(codec.encode(b.final)))  # type: ignore[arg-type]
    assert final.output_text == "Let me look." and final.status == "completed" and final.completed_at == 2
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.usage is not None and final.usage.total_tokens == 11
    assert final.conversation is not None and final.conversation.id == "s1"
    assert b.calls == {"c1": "lookup"}


INTERRUPTED = {"text": "", "interrupted": True, "stop_reason": "interrupted"}


@pytest.mark.parametrize(
    ("end", "left", "status", "last", "reason", "code"),
    [
        (m.RunFinished(**RUN, text="", stop_reason="max_tokens"), False, "incomplete", "response.incomplete", "max_output_tokens", None),
        (m.RunFinished(**RUN, text="", stop_reason="refusal"), False, "incomplete", "response.incomplete", "content_filter", None),
        (m.RunFinished(**RUN, text="", stop_reason="turn_limit"), False, "incomplete", "response.incomplete", None, None),
        # An interrupt while the client reads (someone's Interrupt command, a drain, a
        # timeout) is a failure it sees; only the client's own leaving is silent.
        (m.RunFinished(**RUN, **INTERRUPTED), False, "failed", "response.failed", None, "server_error"),
        (m.RunFinished(**RUN, **INTERRUPTED, interrupt_cause="drain"), False, "failed", "response.failed", None, "server_error"),
        (m.RunFinished(**RUN, **INTERRUPTED, interrupt_cause="timeout"), True, "failed", "response.failed", None, "server_error"),
        (m.RunFinished(**RUN, **INTERRUPTED, interrupt_cause="client"), True, "cancelled", "response.incomplete", None, None),
        (m.RunFailed(**RUN, error=m.ErrorInfo(code="rate_limited", message="slow")), False, "failed", "response.failed", None, "rate_limit_exceeded"),
    ],
)
def test_run_ends_map_to_statuses(end: m.RunFinished | m.RunFailed, left: bool, status: str, last: str, reason: str | None, code: str | None) -> None:
    b = builder()
    frames = b.feed(m.TextDelta(**RUN, text="part"))
    events = checked([*b.opening(), *frames, *b.finish(end, completed_at=3, client_left=left)])
    assert events[-1].type == last and events[-1].response.status == status
    details = events[-1].response.incomplete_details
    assert (details.reason if details else None) == reason
    assert events[-2].type == "response.output_item.done" and events[-2].item.status == ("completed" if status == "completed" else "incomplete")
    error = events[-1].response.error
    assert (error.code if error else None) == code
    if error is not None:
        expected = m.run_end_error(end)
        assert expected is not None and error.message == expected.message  # the reason, as the kernel gives it
    assert status != "completed" or m.run_end_error(end) is None


def test_history_until_cuts_at_the_response() -> None:
    messages = [m.Message(role="user", content=str(i), created_at=float(i)) for i in range(5)]
    assert codec.history_until(messages, 2.0) == tuple(messages[:3])
    assert codec.history_until(messages, 9.0) is None
    assert codec.history_until(messages, None) == ()


def test_store_is_bounded_in_count_and_bytes() -> None:
    def record(name: str, size: int) -> StoredResponse:
        return StoredResponse(response_id=name, session_id="s", body=b"x" * size)

    store = ResponseStore(max_count=3, max_bytes=100)
    for name in "abc":
        store.put(record(name, 10))
    store.put(record("d", 10))
    assert [store.get(n) is not None for n in "abcd"] == [False, True, True, True]
    store.put(record("b", 50))  # an update keeps its place and its new size counts
    store.put(record("e", 40))
    assert [store.get(n) is not None for n in "bcde"] == [False, True, True, True] and store.bytes == 60
    store.put(record("huge", 101))
    assert store.get("huge") is None and len(store) == 3
    assert store.delete("c") and not store.delete("c") and store.bytes == 50
    assert ResponseStore(0, 100).put(record("a", 1)) is None


# ---------------------------------------------------------------- fuzzing

texts = st.text(max_size=8)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("input_text"), "text": texts}),
    st.fixed_dictionaries({"type": st.just("input_image")}, optional={"image_url": st.sampled_from(["data:image/png;base64,aGk=", "http://x", "data:bad"])}),
    st.fixed_dictionaries({"type": st.just("input_file")}, optional={"file_data": st.sampled_from(["data:text/plain,hi", "nope"]), "filename": texts}),
    st.fixed_dictionaries({"type": st.sampled_from(["output_text", "refusal", "input_audio"]), "text": texts, "refusal": texts}),
)
contents = st.one_of(texts, st.lists(parts, max_size=3))
items = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer", "assistant", "tool"]), "content": contents}, optional={"type": st.just("message")}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": texts, "name": texts}, optional={"arguments": texts, "namespace": texts}),
    st.fixed_dictionaries({"type": st.just("custom_tool_call"), "call_id": texts, "name": texts}, optional={"input": texts, "namespace": texts}),
    st.fixed_dictionaries({"type": st.sampled_from(["function_call_output", "custom_tool_call_output"]), "call_id": texts, "output": contents}),
    st.fixed_dictionaries({"type": st.just("reasoning")}, optional={"encrypted_content": st.one_of(texts, st.integers()), "summary": st.just([])}),
    st.fixed_dictionaries({"type": st.just("item_reference")}, optional={"id": st.sampled_from(["msg_known", "msg_other", "fc_known"])}),
    st.fixed_dictionaries({"type": st.sampled_from(["web_search_call", "computer_call_output"])}),
)
tool_defs = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["function", "custom", "web_search", "mcp"]), "name": st.from_regex(r"[a-z ]{0,4}", fullmatch=True)}),
    st.fixed_dictionaries({"type": st.just("namespace"), "name": st.from_regex(r"[a-z_]{0,4}", fullmatch=True), "tools": st.lists(
        st.fixed_dictionaries({"type": st.sampled_from(["function", "custom", "web_search"]), "name": st.from_regex(r"[a-z_]{0,4}", fullmatch=True)}), max_size=2,
    )}),
)
REFERENCES = {
    "msg_known": {"type": "message", "id": "msg_known", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "hi"}]},
    "fc_known": {"type": "function_call", "id": "fc_known", "call_id": "a", "name": "f", "arguments": "{}", "namespace": "ns"},
}
bodies = st.fixed_dictionaries(
    {"input": st.one_of(texts, st.lists(items, max_size=5))},
    optional={
        "model": st.sampled_from(["", "Helper", "id-2", "gpt-x", "default"]),
        "tools": st.lists(tool_defs, max_size=3), "include": st.just(["reasoning.encrypted_content"]),
        "tool_choice": st.sampled_from(["none", "auto", "required"]), "store": st.booleans(), "stream": st.booleans(),
        "max_output_tokens": st.integers(-1, 5), "temperature": st.floats(-1, 3), "background": st.booleans(),
        "previous_response_id": texts, "conversation": st.one_of(texts, st.fixed_dictionaries({"id": texts})),
        "text": st.fixed_dictionaries({"format": st.fixed_dictionaries({"type": st.sampled_from(["text", "json_schema"])})}),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies.map(lambda body: json.dumps(body).encode()) | st.binary(max_size=80))
def test_fuzz_request_codec_never_raises(raw: bytes) -> None:
    request = codec.decode_request(raw)
    if isinstance(request, OpenAIError):
        assert request.status == 400
        return
    result = codec.plan_response(request, AGENTS, context_limit=10, known_calls={"a": "f"}, references=REFERENCES)
    if isinstance(result, OpenAIError):
        assert result.status == 400 and set(result.body()["error"]) == {"message", "type", "param", "code"}
        return
    assert result.prompt_parts or result.continuation
    msgspec.json.encode(result)


run_events = st.one_of(
    st.builds(lambda t: m.TextDelta(**RUN, text=t), texts),
    st.builds(lambda t: m.ReasoningDelta(**RUN, text=t), texts),
    st.builds(lambda i, n: m.ToolCallStarted(**RUN, call_id=f"c{i}", name=n, arguments="{}"), st.integers(0, 3), st.sampled_from(["lookup", "add"])),
    st.just(m.TurnStarted(**RUN, turn=1)),
)
ends = st.one_of(
    st.builds(lambda stop, interrupted: m.RunFinished(**RUN, text="", stop_reason=stop, interrupted=interrupted),
              st.sampled_from(["end_turn", "max_tokens", "tool_calls", "refusal", "tool_iterations"]), st.booleans()),
    st.just(m.RunFailed(**RUN, error=m.ErrorInfo(code="provider_error", message="boom"))),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(run_events, max_size=12), ends)
def test_fuzz_builder_streams_read_as_openai(events: list[m.Event], end: m.RunFinished | m.RunFailed) -> None:
    b = builder("lookup")
    frames = b.opening()
    for event in events:
        frames += b.feed(event)
    frames += b.finish(end, completed_at=5)
    parsed = checked(frames)
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    assert parsed[-1].type in ("response.completed", "response.incomplete", "response.failed")
    final = Response.model_validate(json.loads(codec.encode(b.final)))  # type: ignore[arg-type]
    assert final.output_text == "".join(e.text for e in events if isinstance(e, m.TextDelta))
    assert [item.call_id for item in final.output if item.type == "function_call"] == list(dict.fromkeys(
        e.call_id for e in events if isinstance(e, m.ToolCallStarted) and e.name == "lookup"
    ))
    added = [e.output_index for e in parsed if e.type == "response.output_item.added"]
    assert added == list(range(len(final.output))) == [e.output_index for e in parsed if e.type == "response.output_item.done"]
