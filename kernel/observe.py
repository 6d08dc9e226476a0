"""Telemetry's one source: the facts of a run, told to the observers the kernel was given.

Metrics, traces and log context are derived here, from what the kernel already knows — a
run started, its first delta, a model call begun and ended with its usage, a tool call and
its outcome, a question asked and answered, the run's end, a follower cut off — and not by
code in each transport, nor in ``Session.emit``'s per-delta path. Observers are registered
like plugins (``gateway_register_observers``); the kernel calls each of them in order.
Transports add what only they know: their connections and the caller's ``traceparent``
(which reaches the run through :class:`~kernel.model.Caller`).

Every hook is synchronous and must be cheap: it runs on the run's own task. An observer
that raises is logged and the run goes on. :class:`Observer` is a base with every hook a
no-op, so an observer overrides only what it uses.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import msgspec

from .model import Message, Usage

if TYPE_CHECKING:
    from .kernel import Kernel

log = logging.getLogger("gateway.kernel")

RunOutcome = Literal["completed", "interrupted", "failed", "limit"]
ApprovalOutcome = Literal["approved", "rejected", "timed_out"]
#: ``kernel.state.QuestionKind``, spelled again: importing the state machine loads anyio, and a
#: pure codec reads this module's records (``RunRecord``) without a server.
QuestionKind = Literal["tool_approval", "turn_limit"]

#: A W3C trace context header: version-traceid-parentid-flags (lower-case hex).
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def traceparent_trace_id(traceparent: str | None) -> str | None:
    """The trace id of a well-formed ``traceparent`` (not all zeros), else None."""
    if not traceparent:
        return None
    match = _TRACEPARENT.match(traceparent.strip().lower())
    if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return None
    return match.group(1)


class RunFacts:
    """One run as the observers see it, the same object from its start to its end.

    ``transport`` is the caller's transport name (``local`` for in-process callers), a
    bounded label; ``traceparent`` the caller's W3C trace context, if it sent a valid one.
    ``trace_id`` is what log lines of the run carry (a tracing observer may replace it with
    the trace it started). ``slots`` holds each observer's own per-run state, by its name.
    """

    __slots__ = ("agent", "first_delta", "request_id", "run_id", "session_id", "slots", "started", "trace_id", "traceparent", "transport")

    def __init__(
        self, *, agent: str, transport: str, session_id: str, run_id: str, request_id: str | None, traceparent: str | None
    ) -> None:
        self.agent = agent
        self.transport = transport
        self.session_id = session_id
        self.run_id = run_id
        self.request_id = request_id
        trace_id = traceparent_trace_id(traceparent)
        self.traceparent = traceparent.strip().lower() if traceparent and trace_id else None
        self.trace_id = trace_id
        self.started = time.perf_counter()
        self.first_delta: float | None = None
        self.slots: dict[str, Any] = {}


class ModelCall:
    """One call to the model within a run. ``traceparent`` is what the upstream request
    carries (the caller's by default; a tracing observer sets its own span's), and the
    result fields are filled in when the call ends. ``messages`` (what the model is sent) and
    ``output`` (the text parts it streamed, so far) are references, never copied: only an
    observer asked to record content reads them."""

    __slots__ = ("duration_s", "error_type", "finish_reason", "messages", "model", "output", "provider", "started", "traceparent", "usage")

    def __init__(
        self, *, provider: str, model: str, traceparent: str | None, messages: tuple[Message, ...] = (), output: list[str] | None = None
    ) -> None:
        self.provider = provider
        self.model = model
        self.traceparent = traceparent
        self.messages = messages
        self.output: list[str] = output if output is not None else []
        self.started = time.perf_counter()
        self.usage = Usage()
        self.finish_reason: str | None = None
        self.error_type: str | None = None
        self.duration_s = 0.0

    def end(self, *, usage: Usage, finish_reason: str | None, error_type: str | None) -> None:
        self.usage = usage
        self.finish_reason = finish_reason
        self.error_type = error_type
        self.duration_s = time.perf_counter() - self.started


class RunObserver(Protocol):
    """What the kernel tells an observer. All hooks are synchronous and cheap."""

    def run_started(self, run: RunFacts) -> None: ...
    def first_delta(self, run: RunFacts) -> None: ...
    def model_call_started(self, run: RunFacts, call: ModelCall) -> None: ...
    def model_call_ended(self, run: RunFacts, call: ModelCall) -> None: ...
    def tool_call_started(self, run: RunFacts, tool: str, call_id: str) -> None: ...
    def tool_call_ended(self, run: RunFacts, tool: str, call_id: str, outcome: str, duration_s: float) -> None: ...
    def question_asked(self, run: RunFacts, kind: QuestionKind) -> None: ...
    def question_answered(self, run: RunFacts, kind: QuestionKind, outcome: ApprovalOutcome) -> None: ...
    def run_ended(self, run: RunFacts, outcome: RunOutcome, error_code: str | None) -> None: ...
    def provider_error(self, provider: str, code: str) -> None: ...
    def follower_cut(self, transport: str | None) -> None: ...
    def command_forwarded(self) -> None: ...
    def connection_opened(self, transport: str) -> None: ...
    def connection_closed(self, transport: str) -> None: ...


#: ``factory(kernel) -> observer`` (None: nothing to observe, e.g. tracing not configured).
ObserverFactory = Callable[["Kernel"], RunObserver | None]


class Observer:
    """A :class:`RunObserver` whose every hook does nothing: subclass and override."""

    def run_started(self, run: RunFacts) -> None:
        pass

    def first_delta(self, run: RunFacts) -> None:
        pass

    def model_call_started(self, run: RunFacts, call: ModelCall) -> None:
        pass

    def model_call_ended(self, run: RunFacts, call: ModelCall) -> None:
        pass

    def tool_call_started(self, run: RunFacts, tool: str, call_id: str) -> None:
        pass

    def tool_call_ended(self, run: RunFacts, tool: str, call_id: str, outcome: str, duration_s: float) -> None:
        pass

    def question_asked(self, run: RunFacts, kind: QuestionKind) -> None:
        pass

    def question_answered(self, run: RunFacts, kind: QuestionKind, outcome: ApprovalOutcome) -> None:
        pass

    def run_ended(self, run: RunFacts, outcome: RunOutcome, error_code: str | None) -> None:
        pass

    def provider_error(self, provider: str, code: str) -> None:
        pass

    def follower_cut(self, transport: str | None) -> None:
        pass

    def command_forwarded(self) -> None:
        pass

    def connection_opened(self, transport: str) -> None:
        pass

    def connection_closed(self, transport: str) -> None:
        pass


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One ended run, as :class:`RecentRuns` keeps it: who asked (transport), whom (agent)."""

    seq: int
    ended_at: float
    transport: str
    agent: str
    session_id: str
    run_id: str
    outcome: RunOutcome
    input_tokens: int = 0
    output_tokens: int = 0
    error_code: str | None = None


