"""The ACP transport: the gateway as an editor's agent over stdin/stdout.

The read loop never waits on a handler: every request runs in its own task (which
``$/cancel_request`` can cancel), responses to the gateway's own requests
(permission, files, terminals) resolve their waiters at once, and
``session/cancel`` is seen while a prompt is open. Each session this editor opened
(:mod:`.sessions`) has one forwarder that turns its kernel events into
``session/update`` lines (several ready events in one write) and feeds them to the
:class:`~kernel.RunWatch` of each open prompt, which is answered when its run ends.
At EOF the transport answers nothing more of the editor's (it is gone), lets the
open prompts finish for ``eof_grace_s``, interrupts the rest, releases the sessions,
flushes and returns, so the process exits 0.
"""

from __future__ import annotations

import itertools
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from transports.base import BannerLine
from transports.shared import LineReader, LineTooLong, LineWriter, local_caller

from . import codec, session_meta
from .config import AcpConfig
from .jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    EditorError,
    Ignored,
    JsonRpcCodec,
    Notification,
    Reject,
    Request,
    Response,
    RpcFailure,
    RpcId,
    decode_params,
)
from .sessions import EditorSessions
from .state import Answer, EditorRequests, OpenPrompt, SessionState, update_line
from .wire import AgentMessageChunk, AuthenticateParams, CancelRequestParams, InitializeParams, PromptParams, SessionParams, Text

log = logging.getLogger("gateway.acp")


