"""OpenFang's REST endpoints and the SSE message stream, bound to the kernel.

Errors are ``{"error": "..."}`` with the status code (the router's default shape).
POST endpoints that act (stop, reset, switch, new session) never require a body:
the SDKs post them with a JSON content type and nothing else.

REST clients cannot answer a tool-approval question, so a run started here that
asks one is answered "no" at once with a reason the model sees (never silently
approved); use the WebSocket to approve tools.
"""

from __future__ import annotations

import itertools
import platform
import sys
import uuid
from typing import Any

import anyio
import msgspec

from kernel import Follower, Kernel, KernelError
from kernel import model as m
from transports.shared import (
    HttpError,
    Request,
    Response,
    Router,
    json_response,
    open_sse,
)

from .coalesce import DeltaCoalescer
from .codec import attachment_part
from .config import OpenFangConfig
from .rest_codec import (
    SseEncoder,
    agent_json,
    commands_json,
    history_json,
    http_status,
    session_json,
    sessions_json,
)
from .state import ActiveSessions, Agents, UploadStore
from .uploads import parse_upload

_requests = itertools.count(1)
_encode = msgspec.json.Encoder().encode
REST_DENIAL = "tool approval is not possible over the REST API; connect over the WebSocket to approve tools"


class MessageBody(msgspec.Struct, kw_only=True):
    message: str = ""
    attachments: list[dict[str, Any]] = []
    session_id: str | None = None


class NewSessionBody(msgspec.Struct, kw_only=True):
    label: str | None = None


class RestRun:
    """One prompt sent over REST: its events only, until its run ends."""

    def __init__(self, kernel: Kernel, feed: Follower, request_id: str) -> None:
        self.kernel = kernel
        self.feed = feed
        self.request_id = request_id
        self.end: m.RunFinished | m.RunFailed | None = None

    @classmethod
    async def start(cls, kernel: Kernel, agent_id: str, session_id: str, parts: tuple[m.ContentPart, ...]) -> RestRun:
        await kernel.session(session_id, agent_id)
        feed = await Follower.open(kernel, session_id)
        run = cls(kernel, feed, f"of-rest-{next(_requests)}-{uuid.uuid4().hex[:6]}")
        try:
            await kernel.execute(m.Prompt(parts=parts, agent_id=agent_id, session_id=session_id, request_id=run.request_id))
        except BaseException:
            feed.close()
            raise
        return run

    async def next_batch(self, deadline: float | None = None) -> list[m.Event]:
        """This run's next events ([] on timeout); approvals are declined on the spot."""
        if self.end is not None or self.feed.closed:
            return []
        batch = await self.feed.next_batch(deadline)
        lost = next((e for e in batch if isinstance(e, m.SubscriberLagged)), None)
        ours = [e for e in batch if getattr(e, "request_id", None) == self.request_id]
        if lost is not None and not any(isinstance(e, (m.RunFinished, m.RunFailed)) for e in ours):
            # The run's end may be among the lost events: waiting for it could take forever.
            self.end = m.RunFailed(
                session_id=self.feed.session_id, run_id="", request_id=self.request_id,
                error=m.ErrorInfo(code="rate_limited", message=f"the request fell behind and missed events of its run: {lost.error.message}"),
            )
            ours.append(self.end)
            return ours
        for event in ours:
            if isinstance(event, m.ToolApprovalRequested):
                try:
                    await self.kernel.execute(m.ResolveToolApproval(
                        session_id=event.session_id, call_id=event.call_id, approved=False, reason=REST_DENIAL,
                    ))
                except KernelError:
                    pass  # already answered elsewhere or timed out
            elif isinstance(event, (m.RunFinished, m.RunFailed)):
                self.end = event
        if self.feed.closed and self.end is None:
            self.end = m.RunFailed(session_id=self.feed.session_id, run_id="", error=m.ErrorInfo(code="internal", message="the session was closed"))
        return ours

    @property
    def done(self) -> bool:
        return self.end is not None

    def close(self) -> None:
        self.feed.close()


def _body_or_empty(raw: bytes, type_: type[Any]) -> Any:
    """Optional JSON bodies: nothing (or ``{}``) is fine, garbage is a 400."""
    if not raw.strip():
        return type_()
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.DecodeError as exc:
        raise HttpError(400, f"Invalid request body: {exc}", code="invalid_request") from None


