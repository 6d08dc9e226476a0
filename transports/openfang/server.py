"""The OpenFang transport: one raw-ASGI app (REST + SSE + WebSocket) on hypercorn.

``serve`` runs until cancelled; the shared plumbing then closes open sockets with
1001 and ends SSE streams before hypercorn stops.
"""

from __future__ import annotations

import logging

import anyio
from anyio.abc import TaskStatus

from kernel import Kernel
from transports.shared import Router, WebSocket, serve_http

from .config import OpenFangConfig
from .rest import add_routes
from .state import ActiveSessions, Agents, UploadStore
from .ws import AgentSocket

log = logging.getLogger("gateway.openfang")


def build_app(kernel: Kernel, config: OpenFangConfig) -> Router:
    """The ASGI application of the dialect (usable with any ASGI server)."""
    router = Router(config)
    agents = Agents(kernel)
    sessions = ActiveSessions(kernel)
    uploads = UploadStore(max_bytes=config.upload_store_bytes, ttl_s=config.upload_ttl_s)
    add_routes(router, kernel, config, agents, sessions, uploads)

    def known_agent(ws: WebSocket) -> None:
        # After the built-in 401 / 403 Origin / 429 per-IP checks: 400 bad id, 404 unknown.
        ws.state["agent"] = agents.resolve(ws.path_params["id"])

    @router.websocket("/api/agents/{id}/ws")
    async def agent_ws(ws: WebSocket) -> None:
        if not await ws.accept([known_agent]):
            return
        agent_id = ws.state["agent"].agent_id()
        ws.send_timeout_s = kernel.settings.session.lag_grace_s  # a client that stops reading is cut off
        log.info("socket from %s for agent %s", ws.client_host, agent_id)
        socket = AgentSocket(ws, kernel, config, agent_id, agents=agents, sessions=sessions, uploads=uploads)
        await socket.run()

    return router


class OpenFangTransport:
    """OpenFang's WebSocket + REST + SSE API, so its dashboard, SDKs and apps work unchanged."""

    name = "openfang"
    description = "OpenFang dialect: WebSocket /api/agents/{id}/ws, REST /api/..., SSE streaming"
    Config = OpenFangConfig

    async def serve(self, kernel: Kernel, config: OpenFangConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        app = build_app(kernel, config)
        await serve_http(app, config, lag_grace_s=kernel.settings.session.lag_grace_s, task_status=task_status)



__all__ = ["OpenFangTransport", "build_app"]
