"""The sans-IO codec on its own: requests in, kernel commands out; events in, frames out."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kernel import admit_part
from kernel import model as m
from transports.agent_cli.codec import TURN_DECLINED, AgentCliCodec, Incoming
from transports.agent_cli.inputs import Limits, instruction_args
from transports.shared.coalesce import DeltaCoalescer

SID = "s1"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


def codec(**kw: Any) -> AgentCliCodec:
    return AgentCliCodec(SID, **kw)


def decode(request: Any, c: AgentCliCodec | None = None) -> Incoming:
    out = (c or codec()).decode(request if isinstance(request, (str, bytes)) else json.dumps(request))
    assert isinstance(out, Incoming), out
    return out


def rejected(request: Any, c: AgentCliCodec | None = None) -> dict[str, Any]:
    out = (c or codec()).decode(request if isinstance(request, (str, bytes)) else json.dumps(request))
    assert isinstance(out, str), out
    frame = json.loads(out)
    assert frame["response"] == {"Text": ""} and frame["token_usage"] is None
    return frame


def req(value: Any, **extra: Any) -> dict[str, Any]:
    return {"request_id": "r1", "input": value, **extra}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ------------------------------------------------------------------ requests


def test_text_prompt_with_defaults() -> None:
    got = decode(req({"Text": "hi"}))
    assert got.request_id == "r1" and got.variant == "Text" and got.stream is False
    assert got.command == m.Prompt(session_id=SID, request_id="r1", parts=(m.TextPart("hi"),), options=m.PromptOptions())


def test_config_overrides_become_prompt_options() -> None:
    config = {"max_context_num": 10, "max_tokens": 1000, "ask_before_tool_execution": True, "prompt": "be terse", "max_tool_try": 3}
    got = decode(req({"Text": "hi"}, config=config, stream=True, use_tools=False, unknown_field=1, **{"": False}))
    assert got.stream is True
    assert got.command.options == m.PromptOptions(  # type: ignore[union-attr]
        max_tokens=1000, system_prompt="be terse", use_tools=False, max_context_messages=10,
        ask_before_tool_execution=True, max_tool_iterations=3,
    )
    zeros = decode(req({"Text": "hi"}, config={"max_tokens": 0, "max_context_num": 0, "max_tool_try": None}, stream=None, use_tools=None))
    assert zeros.command.options == m.PromptOptions() and zeros.stream is False  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["GetCommands", "Interrupt", "Regenerate", "ClearContext"])
def test_unit_variants_in_both_spellings(name: str) -> None:
    short, long = decode(req(name)), decode(req({name: None}))
    assert short.command == long.command and short.variant == name
    frame = rejected(req({name: {}}))
    assert frame["request_id"] == "r1"
    assert frame["error"] == f'Failed to parse request: unit variant `{name}` takes null or no value, e.g. "{name}" - at `$.input.{name}`'


def test_unit_variant_commands() -> None:
    assert decode(req("GetCommands")).command == m.ListCommands(session_id=SID, request_id="r1")
    assert decode(req("Interrupt")).command == m.Interrupt(session_id=SID, request_id="r1")
    assert decode(req("ClearContext")).command == m.ClearContext(session_id=SID, request_id="r1")
    regen = decode(req("Regenerate", stream=True, config={"max_tokens": 5}))
    assert regen.command == m.Regenerate(session_id=SID, request_id="r1", options=m.PromptOptions(max_tokens=5)) and regen.stream


def test_image_input() -> None:
    got = decode(req({"Image": {"data": b64(PNG)}}))
    assert got.command.parts == (m.ImagePart(data=PNG, mime_type="image/png"),)  # type: ignore[union-attr]
    jpeg = decode(req({"Image": {"data": b64(b"\xff\xd8\xff\xe0rest"), "mime_type": None}}))
    assert jpeg.command.parts[0].mime_type == "image/jpeg"  # type: ignore[union-attr]
    declared = decode(req({"Image": {"data": b64(b"whatever"), "mime_type": "image/webp"}}))
    assert declared.command.parts[0].mime_type == "image/webp"  # type: ignore[union-attr]
    wrapped = decode(req({"Image": {"data": base64.encodebytes(PNG * 10).decode()}}))  # MIME line breaks
    assert wrapped.command.parts[0].data == PNG * 10  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ({"data": "!!!"}, "Failed to parse request: invalid base64"),
        ({"data": b64(b"plain bytes")}, "processing_error: cannot tell the image format"),
        ({"data": b64(PNG), "mime_type": "text/plain"}, "processing_error: `mime_type` 'text/plain' is not an image type"),
        ({"data": ""}, "processing_error: image data is empty"),
        ({"data": b64(PNG * 100)}, "processing_error: image is over the 1000-byte limit"),
        ({"mime_type": "image/png"}, "Failed to parse request: Object missing required field `data` - at `$.input.Image`"),
    ],
)
def test_bad_images(image: dict[str, Any], message: str) -> None:
    assert rejected(req({"Image": image}), codec(limits=Limits(max_image_bytes=1000)))["error"].startswith(message)


def test_text_file_becomes_a_file_part() -> None:
    data = "print('héllo')\n".encode()
    got = decode(req({"File": {"filename": "a.py", "content_type": "text/x-python", "data": b64(data)}}))
    assert got.command.parts == (m.FilePart(name="a.py", data=data, content_type="text/x-python"),)  # type: ignore[union-attr]
    generic = decode(req({"File": {"filename": "notes.md", "content_type": "application/octet-stream", "data": b64(b"# hi")}}))
    assert generic.command.parts[0].name == "notes.md"  # type: ignore[union-attr]
    bom = decode(req({"File": {"filename": "x.json", "content_type": "application/json", "data": b64(b"\xef\xbb\xbf{}")}}))
    assert admit_part(bom.command.parts[0]).data == b"{}"  # type: ignore[union-attr]  # the kernel drops the mark


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ({"filename": "big.txt", "content_type": "text/plain", "data": b64(b"x" * 65)}, "processing_error: file 'big.txt' of 65 bytes is over the 64-byte limit"),
        ({"filename": "big.txt", "content_type": "text/plain", "data": b64(b"x" * 500)}, "processing_error: file 'big.txt' is over the 64-byte limit"),
        ({"filename": "a.txt", "data": "eA=="}, "Failed to parse request: Object missing required field `content_type` - at `$.input.File`"),
    ],
)
def test_bad_files(file: dict[str, Any], message: str) -> None:
    assert rejected(req({"File": file}), codec(limits=Limits(max_file_bytes=64)))["error"].startswith(message)


def test_files_go_to_the_kernel_as_sent() -> None:
    """Whether a file is readable is the kernel's one policy (tests/kernel/test_attachments.py):
    the codec passes a PDF on as it came, for the kernel to refuse like every dialect's."""
    file = {"filename": "a.pdf", "content_type": "application/pdf", "data": b64(b"%PDF-1.7\n%\xe2\xe3")}
    parts = decode(req({"File": file})).command.parts  # type: ignore[union-attr]
    assert parts == (m.FilePart(name="a.pdf", data=b"%PDF-1.7\n%\xe2\xe3", content_type="application/pdf"),)


