"""The native REST + SSE API under ``/v1/...``: kernel commands and events over HTTP.

Each route decodes its body with the codec, runs one kernel command and answers with
the kernel's reply as JSON. Prompts answer with the run's events as SSE (or one JSON
result with ``Accept: application/json``, or 202 at once with ``?wait=false``).
Streams subscribe *before* the prompt is sent, so no event of the run can be missed,
and resume from ``Last-Event-ID`` / ``?after=`` on reconnect.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

import anyio

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from kernel.session import Session
from transports.shared import (
    Request,
    Response,
    Router,
    SSEStream,
    json_response,
    open_sse,
)

from . import codec
from .codec import ApiError
from .sse import interrupt_run, write_frames

T = TypeVar("T")

#: Direct tool calls without a session_id run in this one session (a direct call
#: needs a session for its context; one per call would litter the store).
DIRECT_TOOLS_SESSION = "http-direct-tools"


def _refuse(error: ApiError) -> NoReturn:
    raise error.http_error()


def _ok(value: T | ApiError) -> T:
    if isinstance(value, ApiError):
        _refuse(value)
    return value


def _error_response(error: ApiError) -> Response:
    return json_response(error.status, error.body(), headers=error.headers)


class NativeApi:
    def __init__(self, kernel: Kernel, *, keepalive_s: float, run_timeout_s: float) -> None:
        self.kernel = kernel
        self.keepalive_s = keepalive_s
        self.run_timeout_s = run_timeout_s

    @property
    def send_timeout_s(self) -> float:
        """A reader that takes no event for this long is let go: the kernel's lag grace."""
        return self.kernel.settings.session.lag_grace_s

    def register(self, router: Router) -> None:
        router.get("/health", auth=False)(self.health)
        router.get("/v1/status")(self.status)
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
        router.post("/v1/sessions/{session_id}/commands")(self.run_command)
        router.get("/v1/sessions/{session_id}/history")(self.get_history)
        router.delete("/v1/sessions/{session_id}/history")(self.clear_history)

    # ---------------------------------------------------------- helpers

    async def _execute(self, command: m.Command) -> m.Reply:
        try:
            return await self.kernel.execute(command)
        except KernelError as exc:
            _refuse(codec.kernel_error(exc))

    async def _reply(self, command: m.Command, status: int = 200) -> Response:
        return json_response(status, await self._execute(command))

    async def _session(self, request: Request) -> Session:
        """The path's session, which must exist (loaded from the store if not live)."""
        try:
            return await self.kernel.session(request.path_params["session_id"], create=False)
        except KernelError as exc:
            _refuse(codec.kernel_error(exc))

    async def _session_id(self, request: Request) -> str:
        return (await self._session(request)).id

    async def _body(self, request: Request, type: type[T], *, empty_ok: bool = False) -> T:
        return _ok(codec.decode(await request.body(), type, empty_ok=empty_ok))

    # ---------------------------------------------------------- read-only

    async def health(self, request: Request) -> Response:
        return json_response(200, {"status": "ok", "version": self.kernel.version})

    async def status(self, request: Request) -> Response:
        return await self._reply(m.GetStatus())

    async def agents(self, request: Request) -> Response:
        return await self._reply(m.ListAgents())

    async def tools(self, request: Request) -> Response:
        return await self._reply(m.ListTools())

    async def commands(self, request: Request) -> Response:
        return await self._reply(m.ListCommands())

    async def get_settings(self, request: Request) -> Response:
        return await self._reply(m.GetSettings())

    async def patch_settings(self, request: Request) -> Response:
        changes = await self._body(request, dict[str, Any])
        return await self._reply(m.UpdateSettings(changes=codec.drop_masked_secrets(changes)))

    async def execute_tool(self, request: Request) -> Response:
        body = await self._body(request, codec.ToolBody, empty_ok=True)
        name = request.path_params["name"]
        session_id = body.session_id
        if session_id is not None:
            try:
                await self.kernel.session(session_id, create=False)
            except KernelError as exc:
                _refuse(codec.kernel_error(exc))
        elif name in self.kernel.tools:
            session_id = (await self.kernel.session(DIRECT_TOOLS_SESSION, label="direct tool calls (http)")).id
        return await self._reply(m.ExecuteTool(session_id=session_id, name=name, arguments=body.arguments))

    # ---------------------------------------------------------- sessions

    async def list_sessions(self, request: Request) -> Response:
        return await self._reply(m.ListSessions(agent_id=request.query.get("agent") or None))

    async def create_session(self, request: Request) -> Response:
        body = await self._body(request, codec.SessionCreate, empty_ok=True)
        command = _ok(codec.open_session_command(body))
        existed = False
        if body.session_id is not None:
            try:
                await self.kernel.session(body.session_id, create=False)
                existed = True
            except KernelError:
                existed = False
        return await self._reply(command, 200 if existed else 201)

    async def get_session(self, request: Request) -> Response:
        return json_response(200, m.SessionOpened(session=(await self._session(request)).info()))

    async def delete_session(self, request: Request) -> Response:
        return await self._reply(m.DeleteSession(session_id=request.path_params["session_id"]))

    async def interrupt(self, request: Request) -> Response:
        return await self._reply(m.Interrupt(session_id=await self._session_id(request)))

    async def approve(self, request: Request) -> Response:
        session_id = await self._session_id(request)
        body = await self._body(request, codec.ApprovalBody)
        return await self._reply(
            m.ResolveToolApproval(
                session_id=session_id, call_id=body.call_id, approved=body.approved, reason=body.reason, remember=body.remember
            )
        )

    async def turn_limit(self, request: Request) -> Response:
        session_id = await self._session_id(request)
        body = await self._body(request, codec.TurnLimitBody)
        return await self._reply(m.ResolveTurnLimit(session_id=session_id, confirmed=body.confirmed, reason=body.reason))

    async def run_command(self, request: Request) -> Response:
        session_id = await self._session_id(request)
        body = await self._body(request, codec.CommandBody)
        return await self._reply(_ok(codec.command_command(session_id, body)))

    async def get_history(self, request: Request) -> Response:
        session_id = await self._session_id(request)
        limit = _ok(codec.parse_int(request.query.get("limit"), "limit", minimum=1))
        return await self._reply(m.GetHistory(session_id=session_id, limit=limit))

    async def clear_history(self, request: Request) -> Response:
        return await self._reply(m.ClearHistory(session_id=await self._session_id(request)))

    # ---------------------------------------------------------- runs and events

    async def prompt(self, request: Request) -> Response | None:
        session_id = await self._session_id(request)
        body = await self._body(request, codec.PromptBody)
        command = _ok(codec.prompt_command(session_id, body, request.headers.get("x-request-id")))
        return await self._run(request, session_id, command)

    async def regenerate(self, request: Request) -> Response | None:
        session_id = await self._session_id(request)
        body = await self._body(request, codec.RegenerateBody, empty_ok=True)
        request_id = body.request_id or request.headers.get("x-request-id")
        command = m.Regenerate(session_id=session_id, request_id=request_id, options=body.options)
        return await self._run(request, session_id, command)

    async def _run(self, request: Request, session_id: str, command: m.Prompt | m.Regenerate) -> Response | None:
        async with await Follower.open(self.kernel, session_id, stop_on_loss=True) as follower:
            accepted = await self._execute(command)
            assert isinstance(accepted, m.Accepted) and accepted.run_id is not None
            if request.query.get("wait", "").lower() in ("0", "false", "no"):
                return json_response(202, accepted)
            if codec.wants_json(request.headers.get("accept")):
                return await self._collect(follower, session_id, accepted.run_id)
            headers = {"x-session-id": session_id, "x-run-id": accepted.run_id}
            async with open_sse(request, keepalive_interval_s=self.keepalive_s, headers=headers, send_timeout_s=self.send_timeout_s) as stream:
                await self._pump(stream, follower, accepted.run_id)
        return None

    async def _collect(self, follower: Follower, session_id: str, run_id: str) -> Response:
        collector = codec.RunCollector(run_id)
        with anyio.move_on_after(self.run_timeout_s) as timer:
            while not collector.end:
                batch = await follower.next_batch()
                if not batch or any(collector.feed(event) for event in batch):
                    break
        if timer.cancelled_caught:
            interrupt_run(self.kernel, session_id, run_id)
            return _error_response(
                ApiError(
                    status=504, code="timeout", details={"run_id": run_id},
                    message=f"The run did not end within {self.run_timeout_s:g}s; it was interrupted",
                )
            )
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
            follower = await Follower.open(self.kernel, session_id, after, stop_on_loss=True)
        except KernelError as exc:
            _refuse(codec.kernel_error(exc))
        headers = {"x-session-id": session_id}
        async with follower, open_sse(request, keepalive_interval_s=self.keepalive_s, headers=headers, send_timeout_s=self.send_timeout_s) as stream:
            await self._pump(stream, follower, run_id)
        return None

    async def _pump(self, stream: SSEStream, follower: Follower, run_id: str | None) -> None:
        """Forward events (all, or one run's until it ends) as SSE frames, batched."""
        while True:
            batch = await follower.next_batch()
            if not batch:
                return
            frames: list[bytes] = []
            done = False
            for event in batch:
                if not isinstance(event, m.SubscriberLagged) and run_id is not None and getattr(event, "run_id", None) != run_id:
                    continue
                frames.append(codec.event_frame(event))
                if isinstance(event, m.SubscriberLagged) or (run_id is not None and isinstance(event, m.RUN_END_EVENTS)):
                    done = True
                    break
            if frames and not await write_frames(stream, frames):
                return
            if done:
                return


__all__ = ["DIRECT_TOOLS_SESSION", "NativeApi"]