class AcpTransport:
    name: ClassVar[str] = "acp"
    description: ClassVar[str] = "Agent Client Protocol: JSON-RPC 2.0 on stdin/stdout, for editors such as Zed"
    Config: ClassVar[type[msgspec.Struct]] = AcpConfig

    def __init__(self, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd

    async def serve(self, kernel: Kernel, config: AcpConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        if config.default_mode not in session_meta.MODES:
            raise ValueError(f"[transports.acp] default_mode must be one of {', '.join(session_meta.MODES)}, not {config.default_mode!r}")
        if config.list_page_size < 1:
            raise ValueError("[transports.acp] list_page_size must be at least 1")
        caller = await local_caller(kernel, config.api_key, self.name)  # the admin, unless a key is configured
        writer = LineWriter(self.stdout_fd)
        try:
            await AcpConnection(kernel, config, writer, caller).run(self.stdin_fd, task_status)
        finally:
            writer.close()

    def banner(self, kernel: Kernel, config: AcpConfig, address: str | None, command: str) -> list[BannerLine]:
        """The command an editor's agent-server setting runs (Zed: ``command`` and ``args``)."""
        return [BannerLine("acp", f"JSON-RPC on this process's stdin/stdout; an editor starts it as: {command}")]


class AcpConnection:
    """One editor on the other end of stdin/stdout, for the life of the process."""

    def __init__(self, kernel: Kernel, config: AcpConfig, writer: LineWriter, caller: m.Caller = m.LOCAL_CALLER) -> None:
        self.kernel = kernel
        self.config = config
        self.writer = writer
        # Who the editor acts as: every command and follower of this process is theirs.
        self.caller = caller
        self.codec = JsonRpcCodec()
        self.editor = EditorRequests(self.codec, self.write)
        self.sessions = EditorSessions(kernel, config, self.editor, self.write, self.follow, self.start_task, caller=caller)
        self.inflight = 0
        self.running: dict[RpcId, tuple[anyio.CancelScope, Request]] = {}  # the editor's requests in progress
        self.cancel_on_start: set[RpcId] = set()  # prompts cancelled before their handler ran
        self._settled: anyio.Event | None = None  # set when the last request in flight is answered (EOF)
        self._stdout_gone = False
        self._prefix = f"acp-{uuid.uuid4().hex[:8]}"
        self._counter = itertools.count()
        self._tg: TaskGroup | None = None
        s = self.sessions
        self._methods: dict[str, Callable[[Request], Awaitable[Any]]] = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "logout": self.logout,
            "session/new": s.new,
            "session/load": s.load,
            "session/resume": s.resume,
            "session/close": s.close,
            "session/delete": s.delete,
            "session/list": s.listing,
            "session/prompt": self.prompt,
            "session/set_mode": s.set_mode,
            "session/set_model": s.set_model,
            "session/set_config_option": s.set_config_option,
            "session/cancel": self.cancel_as_request,
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
            # Registered here, not in the task: a $/cancel_request on the next line finds it.
            scope = anyio.CancelScope()
            if message.id is not None and message.id not in self.running:
                self.running[message.id] = (scope, message)
            handlers.start_soon(self.handle, message, scope)
        elif isinstance(message, Notification):
            if message.method == "session/cancel":
                handlers.start_soon(self.cancel, message.params)
            elif message.method == "$/cancel_request":
                handlers.start_soon(self.cancel_one, message.params)
            else:
                log.debug("ignoring notification %s", message.method)
        elif isinstance(message, Response):
            self.editor.resolve(message)
        elif isinstance(message, Reject):
            await self.write([message.reply])
        elif isinstance(message, Ignored):
            log.info("acp: %s", message.reason)

    async def handle(self, request: Request, scope: anyio.CancelScope) -> None:
        """Answer one request; ``$/cancel_request`` cancels its scope (answered ``-32800``)."""
        try:
            with scope:
                lines = await self.answer(request)
            if scope.cancelled_caught:
                lines = [self.codec.error(request.id, REQUEST_CANCELLED, "Request cancelled")]
            await self.write(lines)
        finally:
            if request.id is not None and self.running.get(request.id, (None,))[0] is scope:
                del self.running[request.id]
                self.cancel_on_start.discard(request.id)
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
        if not lines:
            return
        try:
            await self.writer.write_lines(lines)
        except (BrokenPipeError, ConnectionResetError):
            if not self._stdout_gone:
                self._stdout_gone = True
                log.info("acp: stdout closed by the editor; further output is dropped")

    def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        assert self._tg is not None
        self._tg.start_soon(fn, *args)

    async def start_task(self, fn: Callable[..., Coroutine[Any, Any, None]]) -> Any:
        """Run ``fn`` for the life of the connection (a session's MCP servers), once it has started."""
        assert self._tg is not None
        return await self._tg.start(fn)

    # -------------------------------------------------------------- methods

    async def initialize(self, request: Request) -> Any:
        params = decode_params(request.params, InitializeParams)
        self.sessions.capabilities = params.client_capabilities
        return codec.initialize_result(codec.negotiate_version(params.protocol_version), self.kernel.version)

    async def authenticate(self, request: Request) -> Any:
        """No authentication is needed (none is advertised): any method succeeds at once."""
        decode_params(request.params, AuthenticateParams)
        return {}

    async def logout(self, request: Request) -> Any:
        """Nothing to end: the gateway holds no login of the editor's."""
        return {}

    async def prompt(self, request: Request) -> Any:
        params = decode_params(request.params, PromptParams)
        state = self.sessions.get(params.session_id)
        parts = codec.prompt_parts(params.prompt)
        request_id = f"{self._prefix}-{next(self._counter)}"
        command = codec.slash_command(parts, self.kernel.commands)
        if command is not None:
            return await self.run_command(state, request_id, *command)
        # Registered before the kernel has it: the forwarder may see the run's events first.
        prompt = state.prompts[request_id] = OpenPrompt(request_id, request.id)
        prompt.cancelled = request.id in self.cancel_on_start
        try:
            options = codec.prompt_options(state.mode)
            # The editor's W3C trace context (``_meta.traceparent``) continues in the run's telemetry.
            caller = msgspec.structs.replace(self.caller, traceparent=codec.meta_traceparent(params.meta))
            accepted = await self.kernel.execute(m.Prompt(session_id=state.id, request_id=request_id, parts=parts, options=options), caller)
            if prompt.watch.run_id is None:
                prompt.watch.run_id = accepted.run_id
            if prompt.cancelled:  # a cancel came before the kernel knew the request
                await self.sessions.cancel(state, [prompt])
            await prompt.done.wait()
        finally:
            del state.prompts[request_id]
        await self.write(await self.sessions.title_update(state))
        return codec.prompt_answer(prompt.watch.end, cancelled=prompt.cancelled)

    async def run_command(self, state: SessionState, request_id: str, name: str, args: str) -> Any:
        reply = await self.kernel.execute(m.RunCommand(session_id=state.id, request_id=request_id, name=name, args=args), self.caller)
        lines = []
        if isinstance(reply, m.CommandOutput) and reply.output:
            lines.append(update_line(state.id, AgentMessageChunk(content=Text(reply.output))))
        await self.write([*lines, *await self.sessions.options_update(state)])  # /model changes an option
        return {"stopReason": "end_turn"}

    async def cancel_as_request(self, request: Request) -> Any:
        """``session/cancel`` is a notification; a client sending it as a request gets ``null``."""
        await self.cancel(request.params)
        return None

    async def cancel(self, raw_params: Any) -> None:
        """``session/cancel``: every open prompt of the session answers ``cancelled``."""
        try:
            params = decode_params(raw_params, SessionParams)
        except RpcFailure as failure:
            log.info("acp: ignoring session/cancel: %s", failure.error.message)
            return
        state = self.sessions.open.get(params.session_id)
        if state is None:
            log.info("acp: session/cancel for an unknown session %s", params.session_id)
            return
        await self.sessions.cancel(state, list(state.prompts.values()))

    async def cancel_one(self, raw_params: Any) -> None:
        """``$/cancel_request``: a prompt answers ``cancelled`` (as for ``session/cancel``);
        any other request in progress is cancelled and answered ``-32800``."""
        try:
            rid = decode_params(raw_params, CancelRequestParams).request_id
        except RpcFailure as failure:
            log.info("acp: ignoring $/cancel_request: %s", failure.error.message)
            return
        running = None if rid is None else self.running.get(rid)
        if rid is None or running is None:
            log.info("acp: $/cancel_request for %r, which is not in progress", rid)
            return
        for state in list(self.sessions.open.values()):
            prompts = [p for p in state.prompts.values() if p.rpc_id == rid]
            if prompts:
                await self.sessions.cancel(state, prompts)
                return
        scope, request = running
        if request.method == "session/prompt":
            self.cancel_on_start.add(rid)  # its run is interrupted once the kernel has it
        else:
            scope.cancel()

    # -------------------------------------------------------------- events

    def follow(self, state: SessionState, follower: Follower) -> None:
        self._spawn(self.forward, state, follower)

    async def forward(self, state: SessionState, follower: Follower) -> None:
        """Write the session's events as updates; answer prompts at their run's end, or after a gap."""
        try:
            with state.following:
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
        finally:
            for prompt in list(state.prompts.values()):
                prompt.done.set()
            state.unfollowed.set()

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
        await self.write([update_line(state.id, u) for u in state.stream.updates(*events)])
        for prompt in ended:
            prompt.done.set()

    async def settle_lost_runs(self, state: SessionState) -> None:
        """Events were lost for good: answer the prompts whose run is over (how it ended is unknown).

        A run is still to come while the kernel has not accepted it yet, while it is the
        session's active one, or while it waits in the session's queue.
        """
        try:
            reply = await self.kernel.execute(m.GetSession(session_id=state.id), self.caller)
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
        own = (t for source in state.tool_sources() for t in source.tools() if t.name == event.name)
        tool = self.kernel.tools.get(event.name) or next(own, None)
        params = codec.permission_request(
            state.id, event, state.cwd, category=tool.category if tool else "general", access=tool.access if tool else "query"
        )
        timeout = min(self.config.permission_timeout_s, event.timeout_s or math.inf)
        try:
            result = await self.editor.request("session/request_permission", params, timeout_s=timeout, track=prompt.questions)
            approved, remember, reason = codec.permission_decision(result)
        except (EditorError, TimeoutError) as exc:
            approved, remember, reason = False, False, f"no answer from the editor: {exc or 'timed out'}"
        if prompt.cancelled:
            approved, remember, reason = False, False, "cancelled"
        if approved:
            await self.write([update_line(state.id, codec.in_progress(event.call_id))])
        command = m.ResolveToolApproval(session_id=state.id, call_id=event.call_id, approved=approved, reason=reason, remember=remember)
        try:
            await self.kernel.execute(command, self.caller)
        except KernelError as exc:
            log.debug("acp: approval of %s not applied: %s", event.call_id, exc.message)

    # -------------------------------------------------------------- end of input

    def open_prompts(self) -> list[tuple[SessionState, OpenPrompt]]:
        return [(state, prompt) for state in self.sessions.open.values() for prompt in state.prompts.values()]

    async def drain_at_eof(self) -> None:
        """The editor is gone: fail its open requests, let prompts finish (bounded), release the sessions."""
        self.editor.close()
        waiting = self.open_prompts()
        if waiting:
            with anyio.move_on_after(self.config.eof_grace_s):
                for _, prompt in waiting:
                    await prompt.done.wait()
        for state in list(self.sessions.open.values()):
            if state.prompts:
                log.info("stdin closed: interrupting the runs of session %s", state.id)
            await self.sessions.release(state)
        if self.inflight:
            self._settled = anyio.Event()
            with anyio.move_on_after(5.0):
                await self._settled.wait()
        await self.writer.flush()