def test_multi_flattens_content() -> None:
    value = {"Multi": [{"Text": "look"}, {"Image": {"data": b64(PNG)}}, {"Multi": [{"Text": "and"}, {"File": {"filename": "a.txt", "content_type": "text/plain", "data": b64(b"x")}}]}]}
    parts = decode(req(value)).command.parts  # type: ignore[union-attr]
    assert [type(p).__name__ for p in parts] == ["TextPart", "ImagePart", "TextPart", "FilePart"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"Multi": [{"Text": "a"}, "Interrupt"]}, "Failed to parse request: `Interrupt` cannot be part of `Multi` (only Text, Image, File, Multi) - at `$.input.Multi[1]`"),
        ({"Multi": []}, "Failed to parse request: `Multi` needs at least one input - at `$.input.Multi`"),
        ({"Multi": [{"Text": 1}]}, "Failed to parse request: Expected `str`, got `int` - at `$.input.Multi[0].Text`"),
        ({"Multi": [{"Text": "x"}] * 3}, "processing_error: `Multi` holds more than 2 inputs"),
        ({"Multi": [{"Multi": [{"Multi": [{"Text": "x"}]}]}]}, "Failed to parse request: `Multi` is nested more than 2 levels deep - at `$.input.Multi[0].Multi[0].Multi`"),
    ],
)
def test_bad_multi(value: Any, message: str) -> None:
    assert rejected(req(value), codec(limits=Limits(max_parts=2, max_depth=2)))["error"] == message


