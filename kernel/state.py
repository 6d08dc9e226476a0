"""A session's state machine: where it is, which moves are legal, and its one question.

The whole machine, as a table (h11's ``_state.py`` is the model)::

    idle ──start_run──▶ running ──end_run──▶ idle
                         │  ▲
            ask_approval │  │ answered     (an answer, a timeout, or the run's cancellation)
                         ▼  │
                awaiting_tool_approval

                       running ──ask_turns──▶ awaiting_turn_confirmation ──answered──▶ running

    every state ──close──▶ closed          (closed is final)

Any other move raises :class:`IllegalTransition`: a bug in the kernel, never a client's
mistake. Clients answer questions through :meth:`SessionMachine.answer`, which refuses
(with a :class:`KernelError` the client sees) an answer to a question that is not open.

Both questions a run asks — may this tool run, may the run go past its turn limit —
go through :meth:`SessionMachine.ask`: one "ask the client and wait" for both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
import msgspec

from .model import KernelError, SessionState

Move = Literal["start_run", "end_run", "ask_approval", "ask_turns", "answered", "close"]
QuestionKind = Literal["tool_approval", "turn_limit"]

TRANSITIONS: dict[tuple[SessionState, Move], SessionState] = {
    ("idle", "start_run"): "running",
    ("running", "end_run"): "idle",
    ("running", "ask_approval"): "awaiting_tool_approval",
    ("awaiting_tool_approval", "answered"): "running",
    ("running", "ask_turns"): "awaiting_turn_confirmation",
    ("awaiting_turn_confirmation", "answered"): "running",
    ("idle", "close"): "closed",
    ("running", "close"): "closed",
    ("awaiting_tool_approval", "close"): "closed",
    ("awaiting_turn_confirmation", "close"): "closed",
}

_ASKS: dict[QuestionKind, Move] = {"tool_approval": "ask_approval", "turn_limit": "ask_turns"}
_WHAT: dict[QuestionKind, str] = {"tool_approval": "tool approval", "turn_limit": "turn confirmation"}


class IllegalTransition(RuntimeError):
    """A move the table does not allow from the current state."""


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    yes: bool
    reason: str | None = None
    remember: bool = False
    timed_out: bool = False


class _Question:
    def __init__(self, kind: QuestionKind, key: str | None) -> None:
        self.kind = kind
        self.key = key
        self.answered = anyio.Event()
        self.answer = Answer(yes=False, timed_out=True)


class SessionMachine:
    def __init__(self) -> None:
        self.state: SessionState = "idle"
        self._question: _Question | None = None

    def move(self, move: Move) -> SessionState:
        try:
            self.state = TRANSITIONS[(self.state, move)]
        except KeyError:
            raise IllegalTransition(f"cannot {move} while {self.state}") from None
        return self.state

    @property
    def pending_key(self) -> str | None:
        """The key (tool call id) of the open tool-approval question."""
        question = self._question
        return question.key if question is not None and question.kind == "tool_approval" else None

    async def ask(self, kind: QuestionKind, key: str | None, timeout_s: float, announce: Callable[[], Awaitable[object]]) -> Answer:
        """Open the question, ``announce`` it (publish the event clients answer), and wait for
        the answer; no answer within ``timeout_s`` is a "no" that timed out.

        The question is open before it is announced, so an answer that comes at once is
        taken. The state is ``awaiting_*`` exactly while the question is open, and back to
        ``running`` afterwards, whether it was answered, timed out or cancelled.
        """
        self.move(_ASKS[kind])
        question = self._question = _Question(kind, key)
        try:
            await announce()
            with anyio.move_on_after(timeout_s):
                await question.answered.wait()
            return question.answer
        finally:
            self._question = None
            if self.state != "closed":
                self.move("answered")

    def answer(self, kind: QuestionKind, key: str | None, answer: Answer, session_id: str) -> None:
        question = self._question
        if question is None or question.kind != kind or question.answered.is_set():
            raise KernelError("invalid_request", f"no pending {_WHAT[kind]} in session {session_id}")
        if key is not None and question.key is not None and key != question.key:
            raise KernelError("not_found", f"no pending tool call {key!r} (pending: {question.key!r})")
        question.answer = answer
        question.answered.set()
