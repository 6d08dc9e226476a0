"""Runs as addressable tasks — A2A's tasks and OpenFang's ``/a2a/tasks`` share this mapping.

A task is one kernel run. Its id is the client's request id of that run and names the session
it ran in (``{session_id}~{suffix}``), so any instance of a cluster — or this one after a
restart — finds it again without an index of its own: live from the session's info and
events, finished from the session's stored history (each message a run stores carries the
run's request id, ``Message.request_id``).

:class:`TaskBook` starts tasks and keeps each one it started up to date from the run's events
(a tracker task per run, so that a task nobody streams — a non-blocking send, a push
notification — still moves on), and rebuilds the others on demand. Only kernel commands and
followers are used: a transport cannot tell a local session from a remote one.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from kernel import Follower, Kernel, KernelError, RunWatch
from kernel import model as m

__all__ = ["TASK_ID", "RunTask", "TaskBook", "TaskFollower", "TaskState", "end_state", "session_of", "task_from_history"]

log = logging.getLogger("gateway.tasks")

TaskState = Literal["working", "input_required", "completed", "failed", "canceled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "canceled"})
#: A task id: a session id (letters, digits, ``.``, ``_``, ``-``), ``~``, a suffix.
TASK_ID = re.compile(r"^([A-Za-z0-9._-]{1,128})~([A-Za-z0-9]{1,64})$")
SESSION_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def session_of(task_id: str) -> str | None:
    """The session a task ran in, None for an id that is not one of ours."""
    match = TASK_ID.match(task_id)
    return match.group(1) if match else None


def new_task_id(session_id: str) -> str:
    return f"{session_id}~{uuid.uuid4().hex[:16]}"


def end_state(end: m.RunFinished | m.RunFailed) -> TaskState:
    """``completed`` only for a whole answer (``run_end_error``); a client's cancel is
    ``canceled``; a failure, or an interrupt by a drain, shutdown or timeout, ``failed``."""
    if m.run_end_error(end) is None:
        return "completed"
    if isinstance(end, m.RunFinished) and end.interrupt_cause in (None, "client"):
        return "canceled"
    return "failed"


class RunTask:
    """What a client sees of one run: its state, the answer so far, the open question."""

    def __init__(self, task_id: str, session_id: str, *, prompt: tuple[m.ContentPart, ...] = (), run_id: str | None = None) -> None:
        self.task_id = task_id
        self.session_id = session_id
        self.run_id = run_id
        self.prompt = prompt
        self.state: TaskState = "working"
        self.chunks: list[str] = []
        self.question: m.ToolApprovalRequested | m.TurnLimitReached | None = None
        self.error: m.ErrorInfo | None = None
        self.end: m.RunFinished | m.RunFailed | None = None
        self.updated_at = time.time()
        self.live = False  # kept up to date by this instance's tracker
        self._changed = anyio.Event()

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def settled(self) -> bool:
        """Terminal, or waiting for the client (where a blocking request returns)."""
        return self.terminal or self.state == "input_required"

    async def wait_settled(self) -> None:
        while not self.settled:
            await self._changed.wait()

    def touch(self) -> None:
        self.updated_at = time.time()
        self._changed.set()
        self._changed = anyio.Event()

    def feed(self, event: m.Event) -> bool:
        """Apply one event of the run; True when the state changed (a push is due)."""
        before = self.state
        if isinstance(event, m.TextDelta):
            self.chunks.append(event.text)
        elif isinstance(event, m.ToolApprovalRequested | m.TurnLimitReached):
            self.question, self.state = event, "input_required"
        elif isinstance(event, m.ToolResult) or (isinstance(event, m.TurnStarted) and self.state == "input_required"):
            self.question, self.state = None, "working"
        elif isinstance(event, m.RunFinished | m.RunFailed):
            self.finish(event)
        self.touch()
        return self.state != before

    def copy(self) -> RunTask:
        """A request's own copy, moved on by the events that request follows."""
        twin = RunTask(self.task_id, self.session_id, prompt=self.prompt, run_id=self.run_id)
        twin.chunks, twin.state, twin.question, twin.error, twin.end = list(self.chunks), self.state, self.question, self.error, self.end
        twin.updated_at = self.updated_at
        return twin

    def finish(self, end: m.RunFinished | m.RunFailed) -> None:
        self.end, self.question, self.state = end, None, end_state(end)
        self.error = m.run_end_error(end)
        if end.text and end.text != self.text:  # the whole text is authoritative (a lost delta)
            self.chunks = [end.text]


