"""The sans-IO codecs on transcripts, plus hypothesis fuzzing (they never raise)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel import model as m
from kernel.settings import drop_masked_secrets
from transports.http.native import codec, wire
from transports.http.native.routes import event_frame
from transports.http.openai import codec as oc
from transports.http.openai import wire as ow
from transports.shared import HttpError, format_sse

AGENTS = [
    m.AgentInfo(id="id-1", name="Helper", provider="openai", model="gpt-4o-mini"),
    m.AgentInfo(id="id-2", name="Coder", provider="echo", model="echo"),
]


def plan(body: dict[str, Any]) -> oc.ChatPlan | ow.OpenAIError:
    request = oc.decode_chat_request(json.dumps(body).encode())
    assert isinstance(request, ow.ChatRequest), request
    return oc.plan_chat(request, AGENTS, context_limit=100)


# ---------------------------------------------------------------- native codec


def test_event_frame_is_id_type_and_kernel_json() -> None:
    event = m.TextDelta(session_id="s", seq=7, run_id="r", text="a\nb")
    assert event_frame(event) == (
        b'event: text_delta\nid: 7\ndata: {"type":"text_delta","text":"a\\nb","session_id":"s","seq":7,"run_id":"r"}\n\n'
    )
    lagged = m.SubscriberLagged(session_id="s", seq=90, last_seq=41, error=m.ErrorInfo(code="rate_limited", message="slow"))
    assert event_frame(lagged).split(b"\n")[1] == b"id: 41"  # the resume point, not the hub's seq
    # An end the kernel made up (the run's own end cannot come) is in no log: no id, so
    # the client's resume point stays at its last real event.
    made_up = m.RunFailed(session_id="s", run_id="r", error=m.ErrorInfo(code="internal", message="closed"))
    assert event_frame(made_up).startswith(b"event: run_failed\ndata: {")


def test_body_decoding_and_commands() -> None:
    body = codec.decode(b'{"text": "hi", "options": {"max_tokens": 5}}', wire.PromptBody)
    assert isinstance(body, wire.PromptBody)
    command = codec.prompt_command("s1", body, "req-9")
    assert command == m.Prompt(session_id="s1", request_id="req-9", text="hi", options=m.PromptOptions(max_tokens=5))
    image = codec.decode(b'{"parts": [{"type": "image", "data": "aGk=", "mime_type": "image/jpeg"}]}', wire.PromptBody)
    assert isinstance(image, wire.PromptBody) and image.parts == [m.ImagePart(data=b"hi", mime_type="image/jpeg")]
    assert codec.prompt_command("s", wire.PromptBody(text="  "), None).status == 400  # type: ignore[union-attr]

    error = codec.decode(b"{bad", wire.PromptBody)
    assert isinstance(error, wire.ApiError) and (error.status, error.code) == (400, "parse_error")
    error = codec.decode(b'{"approved": "yes"}', wire.ApprovalBody)
    assert isinstance(error, wire.ApiError) and error.code == "invalid_request" and "$.approved" in error.message
    assert codec.decode(b"", wire.ToolBody, empty_ok=True) == wire.ToolBody()
    assert isinstance(codec.decode(b"  ", wire.ApprovalBody), wire.ApiError)

    assert codec.command_command("s", wire.CommandBody(command="/model  gpt-4o ")) == m.RunCommand(session_id="s", name="model", args="gpt-4o")
    assert codec.command_command("s", wire.CommandBody(name="/help")) == m.RunCommand(session_id="s", name="help")
    assert isinstance(codec.command_command("s", wire.CommandBody(command="/x", name="y")), wire.ApiError)
    assert isinstance(codec.command_command("s", wire.CommandBody(command="  ")), wire.ApiError)
    assert isinstance(codec.open_session_command(wire.SessionCreate(session_id="a/b")), wire.ApiError)


def test_resume_point_accept_and_masked_secrets() -> None:
    assert codec.resume_after("12", "3") == 12
    assert codec.resume_after(None, "3") == 3
    assert codec.resume_after(None, None) is None
    assert isinstance(codec.resume_after("x", None), wire.ApiError)
    assert isinstance(codec.resume_after(None, "-1"), wire.ApiError)
    assert codec.wants_json("application/json")
    assert codec.wants_json("text/plain, application/json;q=0.9")
    assert not codec.wants_json("text/event-stream, application/json")
    assert not codec.wants_json("*/*") and not codec.wants_json(None)
    patch = {"provider": {"openai": {"api_key": "sk-…abcd", "model": "m"}}, "token": "real", "list": [{"secret": "…"}]}
    assert drop_masked_secrets(patch) == {"provider": {"openai": {"model": "m"}}, "token": "real", "list": [{}]}


def test_error_statuses() -> None:
    assert codec.kernel_error(m.KernelError("busy", "full")).status == 409
    assert codec.kernel_error(m.KernelError("not_found", "x")).body() == {"error": {"code": "not_found", "message": "x"}}
    limited = codec.run_failure(m.ErrorInfo(code="rate_limited", message="slow", details={"retry_after_s": 2.4}))
    assert (limited.status, limited.headers) == (429, {"retry-after": "2"})
    assert codec.run_failure(m.ErrorInfo(code="upstream_unauthorized", message="bad key")).status == 502
    assert codec.run_failure(m.ErrorInfo(code="unauthorized", message="bad token")).status == 401
    assert codec.run_failure(m.ErrorInfo(code="timeout", message="t")).status == 504
    assert codec.native_error_body(HttpError(413, "big")) == {"error": {"code": "too_large", "message": "big"}}


def test_run_collector_transcript() -> None:
    ids = {"session_id": "s", "run_id": "r1", "request_id": "q"}
    collector = codec.RunCollector()
    transcript: list[m.Event] = [
        m.RunStarted(**ids, seq=1),
        m.TextDelta(session_id="s", run_id="other", text="not mine", seq=2),
        m.ReasoningDelta(**ids, text="thinking", seq=3),
        m.ToolCallStarted(**ids, call_id="c", name="add", arguments="{}", seq=4),
        m.ToolResult(**ids, call_id="c", name="add", result="0", seq=5),
        m.RunFinished(**ids, text="done", usage=m.Usage(input_tokens=1, output_tokens=2), iterations=1, tool_calls=1, seq=6),
    ]
    assert [collector.feed(e) for e in transcript] == [False] * 5 + [True]
    result = collector.outcome()
    assert isinstance(result, wire.RunResult)
    assert msgspec.to_builtins(result) == {
        "type": "run_result", "session_id": "s", "run_id": "r1", "request_id": "q", "text": "done", "reasoning": "thinking",
        "usage": {"input_tokens": 1, "output_tokens": 2}, "stop_reason": "end_turn", "interrupted": False, "iterations": 1, "interrupt_cause": None,
        "tool_calls": [{"call_id": "c", "name": "add", "arguments": "{}", "result": "0", "is_error": False, "rejected": False}],
    }
    failed = codec.RunCollector()
    failed.feed(m.RunFailed(**ids, error=m.ErrorInfo(code="provider_error", message="down"), text="par"))
    outcome = failed.outcome()
    assert isinstance(outcome, wire.ApiError) and outcome.status == 502
    assert outcome.body()["error"]["details"] == {"run_id": "r1", "text": "par"}
    assert isinstance(codec.RunCollector().outcome(), wire.ApiError)


# ---------------------------------------------------------------- OpenAI codec


def test_plan_maps_conversation_and_options() -> None:
    png = base64.b64encode(b"\x89PNG").decode()
    result = plan({
        "model": "Coder",
        "messages": [
            {"role": "system", "content": "one"},
            {"role": "developer", "content": [{"type": "text", "text": "two"}]},
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "r1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}]},
        ],
        "max_tokens": 10, "max_completion_tokens": 20, "temperature": 1, "stream": True,
        "stream_options": {"include_usage": True}, "unknown_field": {"ignored": True},
    })
    assert isinstance(result, oc.ChatPlan)
    assert (result.agent_id, result.response_model, result.stream, result.include_usage) == ("id-2", "Coder", True, True)
    assert result.options == m.PromptOptions(max_tokens=20, temperature=1.0, system_prompt="one\n\ntwo", max_context_messages=100)
    assert [msg.role for msg in result.history] == ["user", "assistant", "tool", "assistant"]
    assert result.history[1].tool_calls == (m.ToolCall(id="t1", name="f", arguments="{}"),)
    assert (result.history[2].tool_call_id, result.history[2].name, result.history[2].content) == ("t1", "f", "r1")
    assert result.prompt_parts == (m.TextPart("look"), m.ImagePart(data=b"\x89PNG", mime_type="image/png"))
    assert not result.continuation and result.options.client_tools == ()


def test_plan_model_resolution_tools_and_continuation() -> None:
    passthrough = plan({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    assert isinstance(passthrough, oc.ChatPlan)
    assert (passthrough.agent_id, passthrough.options.model, passthrough.options.system_prompt) == ("id-1", "gpt-x", None)
    by_id = plan({"model": "id-2", "messages": [{"role": "user", "content": "hi"}]})
    assert isinstance(by_id, oc.ChatPlan) and by_id.agent_id == "id-2" and by_id.options.model is None
    default = plan({"messages": [{"role": "user", "content": "hi"}]})
    assert isinstance(default, oc.ChatPlan) and default.response_model == "Helper"

    tool = {"type": "function", "function": {"name": "get_x", "description": "d"}}
    with_tools = plan({"messages": [{"role": "user", "content": "hi"}], "tools": [tool]})
    assert isinstance(with_tools, oc.ChatPlan)
    assert with_tools.options.client_tools == (m.ClientTool(name="get_x", description="d", parameters={"type": "object", "properties": {}}),)
    none = plan({"messages": [{"role": "user", "content": "hi"}], "tools": [tool], "tool_choice": "none"})
    assert isinstance(none, oc.ChatPlan) and none.options.client_tools == ()

    continued = plan({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_x", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "42"},
    ]})
    assert isinstance(continued, oc.ChatPlan) and continued.continuation and continued.prompt_parts == ()
    assert [msg.role for msg in continued.history] == ["user", "assistant", "tool"]


def test_plan_errors_name_the_param() -> None:
    cases = [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 3}, "n"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": 3}, "temperature"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0].content"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "code_interpreter"}]}, "tools[0].type"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ]
    for body, param in cases:
        error = plan(body)
        assert isinstance(error, ow.OpenAIError), body
        assert (error.status, error.param, error.type) == (400, param, "invalid_request_error"), (body, error)
    wrong_role = oc.decode_chat_request(b'{"messages": [{"role": "wizard", "content": "x"}]}')
    assert isinstance(wrong_role, ow.OpenAIError) and wrong_role.param == "messages[0].role"
    assert isinstance(oc.decode_chat_request(b"[1"), ow.OpenAIError)


def test_chunk_encoder_transcript() -> None:
    encoder = oc.ChunkEncoder(completion_id="chatcmpl-1", created=5, model="Helper", include_usage=True)
    head = '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"Helper","system_fingerprint":null,"choices":'
    assert format_sse(encoder.opening()) == f'data: {head}[{{"index":0,"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}],"usage":null}}\n\n'.encode()
    ids = {"session_id": "s", "run_id": "r"}
    assert format_sse(encoder.event(m.TextDelta(**ids, text="Hi"))) == f'data: {head}[{{"index":0,"delta":{{"content":"Hi"}},"logprobs":null,"finish_reason":null}}],"usage":null}}\n\n'.encode()
    assert encoder.event(m.ToolCallStarted(**ids, call_id="c", name="n", arguments="{}")) is None
    finished = m.RunFinished(**ids, text="Hi", usage=m.Usage(input_tokens=2, output_tokens=1))
    frames = [format_sse(payload) for payload in encoder.closing(finished, [m.ToolCall(id="c9", name="f", arguments='{"a":1}')])]
    assert [json.loads(f[6:]) for f in frames[:3]] == [
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 5, "model": "Helper", "system_fingerprint": None,
         "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c9", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]}, "logprobs": None, "finish_reason": None}], "usage": None},
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 5, "model": "Helper", "system_fingerprint": None,
         "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}], "usage": None},
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 5, "model": "Helper", "system_fingerprint": None,
         "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}},
    ]
    assert frames[-1] == b"data: [DONE]\n\n"
    plain = oc.ChunkEncoder(completion_id="x", created=1, model="m", include_usage=False)
    assert "usage" not in json.loads(format_sse(plain.opening())[6:])
    closing = [format_sse(payload) for payload in plain.closing(msgspec.structs.replace(finished, stop_reason="max_tokens"), [])]
    assert json.loads(closing[0][6:])["choices"][0]["finish_reason"] == "length" and len(closing) == 2
    error = format_sse(plain.failure(oc.from_error_info(m.ErrorInfo(code="provider_error", message="down"))))
    assert json.loads(error[6:]) == {"error": {"message": "down", "type": "server_error", "param": None, "code": "upstream_error"}}


def test_completion_body_and_models() -> None:
    finished = m.RunFinished(session_id="s", run_id="r", text="", usage=m.Usage(input_tokens=1, output_tokens=1))
    body = msgspec.to_builtins(oc.completion(
        completion_id="c", created=3, model="M", finished=finished, reasoning="", client_calls=[m.ToolCall(id="i", name="f", arguments="{}")]
    ))
    assert body == {
        "id": "c", "object": "chat.completion", "created": 3, "model": "M",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "refusal": None,
                     "tool_calls": [{"id": "i", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                     "logprobs": None, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, "system_fingerprint": None,
    }
    models = msgspec.to_builtins(oc.model_list(AGENTS, 9))
    assert [(d["id"], d["owned_by"]) for d in models["data"]] == [("Helper", "gateway"), ("Coder", "gateway"), ("gpt-4o-mini", "openai"), ("echo", "echo")]
    assert isinstance(oc.find_model(AGENTS, 9, "id-1"), ow.ModelInfo)
    missing = oc.find_model(AGENTS, 9, "zzz")
    assert isinstance(missing, ow.OpenAIError) and (missing.status, missing.code) == (404, "model_not_found")


def test_openai_error_shapes() -> None:
    assert oc.openai_error_body(HttpError(401, "Missing or invalid token")) == {
        "error": {"message": "Missing or invalid token", "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
    }
    assert oc.from_http(HttpError(413, "big")).code == "request_too_large"
    assert oc.from_http(HttpError(500, "x")).type == "server_error"
    limited = oc.from_error_info(m.ErrorInfo(code="rate_limited", message="slow", details={"retry_after_s": 0.2}))
    assert (limited.status, limited.type, limited.code, limited.headers) == (429, "rate_limit_error", "rate_limit_exceeded", {"retry-after": "1"})
    assert oc.from_error_info(m.ErrorInfo(code="upstream_unauthorized", message="k")).status == 502
    assert oc.from_error_info(m.ErrorInfo(code="unauthorized", message="k")).status == 401
    assert oc.from_error_info(m.ErrorInfo(code="internal", message="k")).status == 500


# ---------------------------------------------------------------- fuzzing

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
text_parts = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)})
other_parts = st.fixed_dictionaries({"type": st.sampled_from(["text", "refusal", "image_url", "file", "other"])}, optional={
    "text": json_values, "refusal": json_values,
    "image_url": st.one_of(json_values, st.fixed_dictionaries({"url": st.one_of(st.text(max_size=30), st.just("data:image/png;base64,aGk="), st.just("data:,a%20b"), st.just("data:;base64,é"))})),
    "file": st.fixed_dictionaries({}, optional={"file_data": st.one_of(st.text(max_size=30), st.just("data:text/plain;base64,aGk=")), "filename": json_values}),
})


def chat_bodies(noise: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Plausible chat requests; with ``noise`` any field may also be any JSON value."""

    def maybe(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(plausible, json_values) if noise else plausible

    contents = maybe(st.one_of(st.text(min_size=1, max_size=20), st.lists(st.one_of(text_parts, other_parts), min_size=1, max_size=3), st.none()))
    calls = st.lists(st.fixed_dictionaries({
        "id": st.text(max_size=5), "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": st.text(max_size=5)}, optional={"arguments": st.text(max_size=10)}),
    }), max_size=2)
    message = st.fixed_dictionaries(
        {"role": maybe(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))},
        optional={"content": contents, "tool_call_id": maybe(st.text(max_size=5)), "tool_calls": maybe(calls), "name": maybe(st.text(max_size=5))},
    )
    last = st.fixed_dictionaries({"role": st.sampled_from(["user", "tool"]), "content": contents, "tool_call_id": st.text(max_size=5)})
    tools = st.lists(st.fixed_dictionaries({"type": maybe(st.just("function")), "function": maybe(st.fixed_dictionaries(
        {"name": st.from_regex(r"[a-z_]{1,8}", fullmatch=True)}, optional={"description": st.text(max_size=10), "parameters": st.just({"type": "object"})}
    ))}), max_size=2)
    return st.fixed_dictionaries(
        {"messages": st.tuples(st.lists(message, max_size=4), last).map(lambda pair: [*pair[0], pair[1]])},
        optional={
            "model": maybe(st.one_of(st.text(max_size=10), st.sampled_from(["Helper", "id-2", "default"]))),
            "n": maybe(st.sampled_from([1, 2])), "temperature": maybe(st.floats(-1, 3)), "max_tokens": maybe(st.integers(-1, 10**20)),
            "max_completion_tokens": maybe(st.integers(0, 100)), "stream": maybe(st.booleans()),
            "stream_options": maybe(st.fixed_dictionaries({"include_usage": st.booleans()})),
            "tool_choice": maybe(st.sampled_from(["none", "auto"])), "tools": maybe(tools),
        },
    )


