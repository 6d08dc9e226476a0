"""``GET /livez`` and ``GET /readyz``: the probes an orchestrator (Kubernetes) asks every port.

``/livez`` is 200 while the process serves requests at all (a failing liveness probe gets
the process restarted, so it checks nothing else). ``/readyz`` is 200 when the instance
should get traffic — its store (and its cluster's Redis) answers and it is not draining —
else 503 with a JSON body naming each check that is not ready, so a person sees why; a
machine reads the status. Both are open like ``/health`` (no token, no rate limit): a probe
carries no credentials. Every HTTP-serving transport adds them to its router with
:func:`add_health_routes`, so each port answers them the same.
"""

from __future__ import annotations

from typing import Protocol

from ._http import Request, Response, json_response
from ._router import Router

__all__ = ["ReadinessSource", "add_health_routes"]


class ReadinessSource(Protocol):
    """What ``/readyz`` asks (the kernel): each check that is not ready, with why."""

    async def readiness(self) -> dict[str, str]: ...


def add_health_routes(router: Router, source: ReadinessSource) -> None:
    async def livez(request: Request) -> Response:
        return json_response(200, {"status": "ok"})

    async def readyz(request: Request) -> Response:
        problems = await source.readiness()
        if problems:
            return json_response(503, {"status": "not_ready", "not_ready": problems}, headers={"cache-control": "no-store"})
        return json_response(200, {"status": "ready"}, headers={"cache-control": "no-store"})

    router.get("/livez", auth=False)(livez)
    router.get("/readyz", auth=False)(readyz)