def task_from_history(task_id: str, messages: list[m.Message], info: m.SessionInfo | None) -> RunTask | None:
    """A task rebuilt from its session's stored messages (and the session's live info when
    the run is still active); None when the session has no trace of it."""
    session_id = session_of(task_id) or ""
    ours = [msg for msg in messages if msg.request_id == task_id]
    active = info is not None and info.request_id == task_id
    if not ours and not active:
        return None
    user = next((msg for msg in ours if msg.role == "user"), None)
    prompt: tuple[m.ContentPart, ...] = (user.parts or (m.TextPart(user.content),)) if user is not None else ()
    task = RunTask(task_id, session_id, prompt=prompt, run_id=next((msg.run_id for msg in ours if msg.run_id), None))
    task.chunks = [msg.content for msg in ours if msg.role == "assistant" and msg.content]
    if active:
        assert info is not None
        task.run_id = info.run_id
        task.state = "input_required" if info.state in ("awaiting_tool_approval", "awaiting_turn_confirmation") else "working"
    elif any(msg.interrupted for msg in ours):
        task.state = "failed"
        task.error = m.ErrorInfo(code="interrupted", message="The run was interrupted before its answer was complete")
    elif any(msg.role == "assistant" and not msg.tool_calls for msg in ours):
        task.state = "completed"
    else:
        task.state = "failed"
        task.error = m.ErrorInfo(code="internal", message="The run ended without an answer")
    if ours:
        task.updated_at = ours[-1].created_at
    return task


class TaskFollower:
    """A request's view of a task's run: the run's events from a follower, applied to the
    request's own copy of the task (:attr:`task`). Use as an async context manager."""

    def __init__(self, follower: Follower, task: RunTask) -> None:
        self.follower = follower
        self.task = task
        self._watch = RunWatch(task.task_id, task.run_id)

    async def next(self) -> list[m.Event]:
        """The run's next events, applied to the task; when the run's end cannot come any more
        (the session was closed, events were lost for good) a ``run_failed`` saying so."""
        batch = await self.follower.next_batch()
        ours = [event for event in batch if self._watch.feed(event)]
        for event in ours:
            self.task.feed(event)
        lost = (not batch and self.follower.closed) or (bool(batch) and isinstance(batch[-1], m.SubscriberLagged))
        if lost and self.task.end is None:
            end = self._watch.give_up(self.task.session_id, "internal", "events of the run were lost; get the task to see how it ended")
            self.task.feed(end)
            ours.append(end)
        return ours

    async def settle(self) -> None:
        """Follow until the task is terminal or waits for input."""
        while not self.task.settled:
            await self.next()

    async def __aenter__(self) -> TaskFollower:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.follower.close()


#: Called with a task whose state changed (push notifications).
TaskListener = Callable[[RunTask], Awaitable[None]]


