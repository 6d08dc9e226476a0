"""Fuzzing: the codec never raises, and a live server survives a burst of random frames."""

from __future__ import annotations

import base64
import json
import random
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from plugins.commands.builtin import BUILTIN_COMMANDS
from tests.asyncio_clients import in_asyncio
from transports.agent_cli.codec import AgentCliCodec, Incoming
from transports.agent_cli.inputs import Limits

from .helpers import client, serve

VARIANTS = ["Text", "Image", "File", "Instruction", "Multi", "ToolConfirmationResponse", "TurnConfirmationResponse",
            "GetCommands", "Interrupt", "Regenerate", "ClearContext", "text", ""]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
b64_text = st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()) | st.text(max_size=20)


@st.composite
def inputs(draw: st.DrawFn, depth: int = 0) -> Any:
    name = draw(st.sampled_from(VARIANTS))
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return name  # unit spelling (valid only for unit variants)
    if choice == 1:
        return {name: draw(json_values)}
    if name == "Image":
        return {name: {"data": draw(b64_text), "mime_type": draw(st.none() | st.sampled_from(["image/png", "text/plain", ""]))}}
    if name == "File":
        ctype = draw(st.sampled_from(["text/plain", "application/pdf", "application/octet-stream", "", "application/json"]))
        return {name: {"filename": draw(st.sampled_from(["a.txt", "a.bin", "x", ""])), "content_type": ctype, "data": draw(b64_text)}}
    if name == "Multi" and depth < 3:
        return {name: draw(st.lists(inputs(depth + 1), max_size=4))}
    if name == "Instruction":
        return {name: {"command": draw(st.text(max_size=10)), "parameters": draw(json_values)}}
    if name == "ToolConfirmationResponse":
        return {name: {"name": draw(st.text(max_size=5)), "arguments": draw(json_values), "approved": draw(st.booleans())}}
    if name == "TurnConfirmationResponse":
        return {name: {"confirmed": draw(st.booleans() | st.none()), "reason": draw(st.none() | st.text(max_size=5))}}
    return {name: draw(st.text(max_size=20) | st.none())}


requests = st.fixed_dictionaries(
    {"request_id": st.text(max_size=10) | st.integers(), "input": inputs()},
    optional={
        "stream": st.booleans() | st.none() | st.integers(),
        "use_tools": st.booleans() | st.none(),
        "config": st.none() | st.fixed_dictionaries({}, optional={"max_tokens": st.integers(-5, 10**6), "prompt": st.text(max_size=5)}),
    },
)


def check(codec: AgentCliCodec, data: str | bytes) -> None:
    out = codec.decode(data)
    if isinstance(out, str):
        frame = json.loads(out)
        assert set(frame) == {"request_id", "response", "error", "token_usage"}
        assert isinstance(frame["request_id"], str) and frame["error"]
    else:
        assert isinstance(out, Incoming) and out.command.session_id == "s"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_structured_requests_never_raise(request: dict[str, Any]) -> None:
    check(AgentCliCodec("s", limits=Limits(max_parts=3, max_depth=2)), json.dumps(request))


@settings(max_examples=300, deadline=None)
@given(st.text() | st.binary() | json_values.map(json.dumps))
def test_arbitrary_frames_never_raise(data: str | bytes) -> None:
    check(AgentCliCodec("s"), data)


RUN_IDS = st.sampled_from(["run1", "run2", "run3"])
CALL_IDS = st.sampled_from(["c1", "c2"])


def _ids(draw: st.DrawFn) -> dict[str, Any]:
    return {"session_id": "s", "run_id": draw(RUN_IDS), "request_id": draw(st.none() | st.sampled_from(["r1", "r2"]))}


