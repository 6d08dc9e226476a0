"""What a session's inbox holds: runs to execute and history changes, in arrival order.

History changes (clear the context, replace or append messages) are jobs like runs, so
they never touch the context while a run reads it: the session's one task applies them.
"""

from __future__ import annotations

from typing import Literal, TypedDict

import anyio

from .model import LOCAL_CALLER, Caller, ContentPart, InterruptCause, KernelError, Message, PromptOptions, ToolCall, Usage
from .observe import RunFacts


class RunJob:
    def __init__(
        self,
        run_id: str,
        request_id: str | None,
        *,
        parts: tuple[ContentPart, ...] = (),
        options: PromptOptions = PromptOptions(),
        regenerate: bool = False,
        resume: bool = False,
        caller: Caller = LOCAL_CALLER,
    ) -> None:
        self.run_id = run_id
        self.request_id = request_id
        # Who asked for the run: its transport and traceparent reach the run's telemetry.
        self.caller = caller
        self.parts = parts
        self.options = options
        self.regenerate = regenerate
        self.resume = resume
        # Interrupted while it waited in the inbox: it ends as interrupted, without a model call.
        self.interrupted = False
        self.interrupt_cause: InterruptCause = "client"

    def interrupt(self, cause: InterruptCause) -> None:
        if not self.interrupted:
            self.interrupt_cause = cause
        self.interrupted = True


HistoryChange = Literal["clear_context", "clear_history", "replace", "append"]


class HistoryJob:
    """A change of the context; ``done`` is set once applied (``error`` if it failed)."""

    def __init__(self, change: HistoryChange, request_id: str | None, messages: tuple[Message, ...] = ()) -> None:
        self.change = change
        self.request_id = request_id
        self.messages = messages
        self.done = anyio.Event()
        self.error: KernelError | None = None


Job = RunJob | HistoryJob


class ActiveRun:
    """The run a session is executing: its job and the scope an interrupt cancels.

    ``cause`` is why it was interrupted (the first cause wins: a client's interrupt that a
    shutdown then repeats stays the client's), which tells the dialects how to end it."""

    def __init__(self, job: RunJob, *, session_id: str = "", agent: str = "") -> None:
        self.job = job
        self.scope = anyio.CancelScope()
        self.interrupted = False
        self.cause: InterruptCause = "client"
        #: Its end is published (by the run, or by its session closing without it): its
        #: readers are owed nothing more, and nothing more is published for it.
        self.ended = False
        # The run as telemetry's observers see it (kernel/observe.py).
        caller = job.caller
        self.facts = RunFacts(
            agent=agent, transport=caller.transport or "local", session_id=session_id, run_id=job.run_id,
            request_id=job.request_id, traceparent=caller.traceparent,
        )

    def interrupt(self, cause: InterruptCause = "client") -> None:
        if not self.interrupted:
            self.cause = cause
        self.interrupted = True
        self.scope.cancel()


class Ids(TypedDict):
    """What every event of a run carries."""

    session_id: str
    run_id: str
    request_id: str | None



class RunState:
    """What a run has produced so far; kept when the run is interrupted."""

    def __init__(self) -> None:
        self.text = ""
        self.usage = Usage()
        self.iterations = 0
        self.tool_calls = 0
        self.rejected: list[tuple[str, str]] = []
        self.new_messages: list[Message] = []
        self.open_calls: list[ToolCall] = []
        self.pending_client_calls: list[ToolCall] = []
        self.partial_parts: list[str] = []  # this model call's text so far (joined once: no quadratic +=)
        self.context_tokens = 0

    @property
    def partial(self) -> str:
        return "".join(self.partial_parts)

    def take_partial(self) -> str:
        text = self.partial
        self.partial_parts = []
        return text
