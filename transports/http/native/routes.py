"""The native REST + SSE API under ``/v1/...``: kernel commands and events over HTTP.

Each route decodes its body with the codec, runs one kernel command and answers with
the kernel's reply as JSON. A prompt is followed by the kernel's run follower and
answers with that run's events as SSE (or one JSON result with ``Accept:
application/json``, or 202 at once with ``?wait=false``); its questions are the
client's to answer (``/approvals``, ``/turn-limit``). ``/events`` follows the whole
session and resumes from ``Last-Event-ID`` / ``?after=`` on reconnect. ``GET
/v1/sessions`` as SSE is the live session list (of every transport's sessions), polled
from the kernel every ``sessions_poll_s``: the console's sidebar.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import anyio
import msgspec

from kernel import Follower, Kernel, KernelError, RunFollower, RunWatch
from kernel import model as m
from transports.shared import (
    HttpError,
    Request,
    Response,
    Router,
    SSEStream,
    format_sse,
    json_response,
    open_sse,
    write_frames,
)

from . import codec
from .wire import ApiError, ApprovalBody, CommandBody, PromptBody, RegenerateBody, SessionCreate, ToolBody, TurnLimitBody

T = TypeVar("T")

#: Direct tool calls without a session_id run in this one session (a direct call
#: needs a session for its context; one per call would litter the store).
DIRECT_TOOLS_SESSION = "http-direct-tools"


def event_frame(event: m.Event) -> bytes:
    """One kernel event as one SSE frame (the fields are the codec's)."""
    return format_sse(codec.event_data(event), event=codec.event_tag(event), id=codec.event_id(event))


def _refuse(error: ApiError) -> NoReturn:
    raise HttpError(error.status, error.message, code=error.code, headers=error.headers)


def _ok(value: T | ApiError) -> T:
    if isinstance(value, ApiError):
        _refuse(value)
    return value


def _error_response(error: ApiError) -> Response:
    return json_response(error.status, error.body(), headers=error.headers)


class NativeApi:
    """``client``: the name this API's event followers give the sessions they watch (the
    transport serving it), shown in ``SessionInfo.clients``."""

    def __init__(self, kernel: Kernel, *, keepalive_s: float, run_timeout_s: float, sessions_poll_s: float, client: str = "http") -> None:
        self.kernel = kernel
        self.keepalive_s = keepalive_s
        self.run_timeout_s = run_timeout_s
        self.sessions_poll_s = sessions_poll_s
        self.client = client

    @property
    def send_timeout_s(self) -> float:
        """A reader that takes no event for this long is let go: the kernel's lag grace."""
        return self.kernel.settings.session.lag_grace_s

    def register(self, router: Router) -> None:
        router.get("/health", auth=False)(self.health)
        router.get("/v1/status")(self.status)
        router.get("/v1/keys")(self.keys)
        router.get("/v1/me")(self.me)
        router.get("/v1/agents")(self.agents)
        router.get("/v1/tools")(self.tools)
        router.post("/v1/tools/{name}")(self.execute_tool)
        router.get("/v1/commands")(self.commands)
        router.get("/v1/settings")(self.get_settings)
        router.patch("/v1/settings")(self.patch_settings)
        router.get("/v1/sessions")(self.list_sessions)
        router.post("/v1/sessions")(self.create_session)
        router.get("/v1/sessions/{session_id}")(self.get_session)
        router.delete("/v1/sessions/{session_id}")(self.delete_session)
        router.post("/v1/sessions/{session_id}/prompt")(self.prompt)
        router.post("/v1/sessions/{session_id}/regenerate")(self.regenerate)
        router.get("/v1/sessions/{session_id}/events")(self.events)
        router.post("/v1/sessions/{session_id}/interrupt")(self.interrupt)
        router.post("/v1/sessions/{session_id}/approvals")(self.approve)
        router.post("/v1/sessions/{session_id}/turn-limit")(self.turn_limit)
        router.post("/v1/sessions/{session_id}/clear")(self.clear_context)
        router.post("/v1/sessions/{session_id}/commands")(self.run_command)
        router.get("/v1/sessions/{session_id}/history")(self.get_history)
        router.delete("/v1/sessions/{session_id}/history")(self.clear_history)

    # ---------------------------------------------------------- helpers

    async def _execute(self, call: Awaitable[T]) -> T:
        """Await a kernel call; a refusal becomes the dialect's error answer."""
        try:
            return await call
        except KernelError as exc:
            _refuse(codec.kernel_error(exc))

    async def _reply(self, request: Request, command: m.Command, status: int = 200) -> Response:
        """Carry out ``command`` as the request's caller (its key, resolved by the router)."""
        return json_response(status, await self._execute(self.kernel.execute(command, request.caller)))

    async def _session(self, request: Request, session_id: str) -> m.SessionOpened:
        """The session, which must exist and be the caller's (loaded from the store if not live)."""
        return await self._execute(self.kernel.execute(m.GetSession(session_id=session_id), request.caller))

    async def _session_id(self, request: Request) -> str:
        """The path's session id, once the session is known to exist (404 otherwise)."""
        return (await self._session(request, request.path_params["session_id"])).session.session_id

    async def _body(self, request: Request, type: type[T], *, empty_ok: bool = False) -> T:
        return _ok(codec.decode(await request.body(), type, empty_ok=empty_ok))

    # ---------------------------------------------------------- read-only

    async def health(self, request: Request) -> Response:
        return json_response(200, {"status": "ok", "version": self.kernel.version})

    async def me(self, request: Request) -> Response:
        """Who the request's credentials are: the key's name, scopes and agents (the admin
        token: ``admin``) — what a page shows as signed in and offers (never a secret)."""
        principal = request.caller.principal
        return json_response(200, {"name": principal.name, "scopes": list(principal.scopes), "agents": list(principal.agents)})

    async def keys(self, request: Request) -> Response:
        """The API keys with their limits and usage (the admin's to read; never a secret)."""
        return json_response(200, {"keys": await self._execute(self.kernel.list_keys(request.caller))})

    async def status(self, request: Request) -> Response:
        return await self._reply(request, m.GetStatus())

    async def agents(self, request: Request) -> Response:
        return await self._reply(request, m.ListAgents())

    async def tools(self, request: Request) -> Response:
        return await self._reply(request, m.ListTools())

    async def commands(self, request: Request) -> Response:
        return await self._reply(request, m.ListCommands())

    async def get_settings(self, request: Request) -> Response:
        return await self._reply(request, m.GetSettings())

    async def patch_settings(self, request: Request) -> Response:
        changes = await self._body(request, dict[str, Any])
        return await self._reply(request, m.UpdateSettings(changes=changes))

    async def execute_tool(self, request: Request) -> Response:
        body = await self._body(request, ToolBody, empty_ok=True)
        name = request.path_params["name"]
        session_id = body.session_id
        if session_id is not None:
            await self._session(request, session_id)
        elif name in self.kernel.tools:
            opened = await self._execute(
                self.kernel.execute(m.OpenSession(session_id=DIRECT_TOOLS_SESSION, label="direct tool calls (http)"), request.caller)
            )
            session_id = opened.session.session_id
        return await self._reply(request, m.ExecuteTool(session_id=session_id, name=name, arguments=body.arguments))

    # ---------------------------------------------------------- sessions

    async def list_sessions(self, request: Request) -> Response | None:
        command = m.ListSessions(agent_id=request.query.get("agent") or None)
        if request.method == "HEAD" or not codec.wants_stream(request.headers.get("accept")):
            return await self._reply(request, command)
        await self._watch_sessions(request, command)
        return None

    async def _overview(self, request: Request, command: m.ListSessions) -> tuple[tuple[m.SessionInfo, ...], m.StatusReport]:
        caller = request.caller
        listing, status = await self._execute(self.kernel.execute(command, caller)), await self._execute(self.kernel.execute(m.GetStatus(), caller))
        return listing.sessions, status

    async def _watch_sessions(self, request: Request, command: m.ListSessions) -> None:
        """The live list: what changed since the last poll, as SSE (an unknown agent is a
        404 before the stream opens; a failing poll later is a ``list_error`` event, and the
        next poll tries again)."""
        watch = codec.SessionListWatch()
        overview = await self._overview(request, command)
        async with open_sse(request, keepalive_interval_s=self.keepalive_s, send_timeout_s=self.send_timeout_s) as stream:
            while True:
                frames = [format_sse(data, event=name) for name, data in watch.feed(*overview)]
                if not await write_frames(stream, frames):
                    return
                await anyio.sleep(self.sessions_poll_s)
                try:
                    overview = await self._overview(request, command)
                except HttpError as exc:
                    if not await stream.send(msgspec.json.encode(codec.native_error_body(exc)), event="list_error"):
                        return

    async def create_session(self, request: Request) -> Response:
        body = await self._body(request, SessionCreate, empty_ok=True)
        command = _ok(codec.open_session_command(body))
        existed = False
        if body.session_id is not None:
            try:
                await self.kernel.execute(m.GetSession(session_id=body.session_id), request.caller)
                existed = True
            except KernelError:
                existed = False
        return await self._reply(request, command, 200 if existed else 201)

    async def get_session(self, request: Request) -> Response:
        return json_response(200, await self._session(request, request.path_params["session_id"]))

    async def delete_session(self, request: Request) -> Response:
        return await self._reply(request, m.DeleteSession(session_id=request.path_params["session_id"]))

    async def interrupt(self, request: Request) -> Response:
        return await self._reply(request, m.Interrupt(session_id=await self._session_id(request)))

    async def approve(self, request: Request) -> Response:
        session_id = await self._session_id(request)
        body = await self._body(request, ApprovalBody)
        return await self._reply(
            request,
            m.ResolveToolApproval(
                session_id=session_id, call_id=body.call_id, approved=body.approved, reason=body.reason, remember=body.remember
            )
        )

    async def turn_limit(self, request: Request) -> Response:
        session_id = await self._session_id(request)
        body = await self._body(request, TurnLimitBody)
        return await self._reply(request, m.ResolveTurnLimit(session_id=session_id, confirmed=body.confirmed, reason=body.reason))

    async def run_command(self, request: Request) -> Response:
        session_id = await self._session_id(request)
        body = await self._body(request, CommandBody)
        return await self._reply(request, _ok(codec.command_command(session_id, body)))

    async def get_history(self, request: Request) -> Response:
        session_id = await self._session_id(request)
        limit = _ok(codec.parse_int(request.query.get("limit"), "limit", minimum=1))
        return await self._reply(request, m.GetHistory(session_id=session_id, limit=limit))

    async def clear_context(self, request: Request) -> Response:
        """Clear the context (and so the stored history) behind any run, telling every
        follower with a ``context_cleared`` event; 202 ``accepted`` when it waits its turn."""
        reply = await self._execute(self.kernel.execute(m.ClearContext(session_id=await self._session_id(request)), request.caller))
        return json_response(202 if isinstance(reply, m.Accepted) else 200, reply)

    async def clear_history(self, request: Request) -> Response:
        return await self._reply(request, m.ClearHistory(session_id=await self._session_id(request)))

    # ---------------------------------------------------------- runs and events

    async def prompt(self, request: Request) -> Response | None:
        session_id = await self._session_id(request)
        body = await self._body(request, PromptBody)
        return await self._run(request, _ok(codec.prompt_command(session_id, body, request.headers.get("x-request-id"))))

    async def regenerate(self, request: Request) -> Response | None:
        session_id = await self._session_id(request)
        body = await self._body(request, RegenerateBody, empty_ok=True)
        return await self._run(request, codec.regenerate_command(session_id, body, request.headers.get("x-request-id")))

    async def _run(self, request: Request, command: m.Prompt | m.Regenerate) -> Response | None:
        if request.query.get("wait", "").lower() in ("0", "false", "no"):
            return await self._reply(request, command, 202)  # followed on /events, if at all
        as_json = codec.wants_json(request.headers.get("accept"))
        try:
            # A stream resumable by Last-Event-ID must not skip lost events: it ends at a gap.
            # A JSON answer needs only the run's end (which carries the whole text).
            run = await RunFollower.start(self.kernel, command, stop_on_loss=not as_json, client=self.client, caller=request.caller)
        except KernelError as exc:
            _refuse(codec.kernel_error(exc))
        async with run:
            if as_json:
                return await self._collect(run)
            assert run.run_id is not None  # a prompt's run has its id when accepted
            headers = {"x-session-id": run.session_id, "x-run-id": run.run_id}
            async with open_sse(request, keepalive_interval_s=self.keepalive_s, headers=headers, send_timeout_s=self.send_timeout_s) as stream:
                await self._pump(stream, run.next_batch, lambda: run.end is not None)
        return None

    async def _collect(self, run: RunFollower) -> Response:
        collector = codec.RunCollector()
        deadline = anyio.current_time() + self.run_timeout_s
        ended = False
        while not ended:
            batch = await run.next_batch(deadline)
            if not batch:  # the deadline passed
                await run.interrupt("timeout")
                return _error_response(codec.run_timeout(run.run_id, self.run_timeout_s))
            for event in batch:
                ended = collector.feed(event)
        outcome = collector.outcome()
        if isinstance(outcome, ApiError):
            return _error_response(outcome)
        return json_response(200, outcome)

    async def events(self, request: Request) -> Response | None:
        session_id = await self._session_id(request)
        if request.method == "HEAD":  # a stream has no end to measure
            return Response(200, content_type="text/event-stream")
        after = _ok(codec.resume_after(request.headers.get("last-event-id"), request.query.get("after")))
        run_id = request.query.get("run_id") or None
        try:
            # A hole in a stream resumable by Last-Event-ID would go unnoticed: end it instead.
            follower = await Follower.open(self.kernel, session_id, after, stop_on_loss=True, client=self.client, caller=request.caller)
        except KernelError as exc:
            _refuse(codec.kernel_error(exc))
        watch = RunWatch(None, run_id) if run_id is not None else None
        batches = follower.next_batch if watch is None else _run_events(follower, watch)
        headers = {"x-session-id": session_id}
        async with follower, open_sse(request, keepalive_interval_s=self.keepalive_s, headers=headers, send_timeout_s=self.send_timeout_s) as stream:
            await self._pump(stream, batches, lambda: watch is not None and watch.end is not None)
        return None

    async def _pump(self, stream: SSEStream, batches: Callable[[], Awaitable[list[m.Event]]], over: Callable[[], bool]) -> None:
        """Forward event batches as SSE frames, each batch in one write, until they end; the
        batch after which ``over()`` holds (the followed run's end) ends the response with it."""
        while batch := await batches():
            last = over()
            if not await write_frames(stream, [event_frame(event) for event in batch], last=last) or last:
                return


def _run_events(follower: Follower, watch: RunWatch) -> Callable[[], Awaitable[list[m.Event]]]:
    """The session's batches narrowed to one run (``?run_id=``), ending with the run's
    end; the notice of lost events passes, since it ends the stream too."""

    async def next_batch() -> list[m.Event]:
        while watch.end is None:
            batch = await follower.next_batch()
            if not batch:
                return []
            ours = [e for e in batch if watch.feed(e) or (isinstance(e, m.SubscriberLagged) and watch.end is None)]
            if ours:
                return ours
        return []

    return next_batch


__all__ = ["DIRECT_TOOLS_SESSION", "NativeApi", "event_frame"]
