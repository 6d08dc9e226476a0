"""DNS-rebinding protection in the shared router."""

from __future__ import annotations

import httpx
import pytest

from transports.shared import Headers, Router, ServerConfig, host_allowed, json_response


@pytest.mark.anyio
async def test_dns_rebinding_host_is_refused_without_a_token() -> None:

    assert host_allowed("127.0.0.1:8000", None) and host_allowed("localhost", None) and host_allowed("[::1]:1", None)
    assert not host_allowed("evil.example:8000", None) and host_allowed("evil.example", "tok")
    router = Router(ServerConfig(), token=None)

    @router.get("/x")
    async def x(request):  # type: ignore[no-untyped-def]
        return json_response(200, {"ok": True})

    transport = httpx.ASGITransport(app=router)
    async with httpx.AsyncClient(transport=transport, base_url="http://evil.example:8000") as client:
        refused = await client.get("/x")
        assert refused.status_code == 403 and "DNS rebinding" in refused.json()["error"]
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
        assert (await client.get("/x")).status_code == 200


def test_the_host_check_reads_host_as_the_request_headers_do() -> None:
    """The router reads ``Host`` before the request's headers are decoded; a repeated one joins
    (and so is no loopback name), a capitalised one counts, as in :class:`Headers`."""
    for raw in ([(b"host", b"127.0.0.1")], [(b"Host", b"127.0.0.1"), (b"host", b"evil.example")], [(b"x-host", b"a")], []):
        assert Headers.read_one(raw, b"host") == Headers(raw).get("host")
    assert not host_allowed(Headers.read_one([(b"host", b"127.0.0.1"), (b"host", b"evil.example")], b"host"), None)
