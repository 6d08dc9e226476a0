"""What a session's inbox holds: runs to execute and history changes, in arrival order.

History changes (clear the context, replace or append messages) are jobs like runs, so
they never touch the context while a run reads it: the session's one task applies them.
"""

from __future__ import annotations

from typing import Literal

import anyio

from .model import ContentPart, KernelError, Message, PromptOptions


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
    ) -> None:
        self.run_id = run_id
        self.request_id = request_id
        self.parts = parts
        self.options = options
        self.regenerate = regenerate
        self.resume = resume
        # Interrupted while it waited in the inbox: it ends as interrupted, without a model call.
        self.interrupted = False


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
    """The run a session is executing: its job and the scope an interrupt cancels."""

    def __init__(self, job: RunJob) -> None:
        self.job = job
        self.scope = anyio.CancelScope()
        self.interrupted = False

    def interrupt(self) -> None:
        self.interrupted = True
        self.scope.cancel()