def add_routes(router: Router, kernel: Kernel, config: OpenFangConfig, agents: Agents, sessions: ActiveSessions, uploads: UploadStore) -> None:
    """Register every REST endpoint of the OpenFang dialect on ``router``."""

    async def prompt_parts(agent_id: str, request: Request) -> tuple[str, tuple[m.ContentPart, ...]]:
        body = await request.json(MessageBody)
        if len(body.message.encode("utf-8")) > config.max_message_bytes:
            raise HttpError(413, f"Message too large (max {config.max_message_bytes // 1024}KB)", code="too_large")
        if not body.message.strip():
            raise HttpError(400, "Missing or empty 'message' field", code="invalid_request")
        parts: list[m.ContentPart] = [m.TextPart(body.message)]
        for ref in body.attachments:
            file_id = ref.get("file_id")
            upload = uploads.get(file_id) if isinstance(file_id, str) else None
            if upload is None:
                raise HttpError(400, f"Attachment not found: {file_id}", code="invalid_request")
            parts.append(attachment_part(upload))
        session_id = body.session_id or await sessions.get(agent_id)
        return session_id, tuple(parts)

    @router.get("/api/health", auth=False)
    async def health(request: Request) -> Response:
        return json_response(200, {"status": "ok", "version": kernel.version})

    @router.get("/api/version")
    async def version(request: Request) -> Response:
        return json_response(200, {
            "name": "gateway", "version": kernel.version, "dialect": "openfang",
            "platform": sys.platform, "arch": platform.machine(), "python": platform.python_version(),
        })

    @router.get("/api/status")
    async def status(request: Request) -> Response:
        report = await kernel.execute(m.GetStatus())
        assert isinstance(report, m.StatusReport)
        return json_response(200, {
            "status": "running", "version": report.version, "uptime_seconds": int(report.uptime_s),
            "agent_count": report.agents, "sessions": report.sessions, "active_runs": report.active_runs,
            "default_provider": report.provider, "default_model": report.model,
        })

    @router.get("/api/agents")
    async def list_agents(request: Request) -> Response:
        return json_response(200, [agent_json(info) for info in agents.infos()])

    @router.get("/api/agents/{id}")
    async def get_agent(request: Request) -> Response:
        agent = agents.resolve(request.path_params["id"])
        return json_response(200, agent_json(kernel.agent_info(agent)))

    @router.post("/api/agents/{id}/message")
    async def message(request: Request) -> Response:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        session_id, parts = await prompt_parts(agent_id, request)
        run = await _start(agent_id, session_id, parts)
        try:
            while not run.done:
                await run.next_batch()
        finally:
            run.close()
        end = run.end
        if isinstance(end, m.RunFailed):
            return json_response(http_status(end.error.code), {"error": end.error.message})
        assert isinstance(end, m.RunFinished)
        body: dict[str, Any] = {
            "response": end.text, "input_tokens": end.usage.input_tokens, "output_tokens": end.usage.output_tokens,
            "iterations": end.iterations, "cost_usd": None, "session_id": session_id,
        }
        if end.interrupted:
            body["interrupted"] = True
        return json_response(200, body)

    @router.post("/api/agents/{id}/message/stream")
    async def message_stream(request: Request) -> None:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        session_id, parts = await prompt_parts(agent_id, request)
        run = await _start(agent_id, session_id, parts)
        encoder = SseEncoder()
        coalescer = DeltaCoalescer(config.coalesce_ms / 1000.0, config.coalesce_chars)
        try:
            # A client that stops reading is let go after the kernel's lag grace.
            async with open_sse(request, keepalive_interval_s=config.sse_keepalive_s, send_timeout_s=kernel.settings.session.lag_grace_s) as sse:
                while not encoder.finished and not run.feed.closed:
                    batch = await run.next_batch(coalescer.deadline)
                    now = anyio.current_time()
                    if not batch:
                        text = coalescer.due(now)
                        if text is not None:
                            await sse.send(_encode({"content": text, "done": False}), event="chunk")
                        continue
                    for event in batch:
                        for name, data in encoder.feed(event):
                            if name == "chunk":
                                text = coalescer.push(data["content"], now)
                                if text is None:
                                    continue
                                data = {"content": text, "done": False}
                            else:
                                pending = coalescer.flush()
                                if pending is not None:
                                    await sse.send(_encode({"content": pending, "done": False}), event="chunk")
                            await sse.send(_encode(data), event=name)
        finally:
            run.close()

    async def _start(agent_id: str, session_id: str, parts: tuple[m.ContentPart, ...]) -> RestRun:
        sessions.touch(agent_id, session_id)
        try:
            return await RestRun.start(kernel, agent_id, session_id, parts)
        except KernelError as exc:
            raise HttpError(http_status(exc.code), exc.message, code=exc.code) from None

    @router.get("/api/agents/{id}/session")
    async def get_session(request: Request) -> Response:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        session_id = await sessions.get(agent_id)
        history = await kernel.execute(m.GetHistory(session_id=session_id))
        assert isinstance(history, m.HistoryView)
        return json_response(200, history_json(session_id, agent_id, history.messages))

    @router.get("/api/agents/{id}/sessions")
    async def list_sessions(request: Request) -> Response:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        active = await sessions.get(agent_id)
        listing = await kernel.execute(m.ListSessions(agent_id=agent_id))
        assert isinstance(listing, m.SessionList)
        return json_response(200, sessions_json(listing.sessions, active))

    @router.post("/api/agents/{id}/sessions")
    async def create_session(request: Request) -> Response:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        body = _body_or_empty(await request.body(), NewSessionBody)
        session_id = await sessions.create(agent_id, body.label)
        info = kernel.sessions[session_id].info()
        return json_response(200, {**session_json(info, session_id), "status": "created"})

    @router.post("/api/agents/{id}/sessions/{sid}/switch")
    async def switch_session(request: Request) -> Response:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        sid = request.path_params["sid"]
        listing = await kernel.execute(m.ListSessions(agent_id=agent_id))
        assert isinstance(listing, m.SessionList)
        if sid not in {info.session_id for info in listing.sessions}:
            raise HttpError(404, "Session not found", code="not_found")
        sessions.switch(agent_id, sid)
        return json_response(200, {"status": "switched", "session_id": sid, "message": f"Switched to session {sid}"})

    @router.post("/api/agents/{id}/session/reset")
    async def reset_session(request: Request) -> Response:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        session_id = await sessions.get(agent_id)
        await kernel.session(session_id, agent_id)
        reply = await kernel.execute(m.ClearContext(session_id=session_id))
        queued = isinstance(reply, m.Accepted) and reply.queued
        message = "Session will be reset when the current run ends." if queued else "Session reset. Chat history cleared."
        return json_response(200, {"status": "reset", "session_id": session_id, "message": message})

    @router.post("/api/agents/{id}/stop")
    async def stop(request: Request) -> Response:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        stopped = sum(1 for sid in sessions.live_sessions(agent_id) if kernel.sessions[sid].interrupt())
        message = "Run cancelled." if stopped else "No active run to cancel."
        return json_response(200, {"status": "stopped" if stopped else "idle", "message": message})

    @router.delete("/api/agents/{id}/history")
    async def clear_history(request: Request) -> Response:
        agent_id = agents.resolve(request.path_params["id"]).agent_id()
        session_id = await sessions.get(agent_id)
        await kernel.execute(m.ClearHistory(session_id=session_id))
        return json_response(200, {"status": "ok", "session_id": session_id, "message": "History cleared."})

    @router.get("/api/hands")
    async def hands(request: Request) -> Response:
        return json_response(200, {"hands": [], "total": 0})

    @router.get("/api/commands")
    async def commands(request: Request) -> Response:
        try:
            body = commands_json(request.query.get("surface", "web"), [c.info() for c in kernel.commands.values()])
        except ValueError as exc:
            raise HttpError(400, str(exc), code="invalid_request") from None
        return json_response(200, body)

    @router.post("/api/agents/{id}/upload")
    async def upload(request: Request) -> Response:
        agents.resolve(request.path_params["id"])
        request.max_body_bytes = config.max_upload_bytes + 16384  # room for multipart framing
        upload = parse_upload(await request.body(), request.headers)
        if len(upload.data) > config.max_upload_bytes:
            raise HttpError(413, f"Upload too large (max {config.max_upload_bytes} bytes)", code="too_large")
        file_id = uploads.put(upload)
        return json_response(200, {
            "file_id": file_id, "filename": upload.filename, "content_type": upload.content_type, "size": len(upload.data),
        })
