"""The pure A2A codec: versions and methods, params of 1.0 and 0.3, parts, answers, tasks and
stream events (checked by the a2a-sdk's own protobuf types), 0.3 shapes and errors; the
JSON-RPC decoder fuzzed with hypothesis."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from a2a.types import StreamResponse, Task
from a2a.utils.proto_utils import parse_lenient
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import model as m
from transports.a2a import codec
from transports.a2a import wire as w
from transports.shared import end_state


def _call(body: dict[str, Any] | bytes, version: codec.Version = "1.0") -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return codec.decode_call(raw, version)


def test_the_version_header_selects_1_0_and_its_absence_0_3() -> None:
    assert codec.version_of(None) == "0.3" and codec.version_of("") == "0.3" and codec.version_of("0.3") == "0.3"
    assert codec.version_of("1.0") == "1.0" and codec.version_of("1.2") == "1.0"
    refused = codec.version_of("2.0")
    assert isinstance(refused, codec.Failure) and refused.code == -32009


def test_0_3_methods_and_params_become_their_1_0_twins() -> None:
    message = {"kind": "message", "messageId": "m", "role": "user", "contextId": "c1", "parts": [{"kind": "text", "text": "hi"}, {"kind": "file", "file": {"bytes": "aGk=", "name": "a.txt", "mimeType": "text/plain"}}, {"kind": "data", "data": {"x": 1}}]}
    call = _call({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message, "configuration": {"blocking": False}}}, "0.3")
    assert isinstance(call, codec.Call) and call.method == "SendMessage"
    params = call.params
    assert isinstance(params, w.SendMessageRequest) and params.configuration is not None and params.configuration.return_immediately
    assert params.message is not None and params.message.role == "ROLE_USER" and params.message.context_id == "c1"
    parts = params.message.parts
    assert parts[0].text == "hi" and parts[1].raw == b"hi" and parts[1].filename == "a.txt" and parts[2].data == {"x": 1}
    got = _call({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "t", "historyLength": 1}}, "0.3")
    assert isinstance(got, codec.Call) and got.params == w.GetTaskRequest(id="t", history_length=1)
    push = _call({"jsonrpc": "2.0", "id": 3, "method": "tasks/pushNotificationConfig/set", "params": {"taskId": "t", "pushNotificationConfig": {"url": "http://h/x", "token": "k"}}}, "0.3")
    assert isinstance(push, codec.Call) and push.params == w.TaskPushNotificationConfig(task_id="t", url="http://h/x", token="k")


def test_method_names_of_the_other_version_are_refused_with_a_hint() -> None:
    failure, request_id = _call({"jsonrpc": "2.0", "id": 7, "method": "message/send"}, "1.0")
    assert request_id == 7 and failure.code == -32601 and "A2A-Version: 0.3" in failure.message
    failure, _ = _call({"jsonrpc": "2.0", "id": 8, "method": "SendMessage"}, "0.3")
    assert failure.code == -32009 and "A2A-Version: 1.0" in failure.message
    failure, _ = _call({"jsonrpc": "1.0", "id": 9, "method": "GetTask"})
    assert failure.code == -32600


def test_parts_become_kernel_parts_and_a_url_is_never_fetched() -> None:
    parts = codec.prompt_parts([
        w.Part(text="hi"), w.Part(data={"a": [1, 2]}), w.Part(raw=b"\x89PNG", media_type="image/png"),
        w.Part(raw=b"notes", filename="n.txt", media_type="text/plain"), w.Part(url="https://example.com/x.pdf"),
    ])
    assert parts == (
        m.TextPart("hi"), m.TextPart('{"a":[1,2]}'), m.ImagePart(data=b"\x89PNG", mime_type="image/png"),
        m.FilePart(name="n.txt", data=b"notes", content_type="text/plain"),
        m.FilePart(name="https://example.com/x.pdf", data=b"https://example.com/x.pdf", content_type="text/uri-list"),
    )
    empty = codec.prompt_parts([w.Part()])
    assert isinstance(empty, codec.Failure) and empty.code == -32602
    assert codec.parts_out(parts)[4] == w.Part(url="https://example.com/x.pdf", filename="https://example.com/x.pdf")  # type: ignore[index]


def test_answers_are_data_parts_or_the_whole_text() -> None:
    assert codec.answer_of([w.Part(data={"approved": True, "reason": "ok"})]) == (True, "ok")
    assert codec.answer_of([w.Part(data={"continue": False})]) == (False, None)
    assert codec.answer_of([w.Part(text=" Approve. ")]) == (True, None) and codec.answer_of([w.Part(text="reject")]) == (False, None)
    assert codec.answer_of([w.Part(text="approve the second one")]) is None
    assert codec.answer_of([w.Part(data={"approved": "yes"})]) is None


def _view(**fields: Any) -> codec.TaskView:
    return codec.TaskView(task_id="s~1", context_id="s", **{"state": "working", "updated_at": 1_700_000_000.25, **fields})


def test_tasks_and_stream_events_are_what_the_sdk_reads() -> None:
    question = m.ToolApprovalRequested(session_id="s", run_id="r", call_id="c", name="danger", arguments='{"x":1}')
    asked = codec.task_out(_view(state="input_required", question=question, prompt=(m.TextPart("do it"),)))
    task = parse_lenient(json.loads(msgspec.json.encode(asked)), Task())
    assert task.status.state == 6 and task.status.timestamp.seconds == 1_700_000_000  # INPUT_REQUIRED
    assert "danger" in task.status.message.parts[0].text and task.status.message.parts[1].data.struct_value["tool"] == "danger"
    encoder = codec.StreamEncoder("s~1", "s")
    events = encoder.feed(m.TextDelta(session_id="s", run_id="r", text="Hel"), _view(text="Hel"))
    events += encoder.feed(m.TextDelta(session_id="s", run_id="r", text="lo"), _view(text="Hello"))
    end = m.RunFinished(session_id="s", run_id="r", text="Hello")
    events += encoder.feed(end, _view(state="completed", text="Hello"))
    parsed = [parse_lenient(json.loads(msgspec.json.encode(e)), StreamResponse()) for e in events]
    assert [p.WhichOneof("payload") for p in parsed] == ["artifact_update"] * 3 + ["status_update"]
    assert [(p.artifact_update.append, p.artifact_update.last_chunk) for p in parsed[:3]] == [(False, False), (True, False), (True, True)]
    assert parsed[-1].status_update.status.state == 3 and encoder.done  # COMPLETED
    assert encoder.feed(end, _view(state="completed")) == []


def test_an_interrupted_run_is_never_completed() -> None:
    finished = m.RunFinished(session_id="s", run_id="r", text="half", interrupted=True)
    drained = m.RunFinished(session_id="s", run_id="r", text="half", interrupted=True, interrupt_cause="drain")
    failed = m.RunFailed(session_id="s", run_id="r", error=m.ErrorInfo(code="provider_error", message="down"))
    assert end_state(finished) == "canceled" and end_state(drained) == "failed" and end_state(failed) == "failed"
    assert end_state(m.RunFinished(session_id="s", run_id="r", text="whole")) == "completed"


def test_0_3_results_carry_kind_lowercase_states_and_final() -> None:
    status = codec.StreamEncoder("s~1", "s").status(_view(state="completed", text="x"))
    v03 = msgspec.to_builtins(codec.to_v03(status))
    assert v03["kind"] == "status-update" and v03["final"] is True and v03["status"]["state"] == "completed"
    task = msgspec.to_builtins(codec.to_v03(codec.task_out(_view(state="completed", text="x", prompt=(m.TextPart("q"),)))))
    assert task["kind"] == "task" and task["history"][0] == {"kind": "message", "messageId": "s~1-user", "role": "user", "parts": [{"kind": "text", "text": "q"}], "contextId": "s", "taskId": "s~1"}
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "x"}]


def test_errors_map_kernel_codes_and_rest_statuses_through_kernel_errors() -> None:
    busy = codec.from_kernel(m.ErrorInfo(code="busy", message="b"))
    assert busy.code == -32603 and busy.http_status == 409 and busy.reason == "BUSY" and busy.metadata == {"code": "busy"}
    missing = codec.task_not_found("gone")
    assert missing.http_status == 404 and codec.rest_error(missing)["error"]["status"] == "NOT_FOUND"
    assert codec.rpc_error(missing, "x").error.data == [codec.error_info(missing)]
    assert codec.http_failure(401, "unauthorized", "no").http_status == 401
    assert codec.http_failure(405, "method_not_allowed", "no").code == -32601


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_methods = st.sampled_from([*codec.METHODS_10, *codec.METHODS_03, "nope", ""])


@settings(max_examples=300, deadline=None)
@given(
    method=_methods, request_id=st.none() | st.integers() | st.text(max_size=8), params=_json,
    version=st.sampled_from(["1.0", "0.3"]), raw=st.binary(max_size=64),
)
def test_the_json_rpc_decoder_answers_anything_with_a_call_or_an_a2a_error(method: str, request_id: Any, params: Any, version: codec.Version, raw: bytes) -> None:
    for body in (json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode(), raw):
        decoded = codec.decode_call(body, version)
        if isinstance(decoded, codec.Call):
            assert decoded.method in codec.METHODS_10
        else:
            failure, _ = decoded
            assert failure.code in (-32700, -32600, -32601, -32602, -32009)
            assert msgspec.json.encode(codec.rpc_error(failure, None))  # always encodable


def test_tool_calls_and_tool_progress_are_working_statuses() -> None:
    encoder = codec.StreamEncoder("s~1", "s")
    call = m.ToolCallStarted(session_id="s", run_id="r", call_id="c1", name="peer__ask", arguments='{"message":"hi"}')
    refused = m.ToolCallStarted(session_id="s", run_id="r", call_id="c2", name="nope", arguments="{}", refused=True)
    progress = m.ToolProgress(session_id="s", run_id="r", call_id="c1", name="peer__ask", text="partial answer")
    out = [e for event in (call, refused, progress) for e in encoder.feed(event, _view())]
    parsed = [parse_lenient(json.loads(msgspec.json.encode(e)), StreamResponse()) for e in out]
    assert [p.status_update.status.state for p in parsed] == [2, 2] and not encoder.done  # WORKING twice: the refused call is not shown
    assert parsed[0].status_update.status.message.parts[1].data.struct_value["tool"] == "peer__ask"
    assert parsed[1].status_update.status.message.parts[0].text == "partial answer"
    assert msgspec.to_builtins(codec.to_v03(out[1]))["final"] is False
