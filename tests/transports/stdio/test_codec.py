"""The stdio codec on transcripts, and fuzzed: it answers, it never raises."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from kernel import model as m
from transports.stdio import StdioCodec


def test_commands_decode_with_the_default_session() -> None:
    codec = StdioCodec("default")
    command = codec.decode(b'{"type":"prompt","text":"hi","request_id":"1"}')
    assert command == m.Prompt(text="hi", request_id="1", session_id="default")
    other = codec.decode(b'{"type":"interrupt","session_id":"x"}')
    assert other == m.Interrupt(session_id="x")
    parts = codec.decode(b'{"type":"prompt","parts":[{"type":"image","data":"iVBO","mime_type":"image/png"}]}')
    assert isinstance(parts, m.Prompt) and isinstance(parts.parts[0], m.ImagePart) and parts.parts[0].data == b"\x89PNG"[:3]


def test_runs_carry_the_transports_policy_unless_they_choose_their_own() -> None:
    policy = m.ApprovalPolicy(mode="reject", reason="no")
    codec = StdioCodec("d", approval=policy)
    for line in (b'{"type":"prompt","text":"hi"}', b'{"type":"regenerate"}', b'{"type":"continue"}'):
        command = codec.decode(line)
        assert isinstance(command, (m.Prompt, m.Regenerate, m.Continue)) and command.options.approval == policy
    own = codec.decode(b'{"type":"prompt","text":"hi","options":{"approval":{"mode":"approve"}}}')
    assert isinstance(own, m.Prompt) and own.options.approval == m.ApprovalPolicy(mode="approve")
    assert codec.decode(b'{"type":"interrupt"}') == m.Interrupt(session_id="d")


def test_errors_name_the_problem_and_keep_the_request_id() -> None:
    codec = StdioCodec("d")
    cases = {
        b"not json": ("parse_error", "malformed JSON"),
        b'{"request_id":"7"}': ("invalid_request", "missing 'type'"),
        b'{"type":"dance","request_id":"7"}': ("invalid_request", "unknown command type 'dance'"),
        b'{"type":"prompt","text":5,"request_id":"7"}': ("invalid_request", "invalid 'prompt' command"),
        b"[1,2]": ("invalid_request", "JSON object"),
    }
    for line, (code, words) in cases.items():
        reply = codec.decode(line)
        assert isinstance(reply, m.ErrorReply), line
        assert reply.error.code == code and words in reply.error.message, (line, reply)
        if b'"request_id"' in line:
            assert reply.request_id == "7"


def test_events_encode_as_native_json() -> None:
    event = m.TextDelta(session_id="s", seq=3, run_id="r", request_id="1", text="hé")
    assert msgspec.json.decode(StdioCodec.encode(event)) == {
        "type": "text_delta", "text": "hé", "session_id": "s", "seq": 3, "run_id": "r", "request_id": "1",
    }
    too_long = StdioCodec().too_long(10, 5)
    assert too_long.error.code == "too_large"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
command_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["prompt", "interrupt", "resolve_tool_approval", "run_command", "bogus"])},
    optional={"text": json_values, "session_id": json_values, "request_id": json_values, "name": json_values, "approved": json_values},
)


@given(st.binary(max_size=200) | json_values.map(msgspec.json.encode) | command_like.map(msgspec.json.encode))
def test_fuzz_never_raises(line: bytes) -> None:
    result = StdioCodec("d").decode(line)
    assert isinstance(result, (m.ErrorReply, *m.Command.__args__))  # type: ignore[attr-defined]
