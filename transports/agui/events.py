"""Sans-IO codec of AG-UI, the event side: one kernel run's events -> AG-UI events.

A kernel run is one AG-UI run — or several, when it asks a question: AG-UI's run ends at
the question (``RUN_FINISHED`` whose outcome is the interrupt) while the kernel run waits,
and the client's next run, whose ``resume`` answers it, carries on with the same kernel
run. A :class:`RunRecord` names the AG-UI runs of one kernel run; the server keeps the
latest of each thread in a :class:`RunIndex`.

Every SSE event carries ``id:`` = the seq of the kernel event it comes from, on the last
AG-UI event of those it became (the others carry none), so that a client resuming after
an id has every event of that kernel event and none of the next. Each of those groups
ends with the one event that is not idempotent for the client (text, arguments, a
result, the run's end): a group cut in two by a lost connection is replayed whole and
nothing is applied twice. That is why ``TOOL_CALL_END`` goes out with the event after
the call's start (its result, its question, the next call or the run's end).

An encoder that resumes (``after``) is fed the kernel run from its start: it passes
over the events the client has (keeping its state), then opens again what the client
holds open — the run, a text or reasoning message, a tool call — with the same ids, and
goes on. Message ids derive from kernel seqs (never merged), so every encoder of a run
gives the same ids. Pure; imports the model, the run watch and the wire only.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from kernel import RunWatch
from kernel import model as m

from . import wire
from .codec import approval_interrupt_id, turn_limit_interrupt_id

_encode = msgspec.json.Encoder().encode

#: The ``payload`` a client sends to answer an interrupt (its ``responseSchema``).
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}, "remember": {"type": "boolean"}},
    "required": ["approved"],
}
TURN_LIMIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}

#: One SSE event: its JSON data, and its ``id:`` (None: no id field).
Frame = tuple[bytes, str | None]


class Segment(msgspec.Struct, frozen=True):
    """One AG-UI run: a kernel run from its start, or from an answered interrupt on."""

    run_id: str
    parent_run_id: str | None = None


class RunRecord:
    """One kernel run of a thread, as AG-UI clients see it.

    ``after_seq``: a seq before the run's first event (replaying the session's events
    after it replays the whole run). ``resumed``: interrupt id -> the AG-UI run whose
    ``resume`` answered it. An interrupt answered some other way (a timeout, another
    dialect) continues under a run id made from its own.
    """

    def __init__(self, thread_id: str, kernel_run_id: str, first: Segment, after_seq: int) -> None:
        self.thread_id = thread_id
        self.kernel_run_id = kernel_run_id
        self.first = first
        self.after_seq = after_seq
        self.resumed: dict[str, Segment] = {}

    def after_interrupt(self, interrupt_id: str) -> Segment:
        return self.resumed.get(interrupt_id) or Segment(run_id=f"{interrupt_id}:continued")


class RunIndex:
    """The latest kernel run of each thread (the least recently used forgotten first)."""

    def __init__(self, max_threads: int = 1024) -> None:
        self.max_threads = max_threads
        self._records: OrderedDict[str, RunRecord] = OrderedDict()

    def remember(self, record: RunRecord) -> None:
        self._records[record.thread_id] = record
        self._records.move_to_end(record.thread_id)
        while len(self._records) > self.max_threads:
            self._records.popitem(last=False)

    def latest(self, thread_id: str) -> RunRecord | None:
        record = self._records.get(thread_id)
        if record is not None:
            self._records.move_to_end(thread_id)
        return record


class _Call(msgspec.Struct):
    id: str
    name: str
    parent: str


class RunEncoder:
    """Kernel events of one run -> SSE frames of AG-UI events (``after``: resume past a seq)."""

    def __init__(self, record: RunRecord, *, after: int | None = None) -> None:
        self.record = record
        self.watch = RunWatch(None, record.kernel_run_id)
        self._after = after
        self._segment: Segment | None = None  # the AG-UI run open now
        self._interrupt: str | None = None  # the interrupt the last AG-UI run ended with
        self._message_id = f"{record.kernel_run_id}-0"
        self._text_open = False
        self._reasoning_open = False
        self._calls: list[_Call] = []  # started, their TOOL_CALL_END not sent yet
        self.ended = False

    @property
    def waiting(self) -> str | None:
        """The interrupt the client must answer (with ``resume``) before the run goes on."""
        return self._interrupt if self._segment is None and not self.ended else None

    def feed(self, events: Iterable[m.Event]) -> list[Frame]:
        frames: list[Frame] = []
        for event in events:
            if not self.watch.feed(event):
                continue
            hidden = self._after is not None and event.seq <= self._after
            if self._after is not None and not hidden:
                frames += [(_encode(e), None) for e in self._reopen()]
                self._after = None
            group = self._encode(event)
            if group and not hidden:
                frames += [(_encode(e), None) for e in group[:-1]]
                frames.append((_encode(group[-1]), str(event.seq)))
        return frames

    def open_with(self, messages: Sequence[wire.Message]) -> list[Frame]:
        """Open the run with a snapshot of the thread (a client joining a run it did not start)."""
        group: list[wire.Event] = []
        self._begin(group)
        group.append(wire.MessagesSnapshot(messages=list(messages)))
        return [(_encode(e), None) for e in group]

    def sync(self, messages: Sequence[wire.Message]) -> list[Frame]:
        """A run with nothing new to do: the thread's messages, and done."""
        frames = self.open_with(messages)
        frames.append((_encode(self._finished(wire.SuccessOutcome())), None))
        self.ended = True
        return frames

    def give_up(self, code: m.ErrorCode, message: str) -> list[Frame]:
        """The run's end will not come through this stream (its events were lost)."""
        failed = self.watch.give_up(self.record.thread_id, code, message)
        self.ended = True
        return [(_encode(self._failed(failed.error)), None)]

    # ---------------------------------------------------------- translation

    def _reopen(self) -> list[wire.Event]:
        """What a resuming client holds open, opened again with the same ids."""
        if self._segment is None:
            return []
        out: list[wire.Event] = [self._started(self._segment)]
        if self._text_open:
            out.append(wire.TextMessageStart(message_id=self._message_id, role="assistant"))
        if self._reasoning_open:
            out += [wire.ReasoningStart(message_id=self._reasoning_id), wire.ReasoningMessageStart(message_id=self._reasoning_id, role="reasoning")]
        out += [wire.ToolCallStart(tool_call_id=c.id, tool_call_name=c.name, parent_message_id=c.parent) for c in self._calls]
        return out

    @property
    def _reasoning_id(self) -> str:
        return f"{self._message_id}-reasoning"

    def _started(self, segment: Segment) -> wire.RunStarted:
        return wire.RunStarted(
            thread_id=self.record.thread_id, run_id=segment.run_id, parent_run_id=segment.parent_run_id, protocol_version=wire.PROTOCOL_VERSION
        )

    def _begin(self, group: list[wire.Event]) -> None:
        """Open an AG-UI run if none is open: the first, or the one after an interrupt."""
        if self._segment is not None:
            return
        self._segment = self.record.first if self._interrupt is None else self.record.after_interrupt(self._interrupt)
        self._interrupt = None
        group.append(self._started(self._segment))

    def _close(self, group: list[wire.Event], *, text: bool = True, reasoning: bool = True, calls: bool = True) -> None:
        if reasoning and self._reasoning_open:
            group += [wire.ReasoningMessageEnd(message_id=self._reasoning_id), wire.ReasoningEnd(message_id=self._reasoning_id)]
            self._reasoning_open = False
        if text and self._text_open:
            group.append(wire.TextMessageEnd(message_id=self._message_id))
            self._text_open = False
        if calls:
            group += [wire.ToolCallEnd(tool_call_id=c.id) for c in self._calls]
            self._calls = []

    def _finished(self, outcome: wire.Outcome, **extra: Any) -> wire.RunFinished:
        assert self._segment is not None
        finished = wire.RunFinished(thread_id=self.record.thread_id, run_id=self._segment.run_id, outcome=outcome, **extra)
        self._segment = None
        return finished

    def _failed(self, error: m.ErrorInfo) -> wire.RunError:
        self._segment = None
        return wire.RunError(message=error.message, code=error.code)

    def _encode(self, event: m.Event) -> list[wire.Event]:
        group: list[wire.Event] = []
        # A failure, or an interrupt the client did not ask for (drain, shutdown, timeout),
        # is RUN_ERROR; the client's own interrupt is the run's ``cancelled`` outcome.
        failed = m.forced_end_error(event) if isinstance(event, m.RUN_END_EVENTS) else None
        if failed is not None:
            self.ended = True
            return [self._failed(failed)]
        if isinstance(event, m.RunStarted):
            self._begin(group)
        elif isinstance(event, m.TurnStarted):
            if self._segment is not None:
                self._close(group)
            self._message_id = f"{self.record.kernel_run_id}-{event.seq}"
        elif isinstance(event, m.TextDelta) and event.text:
            self._begin(group)
            self._close(group, text=False)
            if not self._text_open:
                group.append(wire.TextMessageStart(message_id=self._message_id, role="assistant"))
                self._text_open = True
            group.append(wire.TextMessageContent(message_id=self._message_id, delta=event.text))
        elif isinstance(event, m.ReasoningDelta) and event.text:
            self._begin(group)
            self._close(group, reasoning=False)
            if not self._reasoning_open:
                group += [wire.ReasoningStart(message_id=self._reasoning_id), wire.ReasoningMessageStart(message_id=self._reasoning_id, role="reasoning")]
                self._reasoning_open = True
            group.append(wire.ReasoningMessageContent(message_id=self._reasoning_id, delta=event.text))
        elif isinstance(event, m.ToolCallStarted):
            self._begin(group)
            self._close(group)
            group.append(wire.ToolCallStart(tool_call_id=event.call_id, tool_call_name=event.name, parent_message_id=self._message_id))
            if event.arguments:
                group.append(wire.ToolCallArgs(tool_call_id=event.call_id, delta=event.arguments))
            self._calls.append(_Call(id=event.call_id, name=event.name, parent=self._message_id))
        elif isinstance(event, m.ToolResult):
            self._begin(group)
            self._close(group)
            outcome: dict[str, Any] = {"outcome": event.outcome}
            if event.error is not None:
                outcome["error"] = event.error
            group.append(
                wire.ToolCallResult(
                    message_id=f"{self._message_id}-{event.call_id}", tool_call_id=event.call_id, content=event.result, role="tool", metadata=outcome
                )
            )
        elif isinstance(event, (m.ToolApprovalRequested, m.TurnLimitReached)):
            self._begin(group)
            self._close(group)
            interrupt = _interrupt(event)
            group.append(self._finished(wire.InterruptOutcome(interrupts=[interrupt])))
            self._interrupt = interrupt.id
        elif isinstance(event, m.RunFinished):
            self._begin(group)
            self._close(group)
            group.append(self._finished(_outcome(event), result={"stopReason": event.stop_reason}, usage=_usage(event.usage)))
            self.ended = True
        return group


