"""Which events belong to one run, and what that run waits for: pure bookkeeping.

Fed with a session's events, a :class:`RunWatch` answers "is this event of my run?"
(the one place that does), remembers the run's open question and its end. It imports
only the model, so a sans-IO codec can keep one per request; the run follower
(:mod:`kernel.follow`) is built on it.
"""

from __future__ import annotations

from .model import (
    RUN_END_EVENTS,
    ErrorCode,
    ErrorInfo,
    Event,
    RunEvent,
    RunFailed,
    RunFinished,
    SubscriberLagged,
    ToolApprovalRequested,
    ToolResult,
    TurnLimitReached,
    TurnStarted,
)


class RunWatch:
    """One run, picked out of its session's events by the client's request id (or, when
    there is none, by its run id)."""

    def __init__(self, request_id: str | None, run_id: str | None = None) -> None:
        self.request_id = request_id
        self.run_id = run_id
        self.end: RunFinished | RunFailed | None = None
        #: The question the run waits on, until it is answered (a tool result, the next turn).
        self.question: ToolApprovalRequested | TurnLimitReached | None = None

    def feed(self, event: Event) -> bool:
        """Whether ``event`` belongs to this run (its bookkeeping updated)."""
        if not isinstance(event, RunEvent) or self.end is not None:
            return False
        if self.run_id is None and self.request_id is not None and event.request_id == self.request_id:
            self.run_id = event.run_id
        if event.run_id != self.run_id:
            return False
        if isinstance(event, (ToolApprovalRequested, TurnLimitReached)):
            self.question = event
        elif isinstance(event, ToolResult) and isinstance(self.question, ToolApprovalRequested):
            if event.call_id == self.question.call_id:
                self.question = None
        elif isinstance(event, (TurnStarted, *RUN_END_EVENTS)):
            self.question = None
        if isinstance(event, RUN_END_EVENTS):
            self.end = event
        return True

    def lost(self, session_id: str, lagged: SubscriberLagged, missed: str) -> RunFailed:
        """The end that will not arrive because events were lost (``lagged``): ``owner_lost``
        when they went with the session's previous owner, else ``rate_limited`` with ``missed``
        (what the reader missed by falling behind)."""
        code = lagged.end_code
        return self.give_up(session_id, code, lagged.error.message if code == "owner_lost" else f"{missed}: {lagged.error.message}")

    def give_up(self, session_id: str, code: ErrorCode, message: str) -> RunFailed:
        """The end that will not arrive (session closed, events lost): a ``run_failed``."""
        self.end = RunFailed(
            session_id=session_id,
            run_id=self.run_id or "",
            request_id=self.request_id,
            error=ErrorInfo(code=code, message=message),
        )
        self.question = None
        return self.end
