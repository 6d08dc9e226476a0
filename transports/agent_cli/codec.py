"""Sans-IO codec of the Agent-CLI remote dialect (one connection's worth of state).

Frames in -> kernel commands (or an error frame to send back); kernel replies and
session events in -> frames out. No I/O and no exceptions: the server feeds it
what arrives and sends what it returns. State is per connection because the
dialect needs it: whether each run was asked for as a stream, the tool call a
``ToolConfirmationResponse`` answers (the wire names the tool, the kernel wants
the call id), the arguments a failed tool was called with, pending clears.

Reply rules (see ``docs/agent-cli.md``): a run ends with exactly one of ``Text``
(non-stream), the end marker ``Complete`` (stream) or an error frame; questions
and tool activity go out under the id of the request that started the run.
Non-streaming means one request, one reply (the document's client reads once per
request): tool activity travels only in streams, or inside the final reply as a
``Multi`` when ``non_stream_tool_activity = "multi"``; a question still goes out at
once, since the run cannot end without its answer.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from kernel import decode_json
from kernel import model as m
from transports.shared.coalesce import DeltaCoalescer

from . import wire
from .inputs import BadRequest, Limits, ParsedRequest, instruction_args, parse_request

CompleteTag = Literal["Complete", "StreamComplete"]
#: Tool activity of a non-streaming run: left out of its one reply, or inside it as ``Multi``.
NonStreamToolActivity = Literal["omit", "multi"]

#: Kernel error codes -> the document's error kinds (the leading word of ``error``).
ERROR_KINDS: dict[str, str] = {"parse_error": "parse_error", "timeout": "timeout_error", "draining": "connection_error"}
TURN_DECLINED = "The conversation ended: the turn limit was reached and the turn count was not reset."
TURN_QUESTION = "Reached the maximum number of conversation turns ({max} turns). Reset the turn count to continue?"
UNREADABLE_ID = "parse_error"
#: Stream chunks ready together merge into one frame up to this size: a writer that
#: fell behind must not send one frame bigger than clients accept (websockets: 1 MiB).
MAX_MERGED_STREAM_CHARS = 65_536

_encode = msgspec.json.Encoder().encode


def usage(u: m.Usage) -> wire.TokenUsage:
    return wire.TokenUsage(prompt_tokens=u.input_tokens, completion_tokens=u.output_tokens, total_tokens=u.total_tokens)


def json_value(text: str) -> Any:
    """A tool's JSON argument text as a value (the wire shows objects); unparsable stays text."""
    try:
        return decode_json(text)
    except msgspec.DecodeError:
        return text


class Incoming(msgspec.Struct, frozen=True, kw_only=True):
    """A request ready for the kernel."""

    request_id: str
    variant: str
    stream: bool
    command: m.Command


class _Run(msgspec.Struct, kw_only=True):
    request_id: str
    stream: bool
    #: ``ToolCall``/``ToolResult`` bodies kept for the final ``Multi`` of a non-streaming run.
    activity: list[Any] = msgspec.field(default_factory=list)


class _Approval(msgspec.Struct, kw_only=True):
    call_id: str
    run_id: str
    name: str
    request_id: str