class TaskBook:
    """Starts tasks, tracks the ones it started, and finds any task again by its id."""

    def __init__(self, kernel: Kernel, *, client: str, capacity: int = 10_000) -> None:
        self.kernel = kernel
        self.client = client
        self.capacity = capacity
        self.listeners: list[TaskListener] = []
        self._tasks: OrderedDict[str, RunTask] = OrderedDict()
        self._group: TaskGroup | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the trackers' task group (a transport starts this in its own)."""
        async with anyio.create_task_group() as group:
            self._group = group
            task_status.started()
            await anyio.sleep_forever()

    def _remember(self, task: RunTask) -> None:
        self._tasks[task.task_id] = task
        self._tasks.move_to_end(task.task_id)
        while len(self._tasks) > self.capacity:
            self._tasks.popitem(last=False)

    async def start(
        self, prompt: m.Prompt, caller: m.Caller, *, follow: bool = False, track: bool = True
    ) -> tuple[RunTask, TaskFollower | None]:
        """Open the prompt's session (a new one without ``session_id``), start the run under
        a new task id, and track it (``track=False``: a dialect that always follows its runs
        itself; the task is rebuilt from its session when asked for). ``follow``: also a
        follower for the caller, subscribed before the run started (it misses nothing)."""
        opened = await self.kernel.execute(m.OpenSession(session_id=prompt.session_id, agent_id=prompt.agent_id), caller)
        info = opened.session
        task_id = new_task_id(info.session_id)
        tracker = await Follower.open(self.kernel, info.session_id, info.last_seq, client=self.client, caller=caller) if track else None
        stream: Follower | None = None
        try:
            if follow:
                stream = await Follower.open(self.kernel, info.session_id, info.last_seq, client=self.client, caller=caller)
            command = msgspec.structs.replace(prompt, session_id=info.session_id, request_id=task_id)
            accepted = await self.kernel.execute(command, caller)
        except BaseException:
            for opened_follower in (tracker, stream):
                if opened_follower is not None:
                    opened_follower.close()
            raise
        task = RunTask(task_id, info.session_id, prompt=prompt.content_parts(), run_id=accepted.run_id)
        if tracker is not None:
            task.live = True
            self._remember(task)
            assert self._group is not None, "TaskBook.run is not running"
            self._group.start_soon(self._track, task, tracker, RunWatch(task_id, accepted.run_id))
        return task, (TaskFollower(stream, task.copy()) if stream is not None else None)

    async def follow(self, task: RunTask, caller: m.Caller) -> TaskFollower:
        """A follower of the task's run from where its session is now, on a copy of the task
        (for a stream that joins a running task, or a request that waits for it)."""
        info = await self.session(task.session_id, caller)
        if info is None:
            raise KernelError("not_found", f"no session {task.session_id!r}")
        follower = await Follower.open(self.kernel, task.session_id, info.last_seq, client=self.client, caller=caller)
        return TaskFollower(follower, task.copy())

    async def _track(self, task: RunTask, follower: Follower, watch: RunWatch) -> None:
        async with follower:
            while task.end is None:
                batch = await follower.next_batch()
                if not batch:
                    if follower.closed:
                        task.finish(watch.give_up(task.session_id, "internal", "the session was closed before the run ended"))
                        await self._changed(task)
                    continue
                changed = False
                for event in batch:
                    if watch.feed(event):
                        changed = task.feed(event) or changed
                if isinstance(batch[-1], m.SubscriberLagged) and watch.end is None and not await self._still_running(task):
                    task.finish(watch.lost(task.session_id, batch[-1], "events of the run were lost"))
                    changed = True
                if changed:
                    await self._changed(task)
        task.live = False

    async def _still_running(self, task: RunTask) -> bool:
        info = await self.session(task.session_id)
        return info is not None and info.request_id == task.task_id

    async def _changed(self, task: RunTask) -> None:
        for listener in self.listeners:
            try:
                await listener(task)
            except Exception:
                log.exception("task listener failed for %s", task.task_id)

    async def session(self, session_id: str, caller: m.Caller = m.LOCAL_CALLER) -> m.SessionInfo | None:
        try:
            reply = await self.kernel.execute(m.GetSession(session_id=session_id), caller)
        except KernelError as exc:
            if exc.code == "not_found":
                return None
            raise
        return reply.session

    async def _history(self, session_id: str, caller: m.Caller) -> list[m.Message]:
        reply = await self.kernel.execute(m.GetHistory(session_id=session_id), caller)
        return list(reply.messages)

    async def get(self, task_id: str, caller: m.Caller) -> RunTask | None:
        """The task: this instance's live record, else rebuilt from its session (None: unknown).
        The session is asked first in both cases, so a caller who may not see it sees nothing."""
        session_id = session_of(task_id)
        if session_id is None:
            return None
        info = await self.session(session_id, caller)
        if info is None:
            return None
        known = self._tasks.get(task_id)
        if known is not None and (known.live or known.terminal):
            return known
        return task_from_history(task_id, await self._history(session_id, caller), info)

    async def list(self, session_id: str, caller: m.Caller) -> list[RunTask]:
        """A session's tasks, oldest first: those in its stored history, and its active one."""
        info = await self.session(session_id, caller)
        if info is None:
            return []
        messages = await self._history(session_id, caller)
        ids = list(dict.fromkeys(msg.request_id for msg in messages if msg.request_id and session_of(msg.request_id) == session_id))
        if info.request_id and session_of(info.request_id) == session_id and info.request_id not in ids:
            ids.append(info.request_id)
        found: list[RunTask] = []
        for task_id in ids:
            known = self._tasks.get(task_id)
            task = known if known is not None and (known.live or known.terminal) else task_from_history(task_id, messages, info)
            if task is not None:
                found.append(task)
        return found

    async def answer(self, task: RunTask, approved: bool, reason: str | None, caller: m.Caller) -> None:
        """Answer the question the task's run waits on (a tool approval or the turn limit)."""
        info = await self.session(task.session_id, caller)
        if info is None or info.request_id != task.task_id:
            raise KernelError("invalid_request", "the task is not waiting for input")
        command: m.Command
        if info.state == "awaiting_tool_approval":
            command = m.ResolveToolApproval(session_id=task.session_id, call_id=info.pending_call_id, approved=approved, reason=reason)
        elif info.state == "awaiting_turn_confirmation":
            command = m.ResolveTurnLimit(session_id=task.session_id, confirmed=approved, reason=reason)
        else:
            raise KernelError("invalid_request", "the task is not waiting for input")
        await self.kernel.execute(command, caller)

    async def cancel(self, task: RunTask, caller: m.Caller) -> None:
        """Interrupt the task's run (active or queued); its tracker records the end."""
        await self.kernel.execute(m.Interrupt(session_id=task.session_id, target_request_id=task.task_id), caller)