def test_instruction_runs_a_slash_command() -> None:
    got = decode(req({"Instruction": {"command": "/history", "parameters": {"count": 3}}}))
    assert got.command == m.RunCommand(session_id=SID, request_id="r1", name="/history", args="3")
    assert instruction_args(None) == "" and instruction_args("gpt-4o") == "gpt-4o"
    assert instruction_args({"args": "a b", "x": 1}) == "a b" and instruction_args(["a", 2, True, None]) == "a 2 true"
    assert instruction_args({"n": {"deep": 1}}) == '{"deep":1}' and instruction_args(7) == "7"
    null_params = decode(req({"Instruction": {"command": "help", "parameters": None}}))
    assert null_params.command.args == ""  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("request_", "request_id", "message"),
    [
        ("@ not json", "parse_error", "Failed to parse request: JSON is malformed: invalid character (byte 0)"),
        ("", "parse_error", "Failed to parse request: Input data was truncated"),
        ('"GetCommands"', "parse_error", "Failed to parse request: Expected `object`, got `str`"),
        ({"input": {"Text": "x"}}, "parse_error", "Failed to parse request: Object missing required field `request_id`"),
        ({"request_id": 5, "input": {"Text": "x"}}, "parse_error", "Failed to parse request: Expected `str`, got `int` - at `$.request_id`"),
        ({"request_id": "r1"}, "r1", "Failed to parse request: Object missing required field `input`"),
        ({"request_id": "r1", "input": {"Text": "x"}, "stream": "yes"}, "r1", "Failed to parse request: Expected `bool | null`, got `str` - at `$.stream`"),
        ({"request_id": "r1", "input": {"Text": "x"}, "config": {"max_tokens": -1}}, "r1", "Failed to parse request: Expected `int` >= 0 - at `$.config.max_tokens`"),
        (req(None), "r1", "Failed to parse request: Expected `str | object`, got `null` - at `$.input`: expected a variant name or an object with one variant key"),
        (req("Text"), "r1", 'Failed to parse request: variant `Text` needs a value, e.g. {"Text": ...} - at `$.input`'),
        (req("text"), "r1", "Failed to parse request: unknown variant `text`, expected one of `Text`, `Image`, `File`, `Instruction`, `Multi`, `ToolConfirmationResponse`, `TurnConfirmationResponse`, `GetCommands`, `Interrupt`, `Regenerate`, `ClearContext` - at `$.input`"),
        (req({}), "r1", "Failed to parse request: expected exactly one variant key, found 0 (none) - at `$.input`"),
        (req({"Text": "a", "Image": {}}), "r1", "Failed to parse request: expected exactly one variant key, found 2 (`Text`, `Image`) - at `$.input`"),
        (req({"Instruction": {"command": "help"}}), "r1", "Failed to parse request: Object missing required field `parameters` - at `$.input.Instruction`"),
        (req({"ToolConfirmationResponse": {"name": "x", "approved": True}}), "r1", "Failed to parse request: Object missing required field `arguments` - at `$.input.ToolConfirmationResponse`"),
        (req({"TurnConfirmationResponse": {"confirmed": "yes"}}), "r1", "Failed to parse request: Expected `bool`, got `str` - at `$.input.TurnConfirmationResponse.confirmed`"),
    ],
)
def test_parse_errors_are_precise(request_: Any, request_id: str, message: str) -> None:
    frame = rejected(request_)
    assert frame == {"request_id": request_id, "response": {"Text": ""}, "error": message, "token_usage": None}


def test_binary_and_deeply_nested_input() -> None:
    assert decode(json.dumps(req({"Text": "hi"})).encode()).variant == "Text"
    assert rejected(b"\xff\xfe")["request_id"] == "parse_error"
    deep = '{"request_id": "r1", "input": ' + "[" * 5000 + "]" * 5000 + "}"
    assert rejected(deep)["error"].startswith("Failed to parse request:")