class AgentCliCodec:
    def __init__(
        self,
        session_id: str,
        *,
        complete_tag: CompleteTag = "Complete",
        non_stream_tool_activity: NonStreamToolActivity = "omit",
        limits: Limits = Limits(),
        max_queued_requests: int = 8,
        approval: m.ApprovalPolicy | None = None,
        coalescer: DeltaCoalescer | None = None,
    ) -> None:
        self.session_id = session_id
        #: Streamed text held back up to a window (``coalesce_ms``) so a fast model makes fewer frames.
        self.coalescer = coalescer or DeltaCoalescer(0, 0)
        self._held_for: str | None = None  # the request whose streamed text the coalescer holds
        self.complete_tag = complete_tag
        self.non_stream_tool_activity = non_stream_tool_activity
        self.limits = limits
        self.max_queued_requests = max_queued_requests
        #: The policy prompts carry (the transport's ``tool_approval``); None: the kernel's default.
        self.approval = approval
        self.runs: dict[str, _Run] = {}
        self.approvals: dict[str, _Approval] = {}
        self._call_args: dict[str, tuple[str, Any]] = {}  # call id -> (run id, arguments)
        self._pending_clears: set[str] = set()
        self._expected: dict[str, bool] = {}  # request id -> stream, until the kernel accepts it

    # -------------------------------------------------------------- frames in

    def decode(self, data: str | bytes) -> Incoming | str:
        """One frame -> an :class:`Incoming` for the kernel, or an error frame to send back."""
        parsed = parse_request(data, self.limits)
        if isinstance(parsed, BadRequest):
            return self._bad(parsed)
        command = self._command(parsed)
        if isinstance(command, str):
            return command
        return Incoming(request_id=parsed.request_id, variant=parsed.variant, stream=parsed.stream, command=command)

    def _bad(self, bad: BadRequest) -> str:
        rid = bad.request_id if bad.request_id is not None else UNREADABLE_ID
        if bad.kind == "parse_error":
            return self.error(rid, f"Failed to parse request: {bad.message}")
        return self.error(rid, f"{bad.kind}: {bad.message}")

    def _command(self, req: ParsedRequest) -> m.Command | str:
        ids: dict[str, Any] = {"session_id": self.session_id, "request_id": req.request_id}
        variant = req.variant
        if variant in ("Text", "Image", "File", "Multi", "Regenerate"):
            if len(self.runs) > self.max_queued_requests:
                return self.error(
                    req.request_id,
                    f"processing_error: busy: {len(self.runs)} requests are already running or queued on this "
                    f"connection (at most {self.max_queued_requests} may wait); retry when one has finished",
                )
            self._expected[req.request_id] = req.stream
            options = req.options if self.approval is None else msgspec.structs.replace(req.options, approval=self.approval)
            if variant == "Regenerate":
                return m.Regenerate(**ids, options=options)
            return m.Prompt(**ids, parts=req.value, options=options)
        if variant == "Instruction":
            return m.RunCommand(**ids, name=req.value.command, args=instruction_args(req.value.parameters))
        if variant == "GetCommands":
            return m.ListCommands(**ids)
        if variant == "Interrupt":
            return m.Interrupt(**ids)
        if variant == "ClearContext":
            return m.ClearContext(**ids)
        if variant == "TurnConfirmationResponse":
            return m.ResolveTurnLimit(**ids, confirmed=req.value.confirmed, reason=req.value.reason)
        return self._tool_answer(req, ids)

    def _tool_answer(self, req: ParsedRequest, ids: dict[str, Any]) -> m.Command | str:
        """The wire names the tool; the kernel wants the pending call's id."""
        answer: wire.ToolConfirmationInput = req.value
        if not self.approvals:
            return self.error(req.request_id, "processing_error: no tool confirmation is pending")
        match = next((a for a in self.approvals.values() if a.name == answer.name), None)
        if match is None:
            waiting = ", ".join(repr(a.name) for a in self.approvals.values())
            return self.error(
                req.request_id, f"processing_error: no pending confirmation for tool {answer.name!r} (waiting for {waiting})"
            )
        del self.approvals[match.call_id]  # answered once; a second answer finds nothing pending
        return m.ResolveToolApproval(**ids, call_id=match.call_id, approved=answer.approved, reason=answer.reason)

    # -------------------------------------------------------------- replies

    def on_reply(self, incoming: Incoming, reply: m.Reply) -> list[str]:
        """The kernel's reply to ``incoming`` -> frames to send now (often none)."""
        rid = incoming.request_id
        self._expected.pop(rid, None)
        if isinstance(reply, m.Accepted):
            if reply.run_id is not None:
                self.runs.setdefault(reply.run_id, _Run(request_id=rid, stream=incoming.stream))
            elif isinstance(incoming.command, m.ClearContext):
                self._pending_clears.add(rid)  # acknowledged when the clear has happened
            return []
        if isinstance(reply, m.CommandList):
            listing = {"commands": [{"name": c.name, "description": c.description} for c in reply.commands], "count": len(reply.commands)}
            return [self.text(rid, _encode(listing).decode("utf-8"), wire.ZERO_USAGE)]
        if isinstance(reply, m.CommandOutput):
            return [self.text(rid, reply.output, wire.ZERO_USAGE)]
        if isinstance(reply, m.Done) and isinstance(incoming.command, m.ClearContext):
            return [self.text(rid, "Context cleared.", wire.ZERO_USAGE)]
        return []  # Interrupt and confirmations: the run's own frames are the answer

    def on_error(self, incoming: Incoming, exc: m.KernelError) -> list[str]:
        self._expected.pop(incoming.request_id, None)
        if isinstance(incoming.command, m.Interrupt) and exc.code == "invalid_request":
            return [self.error(incoming.request_id, exc.message)]  # "No active model output to interrupt"
        return [self.error(incoming.request_id, f"{ERROR_KINDS.get(exc.code, 'processing_error')}: {exc.message}")]

    # -------------------------------------------------------------- events

    @property
    def deadline(self) -> float | None:
        """When held-back streamed text must go out (the writer waits for events until then)."""
        return self.coalescer.deadline

    def on_events(self, events: list[m.Event], now: float = 0.0) -> list[str]:
        """Session events -> frames; adjacent stream chunks of one request become one frame
        and, with a coalescing window, wait in it (any other frame sends them first)."""
        frames = [frame for event in events for frame in self._event(event)]
        return self._encode_merged(self._coalesce(frames, now) if self.coalescer.enabled else frames)

    def tick(self, now: float) -> list[str]:
        """The window passed with no new event: the held-back text, if its time has come."""
        return self._encode_merged(self._held(self.coalescer.due(now)))

    def _held(self, text: str | None) -> list[wire.RemoteResponse]:
        return [] if text is None or self._held_for is None else [_frame(self._held_for, wire.StreamBody(text))]

    def _coalesce(self, frames: list[wire.RemoteResponse], now: float) -> list[wire.RemoteResponse]:
        """Stream text into the window; anything else (or another request's text) flushes it."""
        out: list[wire.RemoteResponse] = []
        for frame in frames:
            streamed = frame.response.value if isinstance(frame.response, wire.StreamBody) else None
            if streamed is None or frame.request_id != self._held_for:
                out += self._held(self.coalescer.flush())
            if streamed is None:
                out.append(frame)
                continue
            self._held_for = frame.request_id
            out += self._held(self.coalescer.push(streamed, now))
        return out

    @staticmethod
    def _encode_merged(frames: list[wire.RemoteResponse]) -> list[str]:
        out: list[wire.RemoteResponse] = []
        for frame in frames:
            last = out[-1] if out else None
            if (
                last is not None
                and isinstance(frame.response, wire.StreamBody)
                and isinstance(last.response, wire.StreamBody)
                and last.request_id == frame.request_id
                and len(last.response.value) + len(frame.response.value) <= MAX_MERGED_STREAM_CHARS
            ):
                last.response = wire.StreamBody(last.response.value + frame.response.value)
            else:
                out.append(frame)
        return [_encode(frame).decode("utf-8") for frame in out]

    def _run(self, event: m.RunEvent, *, end: bool = False) -> _Run:
        """The run an event belongs to. A run not (yet) acknowledged by ``on_reply`` is
        looked up by request id, so it keeps the stream mode its request asked for."""
        run = self.runs.get(event.run_id)
        if run is None:
            stream = self._expected.pop(event.request_id, False) if event.request_id else False
            run = _Run(request_id=event.request_id or event.run_id, stream=stream)
            if not end:
                self.runs[event.run_id] = run
        elif end:
            del self.runs[event.run_id]
        return run

    def _event(self, event: m.Event) -> list[wire.RemoteResponse]:
        if isinstance(event, m.TextDelta):
            run = self._run(event)
            return [_frame(run.request_id, wire.StreamBody(event.text))] if run.stream else []
        if isinstance(event, m.ToolCallStarted):
            args = json_value(event.arguments)
            self._call_args[event.call_id] = (event.run_id, args)
            return self._tool_activity(self._run(event), wire.ToolCallBody(wire.NamedArgs(name=event.name, arguments=args)))
        if isinstance(event, m.ToolApprovalRequested):
            rid = self._run(event).request_id
            self.approvals[event.call_id] = _Approval(call_id=event.call_id, run_id=event.run_id, name=event.name, request_id=rid)
            info = wire.ConfirmationInfo(name=event.name, arguments=json_value(event.arguments), description=event.description or None)
            return [_frame(rid, wire.ToolConfirmationBody(info))]
        if isinstance(event, m.ToolResult):
            return self._tool_result(event)
        if isinstance(event, m.TurnLimitReached):
            turns = wire.TurnInfo(current_turns=event.current_turns, max_turns=event.max_turns, reason=TURN_QUESTION.format(max=event.max_turns))
            return [_frame(self._run(event).request_id, wire.TurnConfirmationBody(turns))]
        # A failure, or an interrupt the client did not ask for (drain, shutdown, timeout):
        # the error frame, never a Complete marker that would make a partial answer look whole.
        failed = m.forced_end_error(event) if isinstance(event, m.RUN_END_EVENTS) else None
        if isinstance(event, m.RunFinished) and failed is None:
            return self._finished(event)
        if isinstance(event, m.RUN_END_EVENTS) and failed is not None:
            run = self._run(event, end=True)
            self._forget_run(event.run_id)
            kind = ERROR_KINDS.get(failed.code, "processing_error")
            return [_frame(run.request_id, wire.TextBody(event.text), f"{kind}: {failed.message}", usage(event.usage))]
        if isinstance(event, m.ContextCleared) and event.request_id in self._pending_clears:
            self._pending_clears.discard(event.request_id)
            return [_frame(event.request_id, wire.TextBody("Context cleared."), None, wire.ZERO_USAGE)]
        return []  # run_started, turn_started, reasoning: nothing in this dialect

    def _tool_activity(self, run: _Run, body: Any) -> list[wire.RemoteResponse]:
        """A ``ToolCall``/``ToolResult``: its own frame in a stream; in a non-streaming run
        kept for the final ``Multi`` (option ``multi``) or left out (the default)."""
        if run.stream:
            return [_frame(run.request_id, body)]
        if self.non_stream_tool_activity == "multi":
            run.activity.append(body)
        return []

    def _tool_result(self, event: m.ToolResult) -> list[wire.RemoteResponse]:
        run = self._run(event)
        self.approvals.pop(event.call_id, None)
        args: Any = self._call_args.pop(event.call_id, ("", {}))[1]
        if event.outcome != "ok" and event.outcome not in m.REFUSED_OUTCOMES:  # it ran and failed; a refusal is a result
            error = wire.ToolError(
                type="tool_execution_error",
                message=f"Tool '{event.name}' execution failed",
                details=wire.ToolErrorDetails(tool=event.name, error=event.error or event.result, arguments=args),
            )
            if not run.stream:  # inside a Multi the failure is the result, in the document's structured shape
                return self._tool_activity(run, wire.ToolResultBody(wire.NamedResult(name=event.name, result=error)))
            return [_frame(run.request_id, wire.TextBody(""), _encode(error).decode("utf-8"))]
        return self._tool_activity(run, wire.ToolResultBody(wire.NamedResult(name=event.name, result=event.result)))

    def _finished(self, event: m.RunFinished) -> list[wire.RemoteResponse]:
        run = self._run(event, end=True)
        self._forget_run(event.run_id)
        rid, tokens = run.request_id, usage(event.usage)
        if run.stream:
            frames = [_frame(rid, wire.TextBody(TURN_DECLINED), None, tokens)] if event.stop_reason == "turn_limit" else []
            info = wire.CompleteInfo(token_usage=tokens, interrupted=event.interrupted)
            body = wire.CompleteBody(info) if self.complete_tag == "Complete" else wire.StreamCompleteBody(info)
            return [*frames, _frame(rid, body)]
        text = wire.TextBody(TURN_DECLINED if event.stop_reason == "turn_limit" else event.text)
        reply = wire.MultiBody([*run.activity, text]) if run.activity else text
        return [_frame(rid, reply, "interrupted" if event.interrupted else None, tokens)]

    def _forget_run(self, run_id: str) -> None:
        """A run ended: no question of it can still be pending, no call of it still open."""
        for call_id in [c for c, a in self.approvals.items() if a.run_id == run_id]:
            del self.approvals[call_id]
        for call_id in [c for c, (owner, _) in self._call_args.items() if owner == run_id]:
            del self._call_args[call_id]

    # -------------------------------------------------------------- connection-level

    def events_lost(self, reason: str) -> list[str]:
        """This connection missed events: end every open run with a ``connection_error``
        (after the text held back for it)."""
        frames = self._encode_merged(self._held(self.coalescer.flush()))
        frames += [self.error(run.request_id, f"connection_error: {reason}") for run in self.runs.values()]
        self.runs.clear()
        self._expected.clear()
        self.approvals.clear()
        self._call_args.clear()
        return frames

    def too_large(self, size: int, limit: int) -> str:
        return self.error(UNREADABLE_ID, f"Failed to parse request: message of {size} bytes is over the {limit}-byte limit")

    def rate_limited(self, per_minute: int, retry_after_s: float) -> str:
        return self.error(
            UNREADABLE_ID, f"processing_error: rate limited: more than {per_minute} requests a minute; retry in {retry_after_s:g}s"
        )

    def invalid_frame(self, reason: str) -> str:
        return self.error(UNREADABLE_ID, f"Failed to parse request: {reason}")

    # -------------------------------------------------------------- frame helpers

    @staticmethod
    def text(request_id: str, text: str, tokens: wire.TokenUsage | None = None) -> str:
        return _encode(_frame(request_id, wire.TextBody(text), None, tokens)).decode("utf-8")

    @staticmethod
    def error(request_id: str, message: str) -> str:
        return _encode(_frame(request_id, wire.TextBody(""), message)).decode("utf-8")


def _frame(request_id: str, body: Any, error: str | None = None, tokens: wire.TokenUsage | None = None) -> wire.RemoteResponse:
    return wire.RemoteResponse(request_id=request_id, response=body, error=error, token_usage=tokens)