def _interrupt(event: m.ToolApprovalRequested | m.TurnLimitReached) -> wire.Interrupt:
    if isinstance(event, m.ToolApprovalRequested):
        metadata: dict[str, Any] = {"toolName": event.name, "arguments": event.arguments}
        if event.timeout_s is not None:
            metadata["timeoutS"] = event.timeout_s
        return wire.Interrupt(
            id=approval_interrupt_id(event.seq, event.call_id),
            reason="tool_approval",
            message=f"Allow the tool {event.name} to run with {event.arguments}?",
            tool_call_id=event.call_id,
            response_schema=APPROVAL_SCHEMA,
            metadata=metadata,
        )
    return wire.Interrupt(
        id=turn_limit_interrupt_id(event.seq),
        reason="turn_limit",
        message=f"{event.reason or 'The run reached its turn limit'}. Continue?",
        response_schema=TURN_LIMIT_SCHEMA,
        metadata={"currentTurns": event.current_turns, "maxTurns": event.max_turns},
    )


def _outcome(event: m.RunFinished) -> wire.Outcome:
    if event.interrupted:
        return wire.CancelledOutcome()
    pending = [call.id for call in event.pending_tool_calls]
    return wire.SuccessOutcome(pending_tool_call_ids=pending or None)


def _usage(usage: m.Usage) -> list[wire.TokenUsage] | None:
    if not usage.total_tokens:
        return None
    return [wire.TokenUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, total_tokens=usage.total_tokens)]