def test_queue_bound_answers_busy() -> None:
    c = codec(max_queued_requests=1)
    for n in range(2):
        incoming = decode(req({"Text": "x"}), c)
        c.on_reply(incoming, m.Accepted(session_id=SID, run_id=f"run{n}", queued=n > 0))
    frame = rejected(req({"Text": "third"}), c)
    assert frame["error"].startswith("processing_error: busy: 2 requests are already running or queued")
    assert isinstance(c.decode(json.dumps(req("Interrupt"))), Incoming)  # control requests still pass


# ------------------------------------------------------------------ events -> frames

IDS = {"session_id": SID, "run_id": "run1", "request_id": "r1"}
USAGE = m.Usage(input_tokens=3, output_tokens=5)


def started(c: AgentCliCodec, *, stream: bool, rid: str = "r1", run_id: str = "run1") -> None:
    incoming = decode({"request_id": rid, "input": {"Text": "x"}, "stream": stream}, c)
    assert c.on_reply(incoming, m.Accepted(session_id=SID, run_id=run_id)) == []


def frames(c: AgentCliCodec, *events: m.Event) -> list[dict[str, Any]]:
    return [json.loads(f) for f in c.on_events(list(events))]


def test_stream_transcript_merges_chunks_and_ends_with_complete() -> None:
    c = codec()
    started(c, stream=True)
    out = frames(c, m.RunStarted(**IDS), m.TurnStarted(**IDS, turn=1), m.TextDelta(**IDS, text="fn"), m.TurnStarted(**IDS, turn=2), m.TextDelta(**IDS, text=" main"))
    assert out == [{"request_id": "r1", "response": {"Stream": "fn main"}, "error": None, "token_usage": None}]
    end = frames(c, m.RunFinished(**IDS, text="fn main", usage=USAGE))
    complete = {"token_usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}, "interrupted": False}
    assert end == [{"request_id": "r1", "response": {"Complete": complete}, "error": None, "token_usage": None}]
    assert c.runs == {}


def test_coalescing_window_on_an_explicit_clock() -> None:
    c = codec(coalescer=DeltaCoalescer(window_s=0.1, max_chars=10))
    started(c, stream=True)
    assert c.on_events([m.TextDelta(**IDS, text="fn")], now=1.0) == [] and c.deadline == pytest.approx(1.1)
    assert c.tick(1.05) == []  # the window is still open
    assert c.on_events([m.TextDelta(**IDS, text=" ma")], now=1.06) == []
    assert [json.loads(f)["response"] for f in c.tick(1.1)] == [{"Stream": "fn ma"}] and c.deadline is None
    # The size limit sends at once; the end of the run sends what is held first.
    out = [json.loads(f)["response"] for f in c.on_events([m.TextDelta(**IDS, text="in() {"), m.TextDelta(**IDS, text="....."), m.TextDelta(**IDS, text="}")], now=2.0)]
    assert out == [{"Stream": "in() {....."}]
    end = [json.loads(f)["response"] for f in c.on_events([m.RunFinished(**IDS, text="fn main() {.....}", usage=USAGE)], now=2.01)]
    assert end[0] == {"Stream": "}"} and "Complete" in end[1] and c.deadline is None


def test_coalesced_text_goes_out_before_a_lost_events_error() -> None:
    c = codec(coalescer=DeltaCoalescer(window_s=1.0, max_chars=1000))
    started(c, stream=True)
    assert c.on_events([m.TextDelta(**IDS, text="partial")], now=0.0) == []
    out = [json.loads(f) for f in c.events_lost("fell behind")]
    assert [f["response"] for f in out] == [{"Stream": "partial"}, {"Text": ""}]
    assert out[1]["error"] == "connection_error: fell behind"


def test_stream_complete_tag_option_and_interrupted_stream() -> None:
    c = codec(complete_tag="StreamComplete")
    started(c, stream=True)
    (end,) = frames(c, m.RunFinished(**IDS, text="part", interrupted=True, stop_reason="interrupted"))
    assert end["response"] == {"StreamComplete": {"token_usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}, "interrupted": True}}


def test_non_stream_transcript_is_one_text_with_usage() -> None:
    c = codec()
    started(c, stream=False)
    assert frames(c, m.TextDelta(**IDS, text="Hello")) == []
    (end,) = frames(c, m.RunFinished(**IDS, text="Hello world", usage=USAGE))
    assert end == {"request_id": "r1", "response": {"Text": "Hello world"}, "error": None, "token_usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}
    c2 = codec()
    started(c2, stream=False)
    (cut,) = frames(c2, m.RunFinished(**IDS, text="Hel", interrupted=True, stop_reason="interrupted"))
    assert cut["response"] == {"Text": "Hel"} and cut["error"] == "interrupted"


def test_run_failure_is_an_error_frame_with_kind() -> None:
    c = codec()
    started(c, stream=True)
    (end,) = frames(c, m.RunFailed(**IDS, error=m.ErrorInfo(code="provider_error", message="upstream exploded"), text="par"))
    assert end["error"] == "processing_error: upstream exploded" and end["response"] == {"Text": "par"}
    started(c, stream=False, run_id="run2", rid="r2")
    (slow,) = frames(c, m.RunFailed(session_id=SID, run_id="run2", request_id="r2", error=m.ErrorInfo(code="timeout", message="too slow")))
    assert slow["request_id"] == "r2" and slow["error"] == "timeout_error: too slow"


def test_tool_frames_and_structured_tool_error() -> None:
    c = codec()
    started(c, stream=True)
    out = frames(
        c,
        m.ToolCallStarted(**IDS, call_id="c1", name="add", arguments='{"a":1,"b":2}'),
        m.ToolResult(**IDS, call_id="c1", name="add", result="3"),
        m.ToolCallStarted(**IDS, call_id="c2", name="boom", arguments='{"x":1}'),
        m.ToolResult(**IDS, call_id="c2", name="boom", result="tool error: disk on fire", outcome="error", error="disk on fire", is_error=True),
        m.ToolCallStarted(**IDS, call_id="c3", name="nope", arguments="not json"),
        m.ToolResult(
            **IDS, call_id="c3", name="nope", result="tool call rejected: unknown tool 'nope'",
            outcome="rejected", error="unknown tool 'nope'", is_error=True, rejected=True,
        ),
    )
    assert [f["response"] for f in out] == [
        {"ToolCall": {"name": "add", "arguments": {"a": 1, "b": 2}}},
        {"ToolResult": {"name": "add", "result": "3"}},
        {"ToolCall": {"name": "boom", "arguments": {"x": 1}}},
        {"Text": ""},
        {"ToolCall": {"name": "nope", "arguments": "not json"}},
        {"ToolResult": {"name": "nope", "result": "tool call rejected: unknown tool 'nope'"}},
    ]
    assert json.loads(out[3]["error"]) == {
        "type": "tool_execution_error",
        "message": "Tool 'boom' execution failed",
        "details": {"tool": "boom", "error": "disk on fire", "arguments": {"x": 1}},
    }


TOOL_EVENTS = (
    m.ToolCallStarted(**IDS, call_id="c1", name="add", arguments='{"a":1,"b":2}'),
    m.ToolResult(**IDS, call_id="c1", name="add", result="3"),
    m.ToolCallStarted(**IDS, call_id="c2", name="boom", arguments='{"x":1}'),
    m.ToolResult(**IDS, call_id="c2", name="boom", result="tool error: disk on fire", outcome="error", error="disk on fire", is_error=True),
)


def test_non_stream_tool_activity_is_not_sent_by_default() -> None:
    c = codec()
    started(c, stream=False)
    assert frames(c, *TOOL_EVENTS, m.TextDelta(**IDS, text="done")) == []  # one request, one reply
    (end,) = frames(c, m.RunFinished(**IDS, text="done", usage=USAGE))
    assert end == {"request_id": "r1", "response": {"Text": "done"}, "error": None, "token_usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}
    assert c.runs == {} and c._call_args == {}


def test_non_stream_tool_activity_as_multi() -> None:
    c = codec(non_stream_tool_activity="multi")
    started(c, stream=False)
    assert frames(c, *TOOL_EVENTS) == []
    (end,) = frames(c, m.RunFinished(**IDS, text="done", usage=USAGE))
    failure = {"type": "tool_execution_error", "message": "Tool 'boom' execution failed", "details": {"tool": "boom", "error": "disk on fire", "arguments": {"x": 1}}}
    assert end["response"] == {
        "Multi": [
            {"ToolCall": {"name": "add", "arguments": {"a": 1, "b": 2}}},
            {"ToolResult": {"name": "add", "result": "3"}},
            {"ToolCall": {"name": "boom", "arguments": {"x": 1}}},
            {"ToolResult": {"name": "boom", "result": failure}},
            {"Text": "done"},
        ]
    }
    assert end["error"] is None and end["token_usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    # Without tool activity, interrupted, or at a declined turn limit: the same one reply.
    started(c, stream=False, run_id="run2", rid="r2")
    ids2 = {**IDS, "run_id": "run2", "request_id": "r2"}
    (plain,) = frames(c, m.RunFinished(**ids2, text="no tools"))
    assert plain["response"] == {"Text": "no tools"}
    started(c, stream=False, run_id="run3", rid="r3")
    ids3 = {**IDS, "run_id": "run3", "request_id": "r3"}
    frames(c, m.ToolCallStarted(**ids3, call_id="c3", name="add", arguments="{}"))
    (cut,) = frames(c, m.RunFinished(**ids3, text="par", interrupted=True, stop_reason="interrupted"))
    assert cut["response"] == {"Multi": [{"ToolCall": {"name": "add", "arguments": {}}}, {"Text": "par"}]} and cut["error"] == "interrupted"
    started(c, stream=False, run_id="run4", rid="r4")
    ids4 = {**IDS, "run_id": "run4", "request_id": "r4"}
    frames(c, m.ToolCallStarted(**ids4, call_id="c4", name="add", arguments="{}"), m.ToolResult(**ids4, call_id="c4", name="add", result="0"))
    (declined,) = frames(c, m.RunFinished(**ids4, text="", stop_reason="turn_limit"))
    assert declined["response"]["Multi"][-1] == {"Text": TURN_DECLINED}


def test_streams_keep_their_tool_frames_whatever_the_option() -> None:
    c = codec(non_stream_tool_activity="multi")
    started(c, stream=True)
    out = frames(c, *TOOL_EVENTS)
    assert [next(iter(f["response"])) for f in out] == ["ToolCall", "ToolResult", "ToolCall", "Text"]
    assert json.loads(out[3]["error"])["type"] == "tool_execution_error"


def test_non_stream_confirmation_is_sent_without_a_tool_call_frame() -> None:
    for activity in ("omit", "multi"):
        c = codec(non_stream_tool_activity=activity)
        started(c, stream=False)
        call = m.ToolCallStarted(**IDS, call_id="c1", name="add", arguments='{"a":1}', needs_approval=True)
        (ask,) = frames(c, call, m.ToolApprovalRequested(**IDS, call_id="c1", name="add", arguments='{"a":1}', description="Add"))
        assert ask["request_id"] == "r1" and ask["response"] == {"ToolConfirmationRequest": {"name": "add", "arguments": {"a": 1}, "description": "Add"}}


def test_tool_confirmation_round_trip() -> None:
    c = codec()
    started(c, stream=False, rid="chat_123")
    ids = {**IDS, "request_id": "chat_123"}
    (ask,) = frames(c, m.ToolApprovalRequested(**ids, call_id="c1", name="add", arguments='{"a":1}', description="Add two numbers"))
    assert ask["request_id"] == "chat_123"
    assert ask["response"] == {"ToolConfirmationRequest": {"name": "add", "arguments": {"a": 1}, "description": "Add two numbers"}}
    wrong = rejected({"request_id": "x", "input": {"ToolConfirmationResponse": {"name": "other", "arguments": {}, "approved": True}}}, c)
    assert wrong["error"] == "processing_error: no pending confirmation for tool 'other' (waiting for 'add')"
    answer = decode({"request_id": "confirm_1", "input": {"ToolConfirmationResponse": {"name": "add", "arguments": {"a": 1}, "approved": False, "reason": "no"}}}, c)
    assert answer.command == m.ResolveToolApproval(session_id=SID, request_id="confirm_1", call_id="c1", approved=False, reason="no")
    again = rejected({"request_id": "confirm_2", "input": {"ToolConfirmationResponse": {"name": "add", "arguments": None, "approved": True}}}, c)
    assert again["error"] == "processing_error: no tool confirmation is pending"


def test_turn_confirmation_frames() -> None:
    c = codec()
    started(c, stream=False, rid="chat_123")
    ids = {**IDS, "request_id": "chat_123"}
    (ask,) = frames(c, m.TurnLimitReached(**ids, current_turns=10, max_turns=10))
    assert ask["response"] == {"TurnConfirmationRequest": {"current_turns": 10, "max_turns": 10, "reason": "Reached the maximum number of conversation turns (10 turns). Reset the turn count to continue?"}}
    confirm = decode({"request_id": "confirm_456", "input": {"TurnConfirmationResponse": {"confirmed": True, "reason": "continue"}}}, c)
    assert confirm.command == m.ResolveTurnLimit(session_id=SID, request_id="confirm_456", confirmed=True, reason="continue")
    assert c.on_reply(confirm, m.Done(message="confirmed")) == []
    (declined,) = frames(c, m.RunFinished(**ids, text="", stop_reason="turn_limit"))
    assert declined["request_id"] == "chat_123" and declined["response"] == {"Text": TURN_DECLINED} and declined["error"] is None
    s = codec()
    started(s, stream=True)
    out = frames(s, m.RunFinished(**IDS, text="", stop_reason="turn_limit"))
    assert [next(iter(f["response"])) for f in out] == ["Text", "Complete"]


def test_replies() -> None:
    c = codec()
    listing = decode(req("GetCommands"), c)
    (frame,) = c.on_reply(listing, m.CommandList(commands=(m.CommandInfo(name="help", description="List the commands"),)))
    parsed = json.loads(frame)
    assert json.loads(parsed["response"]["Text"]) == {"commands": [{"name": "help", "description": "List the commands"}], "count": 1}
    assert parsed["token_usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    idle = decode(req("Interrupt"), c)
    (err,) = c.on_error(idle, m.KernelError("invalid_request", "No active model output to interrupt"))
    assert json.loads(err) == {"request_id": "r1", "response": {"Text": ""}, "error": "No active model output to interrupt", "token_usage": None}
    clear = decode(req("ClearContext"), c)
    assert json.loads(c.on_reply(clear, m.Done(message="context cleared"))[0])["response"] == {"Text": "Context cleared."}
    assert c.on_reply(clear, m.Accepted(session_id=SID, queued=True)) == []
    assert frames(c, m.ContextCleared(session_id=SID, request_id="other")) == []
    assert frames(c, m.ContextCleared(session_id=SID, request_id="r1"))[0]["response"] == {"Text": "Context cleared."}
    missing = decode(req({"Instruction": {"command": "nope", "parameters": None}}), c)
    (nf,) = c.on_error(missing, m.KernelError("not_found", "Unknown command: /nope. Try /help."))
    assert json.loads(nf)["error"] == "processing_error: Unknown command: /nope. Try /help."


def test_events_of_unknown_runs_and_lost_events() -> None:
    c = codec()
    (end,) = frames(c, m.RunFinished(session_id=SID, run_id="elsewhere", request_id="rX", text="t"))
    assert end["request_id"] == "rX" and end["response"] == {"Text": "t"}
    started(c, stream=True)
    (lost,) = [json.loads(f) for f in c.events_lost("fell behind")]
    assert lost["request_id"] == "r1" and lost["error"] == "connection_error: fell behind" and c.runs == {}
    assert json.loads(c.too_large(10, 5))["request_id"] == "parse_error"
    assert json.loads(c.rate_limited(60, 1.5))["error"].startswith("processing_error: rate limited")


def test_events_before_the_acceptance_keep_the_requested_mode() -> None:
    c = codec()
    incoming = decode({"request_id": "r1", "input": {"Text": "x"}, "stream": True}, c)
    assert frames(c, m.TextDelta(**IDS, text="early"))[0]["response"] == {"Stream": "early"}
    c.on_reply(incoming, m.Accepted(session_id=SID, run_id="run1"))
    assert list(c.runs) == ["run1"] and c.runs["run1"].stream
    assert next(iter(frames(c, m.RunFinished(**IDS, text="early"))[0]["response"])) == "Complete"
    failed = decode({"request_id": "r2", "input": {"Text": "x"}, "stream": True}, c)
    c.on_error(failed, m.KernelError("busy", "full"))
    assert c._expected == {}
