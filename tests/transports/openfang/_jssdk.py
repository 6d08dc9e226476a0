"""A Python client that makes the calls OpenFang's JavaScript SDK makes, and reads the answers
the way it reads them (``sdk/javascript/index.js`` of OpenFang 0.6.9), on httpx so that it
runs on asyncio and on trio.

What the SDK does, and so what this does:
* every request carries ``Content-Type: application/json``; a body is sent only when the
  call has one (``stop``, ``resetSession``, ``switchSession``, ``compactSession`` send none;
  ``createSession(id)`` with no label sends ``{}``, as ``JSON.stringify({label: undefined})``);
* a status that is not 2xx raises :class:`OpenFangError` with the status and the raw text;
* a 2xx answer whose content type contains ``application/json`` is parsed, else it is text;
* a stream is read in chunks, split on ``\\n`` keeping the unfinished tail, each line
  trimmed; only lines starting with ``data: `` count, ``[DONE]`` ends it, and data that is
  not JSON is yielded as ``{"raw": data}``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

_NO_BODY: Any = object()


class OpenFangError(Exception):
    """The SDK's error: ``HTTP <status>: <text>``, with ``status`` and ``body`` (the raw text)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


class OpenFang:
    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.http = httpx.AsyncClient(timeout=10)
        self.agents = AgentResource(self)
        self.sessions = SessionResource(self)
        self.tools = ToolResource(self)
        self.models = ModelResource(self)
        self.providers = ProviderResource(self)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> OpenFang:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _init(self, method: str, path: str, body: Any, extra: dict[str, str] | None = None) -> httpx.Request:
        content = None if body is _NO_BODY else json.dumps(body).encode()
        return self.http.build_request(method, self.base_url + path, headers={**self.headers, **(extra or {})}, content=content)

    async def request(self, method: str, path: str, body: Any = _NO_BODY) -> Any:
        """The SDK's ``_request``."""
        response = await self.http.send(self._init(method, path, body))
        if not response.is_success:
            raise OpenFangError(response.status_code, response.text)
        if "application/json" in response.headers.get("content-type", ""):
            return response.json()
        return response.text

    async def stream(self, method: str, path: str, body: Any = _NO_BODY) -> AsyncIterator[Any]:
        """The SDK's ``_stream``."""
        response = await self.http.send(self._init(method, path, body, {"Accept": "text/event-stream"}), stream=True)
        try:
            if not response.is_success:
                await response.aread()
                raise OpenFangError(response.status_code, response.text)
            buffer = ""
            async for chunk in response.aiter_text():
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for raw in lines:
                    line = raw.strip()
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: "):]
                    if data == "[DONE]":
                        return
                    try:
                        yield json.loads(data)
                    except ValueError:
                        yield {"raw": data}
        finally:
            await response.aclose()

    async def health(self) -> Any:
        return await self.request("GET", "/api/health")

    async def status(self) -> Any:
        return await self.request("GET", "/api/status")

    async def version(self) -> Any:
        return await self.request("GET", "/api/version")

    async def usage(self) -> Any:
        return await self.request("GET", "/api/usage")

    async def config(self) -> Any:
        return await self.request("GET", "/api/config")


class AgentResource:
    def __init__(self, client: OpenFang) -> None:
        self._c = client

    async def list(self) -> Any:
        return await self._c.request("GET", "/api/agents")

    async def get(self, agent_id: str) -> Any:
        return await self._c.request("GET", f"/api/agents/{agent_id}")

    async def stop(self, agent_id: str) -> Any:
        return await self._c.request("POST", f"/api/agents/{agent_id}/stop")

    async def set_model(self, agent_id: str, model: str) -> Any:
        return await self._c.request("PUT", f"/api/agents/{agent_id}/model", {"model": model})

    async def message(self, agent_id: str, text: str, **opts: Any) -> Any:
        return await self._c.request("POST", f"/api/agents/{agent_id}/message", {"message": text, **opts})

    def stream(self, agent_id: str, text: str, **opts: Any) -> AsyncIterator[Any]:
        return self._c.stream("POST", f"/api/agents/{agent_id}/message/stream", {"message": text, **opts})

    async def session(self, agent_id: str) -> Any:
        return await self._c.request("GET", f"/api/agents/{agent_id}/session")

    async def reset_session(self, agent_id: str) -> Any:
        return await self._c.request("POST", f"/api/agents/{agent_id}/session/reset")

    async def compact_session(self, agent_id: str) -> Any:
        return await self._c.request("POST", f"/api/agents/{agent_id}/session/compact")

    async def list_sessions(self, agent_id: str) -> Any:
        return await self._c.request("GET", f"/api/agents/{agent_id}/sessions")

    async def create_session(self, agent_id: str, label: str | None = None) -> Any:
        return await self._c.request("POST", f"/api/agents/{agent_id}/sessions", {} if label is None else {"label": label})

    async def switch_session(self, agent_id: str, session_id: str) -> Any:
        return await self._c.request("POST", f"/api/agents/{agent_id}/sessions/{session_id}/switch")


class SessionResource:
    def __init__(self, client: OpenFang) -> None:
        self._c = client

    async def list(self) -> Any:
        return await self._c.request("GET", "/api/sessions")

    async def delete(self, session_id: str) -> Any:
        return await self._c.request("DELETE", f"/api/sessions/{session_id}")


class ToolResource:
    def __init__(self, client: OpenFang) -> None:
        self._c = client

    async def list(self) -> Any:
        return await self._c.request("GET", "/api/tools")


class ModelResource:
    def __init__(self, client: OpenFang) -> None:
        self._c = client

    async def list(self) -> Any:
        return await self._c.request("GET", "/api/models")


class ProviderResource:
    def __init__(self, client: OpenFang) -> None:
        self._c = client

    async def list(self) -> Any:
        return await self._c.request("GET", "/api/providers")
