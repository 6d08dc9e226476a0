"""The ACP transport: the gateway as an editor's agent over stdin/stdout.

The read loop never waits on a handler: every request runs in its own task,
responses to the gateway's own requests (permission, file access) resolve their
waiters at once, and ``session/cancel`` is seen while a prompt is open. Each
session this editor opened has one forwarder that turns its kernel events into
``session/update`` lines (several ready events in one write) and settles the
open prompt when its run ends. At EOF the transport answers nothing more of the
editor's (it is gone), lets runs finish for ``eof_grace_s``, interrupts the
rest, flushes and returns, so the process exits 0.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from kernel.files import WorkspaceFiles
from transports.shared import LineReader, LineTooLong, LineWriter

from . import mapping, updates
from .codec import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    EditorError,
    Ignored,
    InitializeParams,
    JsonRpcCodec,
    LoadSessionParams,
    NewSessionParams,
    Notification,
    PromptParams,
    Reject,
    Request,
    Response,
    RpcFailure,
    SessionParams,
    SetModelParams,
    SetModeParams,
    decode_params,
    negotiate_version,
)
from .files import EditorFiles
from .state import AcpConfig, Answer, EditorRequests, OpenPrompt, SessionState

log = logging.getLogger("gateway.acp")


class AcpTransport:
    name = "acp"
    description = "Agent Client Protocol: JSON-RPC 2.0 on stdin/stdout, for editors such as Zed"
    Config = AcpConfig

    def __init__(self, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd

    async def serve(self, kernel: Kernel, config: AcpConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        if config.default_mode not in mapping.MODES:
            raise ValueError(f"[transports.acp] default_mode must be one of {', '.join(mapping.MODES)}, not {config.default_mode!r}")
        writer = LineWriter(self.stdout_fd)
        try:
            await AcpConnection(kernel, config, writer).run(self.stdin_fd, task_status)
        finally:
            writer.close()


class AcpConnection:
    """One editor on the other end of stdin/stdout, for the life of the process."""

    def __init__(self, kernel: Kernel, config: AcpConfig, writer: LineWriter) -> None:
        self.kernel = kernel
        self.config = config
        self.writer = writer
        self.codec = JsonRpcCodec()
        self.capabilities = InitializeParams().client_capabilities
        self.sessions: dict[str, SessionState] = {}
        self.prompts: dict[str, OpenPrompt] = {}
        self.editor = EditorRequests(self.codec, self.write)
        self.inflight = 0
        self._stdout_gone = False
        self._prefix = f"acp-{uuid.uuid4().hex[:8]}"
        self._counter = itertools.count()
        self._tg: TaskGroup | None = None
        self._methods: dict[str, Callable[[Request], Awaitable[Any]]] = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/prompt": self.prompt,
            "session/set_mode": self.set_mode,
            "session/set_model": self.set_model,
            "session/cancel": self.cancel_request,
        }

    # -------------------------------------------------------------- loop

    async def run(self, stdin_fd: int, task_status: TaskStatus[str | None]) -> None:
        async with anyio.create_task_group() as background:
            self._tg = background
            task_status.started(None)
            async with anyio.create_task_group() as handlers:
                async for line in LineReader(stdin_fd, max_line_bytes=self.config.max_line_bytes):
                    if isinstance(line, LineTooLong):
                        message = f"Invalid request: line of {line.size} bytes is over the {line.limit}-byte limit; skipped"
                        await self.write([self.codec.error(None, INVALID_REQUEST, message)])
                        continue
                    await self.dispatch(self.codec.decode(line), handlers)
                await self.drain_at_eof()
                handlers.cancel_scope.cancel()
            background.cancel_scope.cancel()
        await self.writer.flush()

    async def dispatch(self, message: Any, handlers: TaskGroup) -> None:
        if isinstance(message, Request):
            if self.inflight >= self.config.max_concurrent_requests:
                # Refused rather than waited for: the read loop must stay free for answers and cancels.
                message_text = f"Too many requests in progress (limit {self.config.max_concurrent_requests})"
                await self.write([self.codec.error(message.id, INTERNAL_ERROR, message_text, {"code": "busy"})])
                return
            self.inflight += 1
            handlers.start_soon(self.handle, message)
        elif isinstance(message, Notification):
            if message.method == "session/cancel":
                handlers.start_soon(self.cancel, message.params)
            else:
                log.debug("ignoring notification %s", message.method)
        elif isinstance(message, Response):
            self.editor.resolve(message)
        elif isinstance(message, Reject):
            await self.write([message.reply])
        elif isinstance(message, Ignored):
            log.info("acp: %s", message.reason)

    async def handle(self, request: Request) -> None:
        try:
            await self.write(await self.answer(request))
        finally:
            self.inflight -= 1

    async def answer(self, request: Request) -> list[bytes]:
        """The response line (and notifications that must follow it); never raises."""
        try:
            method = self._methods.get(request.method)
            if method is None:
                raise RpcFailure(METHOD_NOT_FOUND, f"Method not found: {request.method}")
            answer = await method(request)
            if isinstance(answer, Answer):
                return [self.codec.result(request.id, answer.result), *answer.after]
            return [self.codec.result(request.id, answer)]
        except RpcFailure as failure:
            return [self.codec.failure(request.id, failure)]
        except KernelError as exc:
            return [self.codec.failure(request.id, mapping.kernel_failure(exc.info()))]
        except Exception as exc:
            log.exception("acp: %s failed", request.method)
            return [self.codec.error(request.id, INTERNAL_ERROR, f"Internal error: {type(exc).__name__}: {exc}")]

    async def write(self, lines: list[bytes]) -> None:
        try:
            await self.writer.write_lines(lines)
        except (BrokenPipeError, ConnectionResetError):
            if not self._stdout_gone:
                self._stdout_gone = True
                log.info("acp: stdout closed by the editor; further output is dropped")

    def update(self, session_id: str, update: updates.Update) -> bytes:
        return self.codec.notification("session/update", updates.SessionNotification(session_id, update))

    # -------------------------------------------------------------- methods

    async def initialize(self, request: Request) -> Any:
        params = decode_params(request.params, InitializeParams)
        self.capabilities = params.client_capabilities
        return mapping.initialize_result(negotiate_version(params.protocol_version), self.kernel.version)

    async def authenticate(self, request: Request) -> Any:
        return {}

    async def new_session(self, request: Request) -> Any:
        params = decode_params(request.params, NewSessionParams)
        _check_cwd(params.cwd)
        session = await self.kernel.session(None, self.config.agent)
        state = await self.attach(session.id, params.cwd)
        commands = await self.commands_update(state)
        return Answer({"sessionId": session.id, "modes": mapping.mode_state(state.mode)}, [commands])

    async def load_session(self, request: Request) -> Any:
        params = decode_params(request.params, LoadSessionParams)
        _check_cwd(params.cwd)
        try:
            session = await self.kernel.session(params.session_id, create=False)
        except KernelError as exc:
            raise RpcFailure(RESOURCE_NOT_FOUND, f"Session not found: {params.session_id}", {"code": exc.code}) from None
        history = await self.kernel.execute(m.GetHistory(session_id=session.id))
        assert isinstance(history, m.HistoryView)
        replay = [self.update(session.id, u) for u in mapping.history_updates(history.messages, params.cwd)]
        await self.write(replay)
        state = await self.attach(session.id, params.cwd)
        commands = await self.commands_update(state)
        return Answer(None, [commands])

    async def prompt(self, request: Request) -> Any:
        params = decode_params(request.params, PromptParams)
        state = self.session_state(params.session_id)
        parts = mapping.prompt_parts(params.prompt)
        request_id = f"{self._prefix}-{next(self._counter)}"
        command = mapping.slash_command(parts, self.kernel.commands)
        if command is not None:
            return await self.run_command(state, request_id, *command)
        prompt = OpenPrompt(request_id, state.id)
        self.prompts[request_id] = prompt
        state.prompts.add(prompt)
        try:
            options = mapping.prompt_options(state.mode)
            await self.kernel.execute(m.Prompt(session_id=state.id, request_id=request_id, parts=parts, options=options))
            await prompt.done.wait()
        finally:
            self.prompts.pop(request_id, None)
            state.prompts.discard(prompt)
        end = prompt.end
        if prompt.cancelled or end is None:
            return {"stopReason": "cancelled"}
        if isinstance(end, m.RunFailed):
            raise mapping.kernel_failure(end.error)
        return {"stopReason": mapping.stop_reason(end), "usage": mapping.usage_result(end.usage)}

    async def run_command(self, state: SessionState, request_id: str, name: str, args: str) -> Any:
        reply = await self.kernel.execute(m.RunCommand(session_id=state.id, request_id=request_id, name=name, args=args))
        if isinstance(reply, m.CommandOutput) and reply.output:
            await self.write([self.update(state.id, updates.AgentMessageChunk(content=updates.Text(reply.output)))])
        return {"stopReason": "end_turn"}

    async def set_mode(self, request: Request) -> Any:
        params = decode_params(request.params, SetModeParams)
        state = self.session_state(params.session_id)
        state.mode = mapping.check_mode(params.mode_id)
        return Answer({}, [self.update(state.id, updates.CurrentModeUpdate(current_mode_id=state.mode))])

    async def set_model(self, request: Request) -> Any:
        params = decode_params(request.params, SetModelParams)
        state = self.session_state(params.session_id)
        session = await self.kernel.session(state.id, create=False)
        session.model_override = params.model_id.strip() or None
        return {}

    async def cancel_request(self, request: Request) -> Any:
        """``session/cancel`` is a notification; a client sending it as a request gets ``null``."""
        await self.cancel(request.params)
        return None

    async def cancel(self, raw_params: Any) -> None:
        try:
            params = decode_params(raw_params, SessionParams)
        except RpcFailure as failure:
            log.info("acp: ignoring session/cancel: %s", failure.error.message)
            return
        state = self.sessions.get(params.session_id)
        if state is None:
            log.info("acp: session/cancel for an unknown session %s", params.session_id)
            return
        for prompt in state.prompts:
            prompt.cancelled = True
        self.editor.abandon(set(state.permissions), "the prompt was cancelled")
        if any(p.run_id is not None and not p.done.is_set() for p in state.prompts):
            await self.interrupt(state.id)

    async def interrupt(self, session_id: str) -> None:
        try:
            await self.kernel.execute(m.Interrupt(session_id=session_id))
        except KernelError as exc:
            log.debug("acp: interrupt %s: %s", session_id, exc.message)

    # -------------------------------------------------------------- sessions

    def session_state(self, session_id: str) -> SessionState:
        state = self.sessions.get(session_id)
        if state is None:
            raise RpcFailure(
                RESOURCE_NOT_FOUND,
                f"Session not found: {session_id} (open it first with session/new or session/load)",
                {"sessionId": session_id},
            )
        return state

    async def attach(self, session_id: str, cwd: str) -> SessionState:
        """Follow a session's events and, when the editor offers it, serve its files."""
        state = self.sessions.get(session_id)
        if state is not None:
            state.cwd = state.stream.cwd = cwd
        else:
            state = self.sessions[session_id] = SessionState(session_id, cwd, self.config.default_mode, self.config.context_window_tokens)
            follower = await Follower.open(self.kernel, session_id)
            assert self._tg is not None
            self._tg.start_soon(self.forward, state, follower)
        fs = self.capabilities.fs
        session = self.kernel.sessions.get(session_id)
        if session is not None and (fs.read_text_file or fs.write_text_file):
            settings = self.kernel.settings.tools
            state.files = EditorFiles(
                self.editor,
                session_id,
                cwd,
                can_read=fs.read_text_file,
                can_write=fs.write_text_file,
                fallback=WorkspaceFiles(settings.workspace, max_bytes=settings.file_max_bytes),
                timeout_s=self.config.fs_timeout_s,
            )
            session.files = state.files
        return state

    async def commands_update(self, state: SessionState) -> bytes:
        reply = await self.kernel.execute(m.ListCommands(session_id=state.id))
        commands = reply.commands if isinstance(reply, m.CommandList) else ()
        return self.update(state.id, mapping.available_commands(commands))

    # -------------------------------------------------------------- events

    async def forward(self, state: SessionState, follower: Follower) -> None:
        """Write the session's events as updates; settle prompts at the end, or after a gap."""
        async with follower:
            while batch := await follower.next_batch():
                lost = batch.pop() if isinstance(batch[-1], m.SubscriberLagged) else None
                await self.deliver(state, batch)
                if lost is not None:
                    log.warning("acp: session %s: %s; following on from now", state.id, lost.error.message)
                    self.settle_lost_runs(state)
        for prompt in list(state.prompts):
            prompt.finish(None)

    def settle_lost_runs(self, state: SessionState) -> None:
        """Events were lost for good: answer prompts whose run is over (it cannot be told how)."""
        session = self.kernel.sessions.get(state.id)
        active = session.active.job.run_id if session is not None and session.active is not None else None
        for prompt in list(state.prompts):
            if prompt.run_id is not None and prompt.run_id != active:
                log.warning("acp: the end of run %s was lost; answering its prompt as cancelled", prompt.run_id)
                prompt.finish(None)

    async def deliver(self, state: SessionState, events: list[m.Event]) -> None:
        lines: list[bytes] = []
        ended: list[tuple[OpenPrompt, m.RunFinished | m.RunFailed]] = []
        for event in events:
            prompt = self.prompts.get(event.request_id or "") if isinstance(event, _RUN_EVENTS) else None
            if isinstance(event, m.RunStarted) and prompt is not None:
                prompt.run_id = event.run_id
                if prompt.cancelled:
                    self._spawn(self.interrupt, state.id)
            elif isinstance(event, m.ToolApprovalRequested) and prompt is not None:
                self._spawn(self.ask_permission, state, event, prompt)
            elif isinstance(event, m.TurnLimitReached) and prompt is not None:
                self._spawn(self.decline_turns, state.id)
            elif isinstance(event, m.RUN_END_EVENTS) and prompt is not None:
                ended.append((prompt, event))
            needs_approval = isinstance(event, m.ToolCallStarted) and self.needs_approval(state, event)
            lines.extend(self.update(state.id, u) for u in state.stream.updates(event, needs_approval=needs_approval))
        if lines:
            await self.write(lines)
        for prompt, end in ended:
            prompt.finish(end)

    def _spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        assert self._tg is not None
        self._tg.start_soon(fn, *args)

    def needs_approval(self, state: SessionState, event: m.ToolCallStarted) -> bool:
        """Whether the kernel will ask before this call (only decides the status shown)."""
        session = self.kernel.sessions.get(state.id)
        tool = self.kernel.tools.get(event.name)
        if session is None or tool is None:
            return False
        if event.name in session.tool_policy:
            return not session.tool_policy[event.name]  # remembered: no question, runs or fails at once
        return state.mode == "ask" or session.agent.ask_before_tool_execution or tool.requires_approval

    async def ask_permission(self, state: SessionState, event: m.ToolApprovalRequested, prompt: OpenPrompt) -> None:
        tool = self.kernel.tools.get(event.name)
        params = mapping.permission_request(
            state.id, event, state.cwd, category=tool.category if tool else "general", access=tool.access if tool else "query"
        )
        timeout = min(self.config.permission_timeout_s, event.timeout_s or math.inf)
        try:
            result = await self.editor.request("session/request_permission", params, timeout_s=timeout, track=state.permissions)
            approved, remember, reason = mapping.permission_decision(result)
        except (EditorError, TimeoutError) as exc:
            approved, remember, reason = False, False, f"no answer from the editor: {exc or 'timed out'}"
        if prompt.cancelled:
            approved, remember, reason = False, False, "cancelled"
        if approved:
            await self.write([self.update(state.id, state.stream.running(event.call_id))])
        command = m.ResolveToolApproval(session_id=state.id, call_id=event.call_id, approved=approved, reason=reason, remember=remember)
        try:
            await self.kernel.execute(command)
        except KernelError as exc:
            log.debug("acp: approval of %s not applied: %s", event.call_id, exc.message)

    async def decline_turns(self, session_id: str) -> None:
        """ACP has no turn-limit question: the prompt ends with ``max_turn_requests``."""
        try:
            await self.kernel.execute(m.ResolveTurnLimit(session_id=session_id, confirmed=False, reason="turn limit reached"))
        except KernelError as exc:
            log.debug("acp: turn limit of %s not resolved: %s", session_id, exc.message)

    # -------------------------------------------------------------- end of input

    async def drain_at_eof(self) -> None:
        """The editor is gone: fail its open requests, let runs finish (bounded), interrupt the rest."""
        self.editor.close()
        sessions = [self.kernel.sessions[s] for s in self.sessions if s in self.kernel.sessions]
        busy = [s for s in sessions if s.busy]
        if busy:
            with anyio.move_on_after(self.config.eof_grace_s):
                for session in busy:
                    await session.wait_idle()
            for session in busy:
                if session.busy:
                    log.info("stdin closed: interrupting the run of session %s", session.id)
                    session.interrupt()
            with anyio.move_on_after(5.0):
                for session in busy:
                    await session.wait_idle()
        with anyio.move_on_after(5.0):
            while self.inflight:
                await anyio.sleep(0.01)
        for session in sessions:
            state = self.sessions[session.id]
            if state.files is not None and session.files is state.files:
                session.files = None
        await self.writer.flush()


_RUN_EVENTS = (
    m.RunStarted,
    m.TextDelta,
    m.ReasoningDelta,
    m.ToolCallStarted,
    m.ToolApprovalRequested,
    m.ToolResult,
    m.TurnLimitReached,
    m.TurnStarted,
    m.RunFinished,
    m.RunFailed,
)


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise RpcFailure(INVALID_PARAMS, f"Invalid params: cwd must be an absolute path, got {cwd!r}")