BODY_TYPES = [wire.PromptBody, wire.SessionCreate, wire.ApprovalBody, wire.TurnLimitBody, wire.CommandBody, wire.ToolBody, wire.RegenerateBody, dict[str, Any]]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
def test_fuzz_native_decoders_never_raise(raw: bytes) -> None:
    for body_type in BODY_TYPES:
        decoded = codec.decode(raw, body_type, empty_ok=True)
        if isinstance(decoded, wire.PromptBody):
            codec.prompt_command("s", decoded)
        elif isinstance(decoded, wire.CommandBody):
            codec.command_command("s", decoded)
        elif isinstance(decoded, wire.SessionCreate):
            codec.open_session_command(decoded)
        elif isinstance(decoded, dict):
            drop_masked_secrets(decoded)
    text = raw.decode("utf-8", "replace")
    codec.resume_after(text, text)
    codec.wants_json(text)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(chat_bodies(False), chat_bodies(True)).map(lambda b: json.dumps(b).encode()) | st.binary(max_size=100))
def test_fuzz_chat_codec_never_raises(raw: bytes) -> None:
    request = oc.decode_chat_request(raw)
    if isinstance(request, ow.OpenAIError):
        assert request.status == 400
        return
    result = oc.plan_chat(request, AGENTS, context_limit=10)
    if isinstance(result, ow.OpenAIError):
        assert result.status == 400 and set(result.body()["error"]) == {"message", "type", "param", "code"}
        return
    assert result.prompt_parts or result.continuation
    msgspec.json.encode(result)