# ---------------------------------------------------------------- snapshots


def snapshot_messages(thread_id: str, history: Sequence[m.Message]) -> list[wire.Message]:
    """The thread's stored conversation in AG-UI's message shapes."""
    out: list[wire.Message] = []
    for i, msg in enumerate(history):
        message_id = f"{thread_id}-{i}"
        if msg.role == "user":
            out.append(wire.UserMessage(id=message_id, content=_out_parts(msg) if msg.parts else msg.content))
        elif msg.role == "assistant":
            calls = [wire.ToolCall(id=c.id, type="function", function=wire.FunctionCall(name=c.name, arguments=c.arguments)) for c in msg.tool_calls]
            out.append(wire.AssistantMessage(id=message_id, content=msg.content or None, tool_calls=calls or None))
        elif msg.role == "tool" and msg.tool_call_id is not None:
            error = msg.outcome if msg.outcome not in (None, "ok") else None
            out.append(wire.ToolMessage(id=message_id, content=msg.content, tool_call_id=msg.tool_call_id, error=error))
        elif msg.role == "system":
            out.append(wire.SystemMessage(id=message_id, content=msg.content))
    return out


def _out_parts(msg: m.Message) -> list[wire.Part]:
    parts: list[wire.Part] = []
    for part in msg.parts:
        if isinstance(part, m.TextPart):
            parts.append(wire.TextPart(text=part.text))
        elif isinstance(part, m.ImagePart):
            parts.append(wire.ImagePart(source=wire.DataSource(value=base64.b64encode(part.data).decode(), mime_type=part.mime_type)))
        else:
            parts.append(wire.DocumentPart(source=wire.DataSource(value=base64.b64encode(part.data).decode(), mime_type=part.content_type)))
    return parts

