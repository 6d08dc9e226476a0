"""The routes of OpenFang's comms, logs, scheduler and workflow pages, and its logo.

``/api/comms/topology`` and ``/api/comms/events`` (and their live stream) come from the
kernel's record of the last runs — which transport asked which agent; ``/api/logs/stream`` is
the live SSE of the gateway's own log records (the same records as its log lines and the
console's Logs pane), backlog first, as OpenFang 0.6 streams its audit log; ``/api/cron/jobs``
and ``/api/workflows`` answer OpenFang's empty shapes; ``/logo.png`` is the package's own.
Shapes in ``dashboard_pages_codec.py``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec

from kernel import LOG_RING, Kernel
from transports.shared import HttpError, Request, Response, Router, format_sse, json_response, open_sse, stream_log_entries

from .dashboard_pages_codec import (
    EMPTY_CRON_JOBS,
    EMPTY_WORKFLOWS,
    comms_event_json,
    comms_events_json,
    events_limit,
    log_entry_json,
    log_entry_wanted,
    topology_json,
)

LOGO = Path(__file__).resolve().parent / "static" / "logo.png"
#: OpenFang's streams poll their sources (the audit log every second, comms every 500 ms).
POLL_S = 0.5
#: OpenFang's keep-alive: ``: ping`` every 15 s.
KEEPALIVE_S = 15.0

_encode = msgspec.json.Encoder().encode


class DashboardPages:
    def __init__(self, kernel: Kernel, *, keepalive_s: float = KEEPALIVE_S) -> None:
        self.kernel = kernel
        self.keepalive_s = keepalive_s

    def register(self, router: Router) -> None:
        router.get("/api/comms/topology")(self.topology)
        router.get("/api/comms/events")(self.comms_events)
        router.get("/api/comms/events/stream")(self.comms_stream)
        router.get("/api/logs/stream")(self.logs_stream)
        router.get("/api/cron/jobs")(self.cron_jobs)
        router.get("/api/workflows")(self.workflows)
        router.get("/logo.png", auth=False, limited=True)(self.logo)

    def _names(self) -> dict[str, str]:
        return {agent.agent_id(): agent.name for agent in self.kernel.settings.agents}

    async def topology(self, request: Request) -> Response:
        agents = [self.kernel.agent_info(agent) for agent in self.kernel.settings.agents]
        return json_response(200, topology_json(agents, self.kernel.observers.recent.since(0)))

    async def comms_events(self, request: Request) -> Response:
        limit = events_limit(request.query.get("limit"))
        return json_response(200, comms_events_json(self.kernel.observers.recent.since(0), self._names(), limit))

    async def comms_stream(self, request: Request) -> None:
        """New runs as they end (what existed before the stream opened is ``/api/comms/events``)."""
        recent = self.kernel.observers.recent
        seen = max((run.seq for run in recent.since(0)), default=0)
        async with open_sse(request, keepalive_interval_s=self.keepalive_s) as stream:
            while not stream.closed:
                runs = recent.since(seen)
                if runs:
                    seen = runs[-1].seq
                    names = self._names()
                    if not await stream.send_raw(b"".join(format_sse(_encode(comms_event_json(run, names))) for run in runs)):
                        return
                await anyio.sleep(POLL_S)

    async def logs_stream(self, request: Request) -> None:
        """The admin's only, as every log view (the lines name every key's sessions: docs/security.md)."""
        if not request.caller.principal.can("admin"):
            raise HttpError(403, "the logs need the 'admin' scope", code="forbidden")
        level = request.query.get("level", "").lower()
        text = request.query.get("filter", "")

        def render(entry: dict[str, object]) -> bytes:
            shaped = log_entry_json(entry)
            return format_sse(_encode(shaped)) if log_entry_wanted(shaped, level, text) else b""

        await stream_log_entries(request, LOG_RING, render, poll_s=POLL_S, keepalive_s=self.keepalive_s)

    async def cron_jobs(self, request: Request) -> Response:
        return json_response(200, EMPTY_CRON_JOBS)

    async def workflows(self, request: Request) -> Response:
        return json_response(200, EMPTY_WORKFLOWS)

    async def logo(self, request: Request) -> Response:
        data = await anyio.Path(LOGO).read_bytes()
        return Response(200, data, content_type="image/png", headers={"cache-control": "public, max-age=86400"})