@st.composite
def events(draw: st.DrawFn) -> m.Event:
    ids = _ids(draw)
    kind = draw(st.integers(0, 8))
    text = draw(st.text(max_size=10))
    if kind == 0:
        return m.TextDelta(**ids, text=text)
    if kind == 1:
        return m.ToolCallStarted(**ids, call_id=draw(CALL_IDS), name=text, arguments=draw(st.text(max_size=10) | json_values.map(json.dumps)))
    if kind == 2:
        return m.ToolApprovalRequested(**ids, call_id=draw(CALL_IDS), name=text, arguments=draw(st.text(max_size=10)))
    if kind == 3:
        outcome = draw(st.sampled_from(get_args(m.ToolOutcome)))
        error = None if outcome == "ok" else draw(st.none() | st.text(max_size=10))
        return m.ToolResult(**ids, call_id=draw(CALL_IDS), name=text, result=text, outcome=outcome, error=error, is_error=outcome != "ok")
    if kind == 4:
        return m.TurnLimitReached(**ids, current_turns=draw(st.integers(0, 5)), max_turns=draw(st.integers(0, 5)))
    if kind == 5:
        stop = draw(st.sampled_from(["end_turn", "turn_limit", "interrupted", "max_tokens"]))
        return m.RunFinished(**ids, text=text, interrupted=draw(st.booleans()), stop_reason=stop)
    if kind == 6:
        return m.RunFailed(**ids, error=m.ErrorInfo(code=draw(st.sampled_from(["timeout", "provider_error", "internal"])), message=text))
    if kind == 7:
        return m.ContextCleared(session_id="s", request_id=draw(st.none() | st.sampled_from(["r1", "r2"])))
    return m.TurnStarted(**ids, turn=1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.booleans(), max_size=3),
    st.lists(st.lists(events(), max_size=6), max_size=6),
    st.sampled_from(["Complete", "StreamComplete"]),
    st.sampled_from(["omit", "multi"]),
)
def test_event_sequences_never_raise(streams: list[bool], batches: list[list[m.Event]], tag: Any, activity: Any) -> None:
    codec = AgentCliCodec("s", complete_tag=tag, non_stream_tool_activity=activity)
    for n, stream in enumerate(streams):
        incoming = codec.decode(json.dumps({"request_id": f"r{n + 1}", "input": {"Text": "x"}, "stream": stream}))
        assert isinstance(incoming, Incoming)
        codec.on_reply(incoming, m.Accepted(session_id="s", run_id=f"run{n + 1}"))
    for batch in batches:
        for frame in codec.on_events(batch):
            assert set(json.loads(frame)) == {"request_id", "response", "error", "token_usage"}
    codec.events_lost("gone")
    assert codec.runs == {} and codec.approvals == {}


# ------------------------------------------------------------------ live burst


def random_frames(seed: int, count: int) -> list[str | bytes]:
    """Mutations of valid requests, random JSON and random bytes (deterministic)."""
    rng = random.Random(seed)
    valid = [
        {"request_id": "v", "input": {"Text": "hi"}, "stream": True},
        {"request_id": "v", "input": "GetCommands"},
        {"request_id": "v", "input": {"Instruction": {"command": "help", "parameters": {}}}},
        {"request_id": "v", "input": {"Image": {"data": "iVBORw0KGgo="}}},
        {"request_id": "v", "input": "Interrupt"},
        {"request_id": "v", "input": {"TurnConfirmationResponse": {"confirmed": True}}},
    ]
    out: list[str | bytes] = []
    for _ in range(count):
        roll = rng.random()
        text = json.dumps(rng.choice(valid))
        if roll < 0.4:
            cut = rng.randrange(len(text))
            text = text[:cut] + rng.choice(['"', "{", "}", "[", ",", ":", "\\", "\x00", "é", ""]) + text[cut + 1 :]
            out.append(text)
        elif roll < 0.6:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))
        elif roll < 0.8:
            out.append(json.dumps({"request_id": rng.choice(["a", 1, None]), "input": rng.choice(["Text", {"Multi": [[]]}, {"X": 1}, {}, [1]])}))
        else:
            out.append(text.encode() if rng.random() < 0.5 else text)
    return out


@pytest.mark.anyio
async def test_live_server_survives_a_burst_of_random_frames() -> None:
    burst = random_frames(seed=4, count=300)
    async with running_kernel(ScriptedProvider([text_turn("ok")]), commands=BUILTIN_COMMANDS) as kernel, serve(kernel) as url:

        async def go() -> list[dict[str, Any]]:
            async with client(url) as c:
                for frame in burst:
                    await c.send(frame)
                await c.send({"request_id": "final", "input": "GetCommands"})
                return await c.until(lambda f: f["request_id"] == "final", timeout=20)

        frames = await in_asyncio(go)
        assert json.loads(frames[-1]["response"]["Text"])["count"] == len(BUILTIN_COMMANDS)
        assert all(set(f) == {"request_id", "response", "error", "token_usage"} for f in frames)
        assert sum(1 for f in frames if str(f["error"]).startswith("Failed to parse request:")) > 100

        async def again() -> list[dict[str, Any]]:  # and a new connection works too
            async with client(url) as c:
                return await c.ask({"request_id": "after", "input": {"Text": "still there?"}})

        assert (await in_asyncio(again))[-1]["response"] == {"Text": "ok"}
