"""The codec on its own: lines in, commands out; events in, text out. No sockets."""

from hypothesis import given
from hypothesis import strategies as st

from gateway_linechat.codec import Authenticate, Failure, Greeting, Invalid, LinechatCodec, presented_token
from kernel import model as m
from transports.shared import LineSplitter, LineTooLong

RUN = {"session_id": "s1", "run_id": "r1"}


def test_a_line_is_a_prompt_and_a_slash_line_a_command() -> None:
    codec = LinechatCodec("s1")
    assert codec.decode(b"  hello there ") == m.Prompt(session_id="s1", text="hello there")
    assert codec.decode(b"//tool roll_dice {}") == m.Prompt(session_id="s1", text="/tool roll_dice {}")
    assert codec.decode(b"/stop") == m.Interrupt(session_id="s1")
    assert codec.decode(b"/history 5") == m.RunCommand(session_id="s1", name="history", args="5")
    assert codec.decode(b"/token  s3cret") == Authenticate("s3cret")
    assert codec.decode(b"   ") is None
    assert codec.decode(b"/") == Invalid("a command needs a name, e.g. /help")
    assert codec.decode(b"\xff\xfe") == Invalid("lines must be UTF-8 text")
    assert codec.too_long(100, 10) == Invalid("line of 100 bytes is over the 10-byte limit; ignored")
    assert presented_token(b"/token s3cret") == "s3cret" and presented_token(b"s3cret") is None


def test_approve_and_deny_answer_the_open_question() -> None:
    codec = LinechatCodec("s1")
    assert codec.decode(b"/approve") == m.ResolveToolApproval(session_id="s1", approved=True)
    codec.render(m.TurnLimitReached(**RUN, current_turns=3, max_turns=3))
    assert codec.decode(b"/deny enough") == m.ResolveTurnLimit(session_id="s1", confirmed=False, reason="enough")
    codec.render(m.ToolApprovalRequested(**RUN, call_id="c7", name="shout", arguments="{}"))
    assert codec.decode(b"/approve") == m.ResolveToolApproval(session_id="s1", call_id="c7", approved=True)


def test_prompts_carry_the_approval_policy_of_the_server() -> None:
    policy = m.ApprovalPolicy(mode="reject", allow_tools=("shout",), reason="not here")
    prompt = LinechatCodec("s1", approval=policy).decode(b"hi")
    assert prompt == m.Prompt(session_id="s1", text="hi", options=m.PromptOptions(approval=policy))


def test_a_run_renders_as_text_tool_lines_and_a_blank_line() -> None:
    codec = LinechatCodec("s1")
    events = [
        m.RunStarted(**RUN),
        m.TurnStarted(**RUN, turn=1),
        m.TextDelta(**RUN, text="Let me "),
        m.TextDelta(**RUN, text="roll."),
        m.ToolCallStarted(**RUN, call_id="c1", name="roll_dice", arguments='{"count": 2}'),
        m.ToolApprovalRequested(**RUN, call_id="c1", name="roll_dice", arguments='{"count": 2}'),
        m.ToolResult(**RUN, call_id="c1", name="roll_dice", result="3, 5\n(total 8)"),
        m.TextDelta(**RUN, text="You rolled 8."),
        m.RunFinished(**RUN, text="Let me roll.You rolled 8."),
    ]
    assert "".join(codec.render(e) for e in events) == (
        "Let me roll.\n"
        '[tool roll_dice({"count": 2})]\n'
        '[approve roll_dice({"count": 2})? /approve or /deny]\n'
        "[result roll_dice: 3, 5 (total 8)]\n"
        "You rolled 8.\n"
        "\n"
    )
    assert codec.pending is None


def test_how_runs_end_badly() -> None:
    codec = LinechatCodec("s1")
    interrupted = [m.TextDelta(**RUN, text="Once upon"), m.RunFinished(**RUN, text="Once upon", interrupted=True, stop_reason="interrupted")]
    assert "".join(codec.render(e) for e in interrupted) == "Once upon\n[stopped: interrupted]\n\n"
    failed = m.RunFailed(**RUN, error=m.ErrorInfo(code="provider_error", message="upstream exploded"))
    assert codec.render(failed) == "! upstream exploded\n\n"
    denied = m.ToolResult(**RUN, call_id="c1", name="write_file", result="the user said no", rejected=True)
    assert codec.render(denied) == "[result write_file denied: the user said no]\n"


def test_replies_and_local_messages() -> None:
    codec = LinechatCodec("s1")
    assert codec.render(m.Accepted(session_id="s1", run_id="r1")) == ""
    assert codec.render(m.CommandOutput(name="help", output="/help\n\n/clear\n")) == "/help\n \n/clear\n\n"
    assert codec.render(codec.failure(m.Prompt(text="hi"), "busy")) == "! busy\n\n"
    assert codec.render(codec.failure(m.Interrupt(), "nothing to interrupt")) == "! nothing to interrupt\n"
    assert codec.render(Failure("bye", ends_response=False)) == "! bye\n"
    assert codec.render(Greeting("s1", "General Assistant", "echo")).startswith("linechat: session s1, agent General Assistant (echo).\n")


def test_an_empty_line_in_the_model_text_cannot_end_the_response() -> None:
    codec = LinechatCodec("s1")
    text = codec.render(m.TextDelta(**RUN, text="a\n\n")) + codec.render(m.TextDelta(**RUN, text="\nb"))
    assert text == "a\n \n \nb"


@given(st.lists(st.binary(max_size=40), max_size=20))
def test_any_bytes_decode_without_raising(chunks: list[bytes]) -> None:
    splitter, codec = LineSplitter(max_line_bytes=16), LinechatCodec("s1")
    for line in [line for chunk in chunks for line in splitter.feed(chunk)] + splitter.end():
        codec.decode(line) if isinstance(line, bytes) else codec.too_long(line.size, line.limit)
        assert isinstance(line, LineTooLong) or len(line) <= 16


@given(st.lists(st.text(alphabet="ab \n\r", max_size=12), max_size=12))
def test_streamed_text_never_contains_an_empty_line(deltas: list[str]) -> None:
    codec = LinechatCodec("s1")
    out = "".join(codec.render(m.TextDelta(**RUN, text=d)) for d in deltas)
    assert "\n\n" not in out and not out.startswith("\n")
    response = out + codec.render(m.RunFinished(**RUN, text=""))
    assert response.split("\n")[-2:] == ["", ""]  # ends with its first empty line
