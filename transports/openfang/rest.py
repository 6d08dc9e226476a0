"""OpenFang's REST endpoints and the SSE message stream: the server-side handlers.

Each handler reads its request, runs kernel commands and answers with the shapes of
``rest_codec.py``. Errors are ``{"error": "..."}`` with the status code (the router's
default shape). POST endpoints that act (stop, reset, switch, new session) never
require a body: the SDKs post them with a JSON content type and nothing else. Session
ids are UUIDs both ways (``sessionids.py``): a path naming anything else is OpenFang's
400 ``Invalid session ID``.

A prompt is one :class:`~kernel.RunFollower`: subscribed before the run starts, its
events only, to its end. REST clients cannot answer a question, so its runs carry the
``rest_tool_approval`` policy (by default a tool that needs approval is declined with
a reason the model sees, never silently approved; use the WebSocket to approve tools).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

import anyio
import msgspec

from kernel import Kernel, RunFollower, decode_json
from kernel import model as m
from kernel.errors import http_headers, http_status
from transports.shared import (
    HttpError,
    Request,
    Response,
    Router,
    format_sse,
    json_response,
    open_sse,
)
from transports.shared.coalesce import DeltaCoalescer

from .codec import attachment_part, compact_message, valid_session_name
from .config import OpenFangConfig
from .rest_codec import (
    MessageBody,
    NewSessionBody,
    SseEncoder,
    agent_json,
    commands_json,
    history_json,
    message_reply,
    ok,
    session_json,
    sessions_json,
)
from .sessionids import canonical_uuid, public_session_id
from .state import ActiveSessions, Agents, UploadStore
from .uploads import parse_upload

T = TypeVar("T")


def _body_or_empty(raw: bytes, type_: type[T]) -> T:
    """Optional JSON bodies: nothing (or ``{}``) is fine, garbage is a 400."""
    if not raw.strip():
        return type_()
    try:
        return decode_json(raw, type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise HttpError(400, f"Invalid request body: {exc}", code="invalid_request") from None


def refused(exc: m.KernelError) -> HttpError:
    """A kernel refusal as the HTTP error OpenFang's clients read (status from its code)."""
    return HttpError(http_status(exc.code), exc.message, code=exc.code, headers=http_headers(exc.info()))


async def guarded(call: Awaitable[T]) -> T:
    """Await a kernel call; a refusal becomes the HTTP error OpenFang's clients read."""
    try:
        return await call
    except m.KernelError as exc:
        raise refused(exc) from None


