"""``model_responding`` (the upstream accepted a turn's request) shows nothing in any dialect.

The event only tells a dialect holding its response until the first output that it may send
its headers (tests/transports/http/test_runs.py: the headers arrive while the model works).
Fed the same run with and without it, every dialect's encoder writes exactly the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from kernel import model as m
from transports.a2a.codec import StreamEncoder as A2AEncoder
from transports.a2a.codec import TaskView
from transports.acp.codec import SessionStream
from transports.agent_cli.codec import AgentCliCodec
from transports.agui.events import RunEncoder, RunRecord, Segment
from transports.http.anthropic.reply_codec import StreamEncoder as AnthropicEncoder
from transports.http.openai.codec import ChunkEncoder
from transports.http.responses.codec import Echo, ResponseBuilder
from transports.openfang.codec import TurnEncoder
from transports.openfang.rest_codec import SseEncoder
from transports.packet.codec import RunCollector
from transports.shared import DeltaCoalescer
from transports.shared._tasks import RunTask

IDS = {"session_id": "s1", "run_id": "r1", "request_id": "q1"}


def run_events(*, responding: bool) -> list[m.Event]:
    """A run with two model calls (a tool call between them), the second streaming text;
    the same seqs either way (a run without ``model_responding`` has gaps where it was)."""
    events: list[m.Event] = [
        m.RunStarted(**IDS, agent_id="a1"),
        m.TurnStarted(**IDS, turn=1),
        m.ModelResponding(**IDS, turn=1),
        m.ToolCallStarted(**IDS, call_id="c1", name="read_file", arguments='{"path": "a"}'),
        m.ToolResult(**IDS, call_id="c1", name="read_file", result="text of a"),
        m.TurnStarted(**IDS, turn=2, iteration=1),
        m.ModelResponding(**IDS, turn=2),
        m.ReasoningDelta(**IDS, text="thinking"),
        m.TextDelta(**IDS, text="Hello"),
        m.TextDelta(**IDS, text=" world"),
        m.RunFinished(**IDS, text="Hello world", usage=m.Usage(input_tokens=3, output_tokens=2), iterations=1),
    ]
    stamped = [msgspec.structs.replace(event, seq=seq) for seq, event in enumerate(events, start=1)]
    return [event for event in stamped if responding or not isinstance(event, m.ModelResponding)]


Encode = Callable[[list[m.Event]], list[Any]]


def each(fresh: Callable[[], Callable[[m.Event], Any]]) -> Encode:
    """A fresh encoder's output for each event."""

    def encode(events: list[m.Event]) -> list[Any]:
        feed = fresh()
        return [feed(event) for event in events]

    return encode


def batches(fresh: Callable[[], Callable[[list[m.Event]], Any]]) -> Encode:
    """A fresh encoder fed batches, fed one event a batch: its output for each event."""

    def encode(events: list[m.Event]) -> list[Any]:
        feed = fresh()
        return [feed([event]) for event in events]

    return encode


def a2a(events: list[m.Event]) -> list[Any]:
    """The A2A stream's updates, their random message ids and their clock's timestamps left out."""
    encoder = A2AEncoder("t1", "ctx1")
    view = TaskView(task_id="t1", context_id="ctx1", state="working")
    encoded = [msgspec.json.encode(encoder.feed(event, view)).decode() for event in events]
    return [re.sub(r'"(message_?[iI]d|timestamp)":"[^"]*"', "", out) for out in encoded]


def responses(events: list[m.Event]) -> list[Any]:
    builder = ResponseBuilder(response_id="resp_1", created_at=1, model="m", echo=Echo(), client_tools=(), conversation_id=None)
    return [builder.feed(event) for event in events] + [builder.snapshot("completed")]


def openfang_rest(events: list[m.Event]) -> list[Any]:
    encoder = SseEncoder(DeltaCoalescer(0, 0))
    return [encoder.feed([event], 0.0) for event in events]


def tasks(events: list[m.Event]) -> list[Any]:
    task = RunTask("t1", "s1", run_id="r1")
    return [task.feed(event) for event in events] + [(task.state, task.text)]


ENCODERS: dict[str, Encode] = {
    "openai": each(lambda: ChunkEncoder(completion_id="c", created=1, model="m", include_usage=True).event),
    "anthropic": each(lambda: AnthropicEncoder(message_id="msg", model="m", key=b"k" * 32, show_thinking=True, input_estimate=3).event),
    "responses": responses,
    "a2a": a2a,
    "acp": each(lambda: SessionStream("/tmp", 200_000).updates),
    "agui": batches(lambda: RunEncoder(RunRecord("thread1", "r1", Segment(run_id="agui-run"), 0)).feed),
    "openfang ws": each(lambda: TurnEncoder({"q1"}).feed),
    "openfang rest": openfang_rest,
    "agent-cli": batches(lambda: AgentCliCodec("s1").on_events),
    "packet": each(lambda: RunCollector().feed),
    "tasks (A2A)": tasks,
}
#: What an encoder gives for an event it does not show.
NOTHING: tuple[Any, ...] = ([], None, b"", "", False, "[]", "null")


@pytest.mark.parametrize("dialect", ENCODERS)
def test_model_responding_shows_nothing(dialect: str) -> None:
    events = run_events(responding=True)
    with_it = ENCODERS[dialect](events)
    responding = [i for i, event in enumerate(events) if isinstance(event, m.ModelResponding)]
    assert all(with_it[i] in NOTHING for i in responding), [with_it[i] for i in responding]
    rest = [out for i, out in enumerate(with_it) if i not in responding]
    assert rest == ENCODERS[dialect](run_events(responding=False))
    assert any(out not in NOTHING for out in rest), f"{dialect}: the run itself shows nothing (the comparison would prove nothing)"