class RecentRuns(Observer):
    """The last ``capacity`` runs that ended, with which transport asked which agent: the
    sessions' cross-dialect activity (OpenFang's comms page). One append per run."""

    def __init__(self, capacity: int = 500) -> None:
        self._runs: deque[RunRecord] = deque(maxlen=capacity)
        self._seq = 0

    def model_call_ended(self, run: RunFacts, call: ModelCall) -> None:
        spent = run.slots.get("recent", (0, 0))
        run.slots["recent"] = (spent[0] + call.usage.input_tokens, spent[1] + call.usage.output_tokens)

    def run_ended(self, run: RunFacts, outcome: RunOutcome, error_code: str | None) -> None:
        tokens_in, tokens_out = run.slots.pop("recent", (0, 0))
        self._seq += 1
        self._runs.append(
            RunRecord(
                seq=self._seq, ended_at=time.time(), transport=run.transport, agent=run.agent, session_id=run.session_id,
                run_id=run.run_id, outcome=outcome, input_tokens=tokens_in, output_tokens=tokens_out, error_code=error_code,
            )
        )

    def since(self, seq: int) -> list[RunRecord]:
        """The runs that ended after ``seq``, oldest first."""
        return [record for record in self._runs if record.seq > seq]


class Observers(Observer):
    """The kernel's observers, each hook called on every one in order (none: nothing done).

    An observer that raises is logged once per hook and never breaks the run. ``metrics``
    is the one that can render Prometheus text (for ``GET /metrics``), if any; ``recent``
    the kernel's own record of the last runs (always there: a deque append per run).
    """

    def __init__(self, observers: Iterable[RunObserver] = ()) -> None:
        given = tuple(observers)
        known = next((o for o in given if isinstance(o, RecentRuns)), None)
        self.recent = known if known is not None else RecentRuns()
        self.all: tuple[RunObserver, ...] = given if known is not None else (self.recent, *given)
        self.metrics: MetricsExposition | None = next((o for o in self.all if isinstance(o, MetricsExposition)), None)
        self._failed: set[str] = set()

    def _each(self, hook: str, *args: Any) -> None:
        for observer in self.all:
            try:
                getattr(observer, hook)(*args)
            except Exception:
                key = f"{type(observer).__name__}.{hook}"
                if key not in self._failed:
                    self._failed.add(key)
                    log.exception("observer %s failed (further failures of it are not logged)", key)

    def run_started(self, run: RunFacts) -> None:
        self._each("run_started", run)

    def first_delta(self, run: RunFacts) -> None:
        run.first_delta = time.perf_counter()
        self._each("first_delta", run)

    def model_call_started(self, run: RunFacts, call: ModelCall) -> None:
        self._each("model_call_started", run, call)

    def model_call_ended(self, run: RunFacts, call: ModelCall) -> None:
        self._each("model_call_ended", run, call)

    def tool_call_started(self, run: RunFacts, tool: str, call_id: str) -> None:
        self._each("tool_call_started", run, tool, call_id)

    def tool_call_ended(self, run: RunFacts, tool: str, call_id: str, outcome: str, duration_s: float) -> None:
        self._each("tool_call_ended", run, tool, call_id, outcome, duration_s)

    def question_asked(self, run: RunFacts, kind: QuestionKind) -> None:
        self._each("question_asked", run, kind)

    def question_answered(self, run: RunFacts, kind: QuestionKind, outcome: ApprovalOutcome) -> None:
        self._each("question_answered", run, kind, outcome)

    def run_ended(self, run: RunFacts, outcome: RunOutcome, error_code: str | None) -> None:
        self._each("run_ended", run, outcome, error_code)

    def provider_error(self, provider: str, code: str) -> None:
        self._each("provider_error", provider, code)

    def follower_cut(self, transport: str | None) -> None:
        self._each("follower_cut", transport)

    def command_forwarded(self) -> None:
        self._each("command_forwarded")

    def connection_opened(self, transport: str) -> None:
        self._each("connection_opened", transport)

    def connection_closed(self, transport: str) -> None:
        self._each("connection_closed", transport)


@runtime_checkable
class MetricsExposition(Protocol):
    """An observer that renders its metrics for a scrape: ``(body, content type)`` for the
    request's ``Accept`` header (Prometheus text, or OpenMetrics when asked for)."""

    def exposition(self, accept: str | None) -> tuple[bytes, str]: ...


#: The run whose task is running (for log lines: session, run, transport, trace id).
CURRENT_RUN: ContextVar[RunFacts | None] = ContextVar("gateway_current_run", default=None)


def current_run() -> RunFacts | None:
    """The run the calling task is executing, if any (log formatters read it)."""
    return CURRENT_RUN.get()