class OpenFangRest:
    """The REST routes of the dialect; :meth:`register` puts them on a router."""

    def __init__(self, kernel: Kernel, config: OpenFangConfig, *, agents: Agents, sessions: ActiveSessions, uploads: UploadStore) -> None:
        self.kernel = kernel
        self.config = config
        self.agents = agents
        self.sessions = sessions
        self.uploads = uploads
        self.policy = config.rest_policy

    def register(self, router: Router) -> None:
        router.get("/api/health", auth=False)(self.health)
        router.get("/api/version")(self.version)
        router.get("/api/status")(self.status)
        router.get("/api/agents")(self.list_agents)
        router.get("/api/agents/{id}")(self.get_agent)
        router.post("/api/agents/{id}/message")(self.message)
        router.post("/api/agents/{id}/message/stream")(self.message_stream)
        router.get("/api/agents/{id}/session")(self.get_session)
        router.get("/api/agents/{id}/sessions")(self.list_sessions)
        router.post("/api/agents/{id}/sessions")(self.create_session)
        router.post("/api/agents/{id}/sessions/{sid}/switch")(self.switch_session)
        router.post("/api/agents/{id}/session/reset")(self.reset_session)
        router.post("/api/agents/{id}/session/compact")(self.compact_session)
        router.post("/api/agents/{id}/stop")(self.stop)
        router.delete("/api/agents/{id}/history")(self.clear_history)
        router.get("/api/sessions")(self.all_sessions)
        router.delete("/api/sessions/{sid}")(self.delete_session)
        router.get("/api/hands")(self.hands)
        router.get("/api/commands")(self.commands)
        router.post("/api/agents/{id}/upload")(self.upload)

    # ---------------------------------------------------------- helpers

    def _agent_id(self, request: Request) -> str:
        return self.agents.resolve(request.path_params["id"])

    async def _path_session(self, request: Request, agent_id: str | None = None) -> m.SessionInfo:
        """The session ``{sid}`` shows: 400 ``Invalid session ID`` unless a UUID (OpenFang's rule), 404 if none."""
        public_id = canonical_uuid(request.path_params["sid"])
        if public_id is None:
            raise HttpError(400, "Invalid session ID", code="invalid_request")
        info = await self.sessions.find(public_id, request.caller, agent_id)
        if info is None:
            raise HttpError(404, "Session not found", code="not_found")
        return info

    async def _prompt(self, request: Request) -> m.Prompt:
        """The body of ``/message`` as a prompt to the session it names, else the active one."""
        agent_id = self._agent_id(request)
        body = await request.json(MessageBody)
        limit = self.config.max_message_bytes
        if len(body.message.encode("utf-8")) > limit:
            raise HttpError(413, f"Message too large (max {limit // 1024}KB)", code="too_large")
        if not body.message.strip():
            raise HttpError(400, "Missing or empty 'message' field", code="invalid_request")
        parts: list[m.ContentPart] = [m.TextPart(body.message)]
        for ref in body.attachments:
            file_id = ref.get("file_id")
            upload = self.uploads.get(file_id) if isinstance(file_id, str) else None
            if upload is None:
                raise HttpError(400, f"Attachment not found: {file_id}", code="invalid_request")
            parts.append(attachment_part(upload))
        if body.session_id is None:
            session_id = await self.sessions.get(agent_id, request.caller)
        elif valid_session_name(body.session_id):
            session_id = await self.sessions.named(agent_id, body.session_id, request.caller)
        else:
            raise HttpError(400, "Invalid session_id", code="invalid_request")
        return m.Prompt(parts=tuple(parts), agent_id=agent_id, session_id=session_id)

    async def _start(self, prompt: m.Prompt, caller: m.Caller) -> RunFollower:
        assert prompt.agent_id is not None and prompt.session_id is not None
        self.sessions.touch(prompt.agent_id, prompt.session_id, caller)
        return await guarded(RunFollower.start(self.kernel, prompt, policy=self.policy, client="openfang", caller=caller))

    # ---------------------------------------------------------- read-only

    async def health(self, request: Request) -> Response:
        return json_response(200, {"status": "ok", "version": self.kernel.version})

    async def version(self, request: Request) -> Response:
        return json_response(200, {
            "name": "gateway", "version": self.kernel.version, "dialect": "openfang",
            "platform": sys.platform, "arch": platform.machine(), "python": platform.python_version(),
        })

    async def status(self, request: Request) -> Response:
        report = await guarded(self.kernel.execute(m.GetStatus(), request.caller))
        return json_response(200, {
            "status": "running", "version": report.version, "uptime_seconds": int(report.uptime_s),
            "agent_count": report.agents, "sessions": report.sessions, "active_runs": report.active_runs,
            "default_provider": report.provider, "default_model": report.model,
        })

    async def list_agents(self, request: Request) -> Response:
        return json_response(200, [agent_json(info) for info in self.agents.infos()])

    async def get_agent(self, request: Request) -> Response:
        return json_response(200, agent_json(self.kernel.agent_info(self.kernel.agent(self._agent_id(request)))))

    async def hands(self, request: Request) -> Response:
        return json_response(200, {"hands": [], "total": 0})

    async def commands(self, request: Request) -> Response:
        try:
            body = commands_json(request.query.get("surface", "web"), [c.info() for c in self.kernel.commands.values()])
        except ValueError as exc:
            raise HttpError(400, str(exc), code="invalid_request") from None
        return json_response(200, body)

    # ---------------------------------------------------------- runs

    async def message(self, request: Request) -> Response:
        prompt = await self._prompt(request)
        async with await self._start(prompt, request.caller) as run:
            end = await run.wait()
        assert prompt.session_id is not None
        status, body, headers = message_reply(end, prompt.session_id)
        return json_response(status, body, headers=headers)

    async def message_stream(self, request: Request) -> None:
        prompt = await self._prompt(request)
        stream = SseEncoder(DeltaCoalescer(self.config.coalesce_ms / 1000.0, self.config.coalesce_chars))
        # A client that stops reading is let go after the kernel's lag grace.
        grace = self.kernel.settings.session.lag_grace_s
        async with await self._start(prompt, request.caller) as run, open_sse(request, keepalive_interval_s=self.config.sse_keepalive_s, send_timeout_s=grace) as sse:
            while not stream.finished:
                batch = await run.next_batch(stream.deadline)
                now = anyio.current_time()
                events = stream.feed(batch, now) if batch else stream.tick(now)
                if not await sse.send_raw(b"".join(format_sse(data, event=name) for name, data in events), last=stream.finished):
                    break

    async def stop(self, request: Request) -> Response:
        """Interrupt the agent's runs started through this transport (not another transport's)."""
        agent_id = self._agent_id(request)
        stopped = 0
        for session_id in self.sessions.used(agent_id, request.caller):
            try:
                await self.kernel.execute(m.Interrupt(session_id=session_id), request.caller)
            except m.KernelError as exc:  # invalid_request: nothing was running there
                if exc.code == "not_found":
                    self.sessions.forget(agent_id, session_id)
            else:
                stopped += 1
        return json_response(200, ok("Run cancelled" if stopped else "No active run"))

    # ---------------------------------------------------------- sessions

    async def get_session(self, request: Request) -> Response:
        agent_id = self._agent_id(request)
        session_id = await self.sessions.get(agent_id, request.caller)
        history = await guarded(self.kernel.execute(m.GetHistory(session_id=session_id), request.caller))
        return json_response(200, history_json(session_id, agent_id, history.messages))

    async def list_sessions(self, request: Request) -> Response:
        agent_id = self._agent_id(request)
        active = await self.sessions.get(agent_id, request.caller)
        listing = await guarded(self.kernel.execute(m.ListSessions(agent_id=agent_id), request.caller))
        return json_response(200, sessions_json(listing.sessions, {active}))

    async def create_session(self, request: Request) -> Response:
        """``{"session_id", "label"}`` of the new session, which becomes the active one."""
        agent_id = self._agent_id(request)
        body = _body_or_empty(await request.body(), NewSessionBody)
        info = await self.sessions.create(agent_id, request.caller, body.label)
        return json_response(200, session_json(info, {info.session_id}))

    async def switch_session(self, request: Request) -> Response:
        agent_id = self._agent_id(request)
        info = await self._path_session(request, agent_id)
        if info.agent_id != agent_id:
            raise HttpError(400, "Session belongs to a different agent", code="invalid_request")
        self.sessions.switch(agent_id, info.session_id, request.caller)
        return json_response(200, ok("Session switched", session_id=public_session_id(info.session_id)))

    async def reset_session(self, request: Request) -> Response:
        """Clear the active session's context (in place: its id stays), after a running turn."""
        session_id = (await guarded(self.sessions.open_active(self._agent_id(request), request.caller))).session_id
        reply = await guarded(self.kernel.execute(m.ClearContext(session_id=session_id), request.caller))
        queued = isinstance(reply, m.Accepted) and reply.queued
        return json_response(200, ok("Session reset", session_id=public_session_id(session_id), queued=queued))

    async def compact_session(self, request: Request) -> Response:
        agent_id = self._agent_id(request)
        session = await guarded(self.sessions.open_active(agent_id, request.caller))
        window = self.kernel.agent(agent_id).max_context_messages
        return json_response(200, ok(compact_message(session.message_count, window)))

    async def clear_history(self, request: Request) -> Response:
        """Every session of the agent loses its history (OpenFang's "all history"); the sessions stay."""
        agent_id = self._agent_id(request)
        listing = await guarded(self.kernel.execute(m.ListSessions(agent_id=agent_id), request.caller))
        for info in listing.sessions:
            await guarded(self.kernel.execute(m.ClearHistory(session_id=info.session_id), request.caller))
        return json_response(200, ok("All history cleared", sessions=len(listing.sessions)))

    async def all_sessions(self, request: Request) -> Response:
        listing = await guarded(self.kernel.execute(m.ListSessions(), request.caller))
        return json_response(200, sessions_json(listing.sessions, self.sessions.active_ids(request.caller)))

    async def delete_session(self, request: Request) -> Response:
        info = await self._path_session(request)
        await guarded(self.kernel.execute(m.DeleteSession(session_id=info.session_id), request.caller))
        self.sessions.forget(info.agent_id, info.session_id)
        return json_response(200, {"status": "deleted", "session_id": public_session_id(info.session_id)})

    async def upload(self, request: Request) -> Response:
        self._agent_id(request)
        limit = self.config.max_upload_bytes
        request.max_body_bytes = limit + 16384  # room for multipart framing
        upload = parse_upload(await request.body(), request.headers)
        if len(upload.data) > limit:
            raise HttpError(413, f"Upload too large (max {limit} bytes)", code="too_large")
        file_id = self.uploads.put(upload)
        body: dict[str, Any] = {"file_id": file_id, "filename": upload.filename, "content_type": upload.content_type, "size": len(upload.data)}
        return json_response(200, body)
