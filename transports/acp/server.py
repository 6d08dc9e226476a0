"""The ACP transport: the gateway as an editor's agent over stdin/stdout.

The read loop never waits on a handler: every request runs in its own task,
responses to the gateway's own requests (permission, file access) resolve their
waiters at once, and ``session/cancel`` is seen while a prompt is open. Each
session this editor opened has one forwarder that turns its kernel events into
``session/update`` lines (several ready events in one write) and feeds them to
the :class:`~kernel.RunWatch` of each open prompt, which is answered when its run
ends. At EOF the transport answers nothing more of the editor's (it is gone),
lets the open prompts finish for ``eof_grace_s``, interrupts the rest, flushes and
returns, so the process exits 0.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from transports.shared import LineReader, LineTooLong, LineWriter

from . import codec
from .config import AcpConfig
from .files import EditorFiles
from .state import Answer, EditorRequests, OpenPrompt, SessionState
from .wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    AgentMessageChunk,
    CurrentModeUpdate,
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
    SessionNotification,
    SessionParams,
    SetModelParams,
    SetModeParams,
    Text,
    Update,
    decode_params,
)

log = logging.getLogger("gateway.acp")


class AcpTransport:
    name: ClassVar[str] = "acp"
    description: ClassVar[str] = "Agent Client Protocol: JSON-RPC 2.0 on stdin/stdout, for editors such as Zed"
    Config: ClassVar[type[msgspec.Struct]] = AcpConfig

    def __init__(self, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd

    async def serve(self, kernel: Kernel, config: AcpConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        if config.default_mode not in codec.MODES:
            raise ValueError(f"[transports.acp] default_mode must be one of {', '.join(codec.MODES)}, not {config.default_mode!r}")
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
        self.editor = EditorRequests(self.codec, self.write)
        self.inflight = 0
        self._settled: anyio.Event | None = None  # set when the last request in flight is answered (EOF)
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
            if not self.inflight and self._settled is not None:
                self._settled.set()

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
            return [self.codec.failure(request.id, codec.kernel_failure(exc.info()))]
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

    def update(self, session_id: str, update: Update) -> bytes:
        return self.codec.notification("session/update", SessionNotification(session_id, update))

    def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        assert self._tg is not None
        self._tg.start_soon(fn, *args)

    # -------------------------------------------------------------- methods

    async def initialize(self, request: Request) -> Any:
        params = decode_params(request.params, InitializeParams)
        self.capabilities = params.client_capabilities
        return codec.initialize_result(codec.negotiate_version(params.protocol_version), self.kernel.version)

    async def authenticate(self, request: Request) -> Any:
        return {}

    async def new_session(self, request: Request) -> Any:
        params = decode_params(request.params, NewSessionParams)
        _check_cwd(params.cwd)
        opened = await self.kernel.execute(m.OpenSession(agent_id=self.config.agent))
        assert isinstance(opened, m.SessionOpened)
        state = await self.attach(opened.session.session_id, params.cwd)
        commands = await self.commands_update(state)
        return Answer({"sessionId": state.id, "modes": codec.mode_state(state.mode)}, [commands])

    async def load_session(self, request: Request) -> Any:
        params = decode_params(request.params, LoadSessionParams)
        _check_cwd(params.cwd)
        try:
            await self.kernel.execute(m.GetSession(session_id=params.session_id))
        except KernelError as exc:
            raise RpcFailure(RESOURCE_NOT_FOUND, f"Session not found: {params.session_id}", {"code": exc.code}) from None
        history = await self.kernel.execute(m.GetHistory(session_id=params.session_id))
        assert isinstance(history, m.HistoryView)
        replay = [self.update(history.session_id, u) for u in codec.history_updates(history.messages, params.cwd)]
        await self.write(replay)
        state = await self.attach(history.session_id, params.cwd)
        commands = await self.commands_update(state)
        return Answer(None, [commands])

    async def prompt(self, request: Request) -> Any:
        params = decode_params(request.params, PromptParams)
        state = self.session_state(params.session_id)
        parts = codec.prompt_parts(params.prompt)
        request_id = f"{self._prefix}-{next(self._counter)}"
        command = codec.slash_command(parts, self.kernel.commands)
        if command is not None:
            return await self.run_command(state, request_id, *command)
        # Registered before the kernel has it: the forwarder may see the run's events first.
        prompt = state.prompts[request_id] = OpenPrompt(request_id)
        try:
            options = codec.prompt_options(state.mode)
            accepted = await self.kernel.execute(m.Prompt(session_id=state.id, request_id=request_id, parts=parts, options=options))
            assert isinstance(accepted, m.Accepted)
            if prompt.watch.run_id is None:
                prompt.watch.run_id = accepted.run_id
            if prompt.cancelled:  # session/cancel came before the kernel knew the request
                await self.interrupt(state.id, prompt)
            await prompt.done.wait()
        finally:
            del state.prompts[request_id]
        return codec.prompt_answer(prompt.watch.end, cancelled=prompt.cancelled)

    async def run_command(self, state: SessionState, request_id: str, name: str, args: str) -> Any:
        reply = await self.kernel.execute(m.RunCommand(session_id=state.id, request_id=request_id, name=name, args=args))
        if isinstance(reply, m.CommandOutput) and reply.output:
            await self.write([self.update(state.id, AgentMessageChunk(content=Text(reply.output)))])
        return {"stopReason": "end_turn"}

    async def set_mode(self, request: Request) -> Any:
        params = decode_params(request.params, SetModeParams)
        state = self.session_state(params.session_id)
        state.mode = codec.check_mode(params.mode_id)
        return Answer({}, [self.update(state.id, CurrentModeUpdate(current_mode_id=state.mode))])

    async def set_model(self, request: Request) -> Any:
        params = decode_params(request.params, SetModelParams)
        state = self.session_state(params.session_id)
        await self.kernel.execute(m.ConfigureSession(session_id=state.id, model=params.model_id))
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
        prompts = list(state.prompts.values())
        for prompt in prompts:
            prompt.cancelled = True
        self.editor.abandon(set(state.permissions), "the prompt was cancelled")
        for prompt in prompts:
            await self.interrupt(state.id, prompt)

    async def interrupt(self, session_id: str, prompt: OpenPrompt) -> None:
        """End the prompt's run, active or still queued (it answers ``cancelled``)."""
        prompt.cancelled = True
        if prompt.done.is_set():
            return
        try:
            await self.kernel.execute(m.Interrupt(session_id=session_id, target_request_id=prompt.request_id))
        except KernelError as exc:
            log.debug("acp: interrupt %s: %s", prompt.request_id, exc.message)

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
            follower = await Follower.open(self.kernel, session_id, client="acp")
            state = self.sessions[session_id] = SessionState(session_id, cwd, self.config.default_mode, self.config.context_window_tokens)
            self._spawn(self.forward, state, follower)
        fs = self.capabilities.fs
        if fs.read_text_file or fs.write_text_file:
            state.files = EditorFiles(
                self.editor,
                session_id,
                cwd,
                can_read=fs.read_text_file,
                can_write=fs.write_text_file,
                fallback=self.kernel.workspace_files(),
                timeout_s=self.config.fs_timeout_s,
            )
            await self.kernel.execute(m.ConfigureSession(session_id=session_id, files=state.files))
        return state

    async def commands_update(self, state: SessionState) -> bytes:
        reply = await self.kernel.execute(m.ListCommands(session_id=state.id))
        commands = reply.commands if isinstance(reply, m.CommandList) else ()
        return self.update(state.id, codec.available_commands(commands))

    # -------------------------------------------------------------- events

    async def forward(self, state: SessionState, follower: Follower) -> None:
        """Write the session's events as updates; answer prompts at their run's end, or after a gap."""
        async with follower:
            while batch := await follower.next_batch():
                last = batch[-1]
                lost = last if isinstance(last, m.SubscriberLagged) else None
                if lost is not None:
                    batch.pop()
                await self.deliver(state, batch)
                if lost is not None:
                    log.warning("acp: session %s: %s; following on from now", state.id, lost.error.message)
                    await self.settle_lost_runs(state)
        for prompt in list(state.prompts.values()):
            prompt.done.set()

    async def deliver(self, state: SessionState, events: list[m.Event]) -> None:
        ended: list[OpenPrompt] = []
        for event in events:
            prompt = state.prompts.get(event.request_id or "") if isinstance(event, m.RunEvent) else None
            if prompt is None or not prompt.watch.feed(event):
                continue
            if isinstance(event, m.ToolApprovalRequested):
                self._spawn(self.ask_permission, state, event, prompt)
            elif prompt.watch.end is not None:
                ended.append(prompt)
        lines = [self.update(state.id, u) for u in state.stream.updates(*events)]
        if lines:
            await self.write(lines)
        for prompt in ended:
            prompt.done.set()

    async def settle_lost_runs(self, state: SessionState) -> None:
        """Events were lost for good: answer the prompts whose run is over (how it ended is unknown).

        A run is still to come while the kernel has not accepted it yet, while it is the
        session's active one, or while it waits in the session's queue.
        """
        try:
            reply = await self.kernel.execute(m.GetSession(session_id=state.id))
            info: m.SessionInfo | None = reply.session if isinstance(reply, m.SessionOpened) else None
        except KernelError:
            info = None
        for prompt in list(state.prompts.values()):
            run_id = prompt.watch.run_id
            if info is not None and (run_id is None or run_id == info.run_id or prompt.request_id in info.queued_requests):
                continue
            log.warning("acp: the end of run %s was lost; answering its prompt as cancelled", run_id)
            prompt.done.set()

    async def ask_permission(self, state: SessionState, event: m.ToolApprovalRequested, prompt: OpenPrompt) -> None:
        tool = self.kernel.tools.get(event.name)
        params = codec.permission_request(
            state.id, event, state.cwd, category=tool.category if tool else "general", access=tool.access if tool else "query"
        )
        timeout = min(self.config.permission_timeout_s, event.timeout_s or math.inf)
        try:
            result = await self.editor.request("session/request_permission", params, timeout_s=timeout, track=state.permissions)
            approved, remember, reason = codec.permission_decision(result)
        except (EditorError, TimeoutError) as exc:
            approved, remember, reason = False, False, f"no answer from the editor: {exc or 'timed out'}"
        if prompt.cancelled:
            approved, remember, reason = False, False, "cancelled"
        if approved:
            await self.write([self.update(state.id, codec.in_progress(event.call_id))])
        command = m.ResolveToolApproval(session_id=state.id, call_id=event.call_id, approved=approved, reason=reason, remember=remember)
        try:
            await self.kernel.execute(command)
        except KernelError as exc:
            log.debug("acp: approval of %s not applied: %s", event.call_id, exc.message)

    # -------------------------------------------------------------- end of input

    def open_prompts(self) -> list[tuple[SessionState, OpenPrompt]]:
        return [(state, prompt) for state in self.sessions.values() for prompt in state.prompts.values()]

    async def drain_at_eof(self) -> None:
        """The editor is gone: fail its open requests, let prompts finish (bounded), interrupt the rest."""
        self.editor.close()
        waiting = self.open_prompts()
        if waiting:
            with anyio.move_on_after(self.config.eof_grace_s):
                for _, prompt in waiting:
                    await prompt.done.wait()
            waiting = [(state, prompt) for state, prompt in self.open_prompts() if not prompt.done.is_set()]
            for state, prompt in waiting:
                log.info("stdin closed: interrupting the run of session %s", state.id)
                await self.interrupt(state.id, prompt)
            with anyio.move_on_after(5.0):
                for _, prompt in waiting:
                    await prompt.done.wait()
        if self.inflight:
            self._settled = anyio.Event()
            with anyio.move_on_after(5.0):
                await self._settled.wait()
        for state in self.sessions.values():
            if state.files is not None:
                state.files = None
                try:
                    await self.kernel.execute(m.ConfigureSession(session_id=state.id, files=None))
                except KernelError as exc:
                    log.debug("acp: file access of %s not reset: %s", state.id, exc.message)
        await self.writer.flush()


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise RpcFailure(INVALID_PARAMS, f"Invalid params: cwd must be an absolute path, got {cwd!r}")
