"""``dashboard_dir`` served from the gateway's origin (and nothing outside it), and hostile input
on the dashboard's routes: each gets a clear ``{"error"}`` answer and the server goes on."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import msgspec
import pytest

from plugins.providers.echo import EchoProvider
from transports.openfang.config import OpenFangConfig

from ._helpers import make_config, serving

pytestmark = pytest.mark.anyio


async def test_dashboard_dir_is_served_without_a_token_and_nothing_outside_it(tmp_path: Path) -> None:
    page = tmp_path / "page"
    page.mkdir()
    (page / "index.html").write_text("<!doctype html><title>dash</title>")
    (page / "app.js").write_text("console.log('hi')")
    (page / ".env").write_text("SECRET=1")
    (page / "inner").mkdir()
    (page / "inner" / "deep.txt").write_text("deep")
    (tmp_path / "outside.txt").write_text("outside")
    (page / "link.txt").symlink_to(tmp_path / "outside.txt")
    async with serving(config=make_config(token="s3cret", dashboard_dir=str(page))) as server, httpx.AsyncClient(base_url=server.url) as http:
        index = await http.get("/")
        assert index.status_code == 200 and index.text == "<!doctype html><title>dash</title>"
        assert index.headers["content-type"] == "text/html; charset=utf-8" and index.headers["x-content-type-options"] == "nosniff"
        script = await http.get("/app.js")
        assert script.status_code == 200 and script.headers["content-type"].endswith("javascript; charset=utf-8")
        assert (await http.head("/app.js")).status_code == 200
        for path in ("/.env", "/link.txt", "/inner/deep.txt", "/inner", "/missing.png", "/%2e%2e", "/..%2foutside.txt"):
            refused = await http.get(path)
            assert refused.status_code == 404 and "error" in refused.json(), path
        assert (await http.get("/api/agents")).status_code == 401  # the API still needs the token
        assert (await http.get("/api/agents", headers={"Authorization": "Bearer s3cret"})).status_code == 200


async def test_without_dashboard_dir_nothing_is_served_at_the_root() -> None:
    async with serving() as server, httpx.AsyncClient(base_url=server.url) as http:
        root = await http.get("/")
        assert root.status_code == 404 and root.json() == {"error": "Not found: /"}


def test_a_missing_dashboard_dir_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(msgspec.ValidationError, match="not a directory"):
        msgspec.convert({"dashboard_dir": str(tmp_path / "nope")}, OpenFangConfig)
    assert msgspec.convert({"dashboard_dir": str(tmp_path)}, OpenFangConfig).dashboard_dir == str(tmp_path)


async def test_hostile_input_on_the_dashboards_routes() -> None:
    async with serving(EchoProvider()) as server, httpx.AsyncClient(base_url=server.url) as http:
        base = f"/api/agents/{server.agent_id}"
        json_headers = {"content-type": "application/json"}
        for body in (b"[" * 200_000 + b"]" * 200_000, b'{"model":' * 100_000 + b'"x"' + b"}" * 100_000, b"{nope", b'{"model": 5}', b"[]"):
            refused = await http.put(f"{base}/model", content=body, headers=json_headers)
            assert refused.status_code == 400 and isinstance(refused.json()["error"], str), body[:20]
        assert (await http.put(f"{base}/model", json={"model": "   "})).json() == {"error": "Missing 'model' field"}
        for path in (f"{base}/sessions/{'x' * 4000}/switch", f"{base}/sessions/%00/switch", f"{base}/sessions/{uuid.uuid4()}-1/switch"):
            refused = await http.post(path)
            assert (refused.status_code, refused.json()) == (400, {"error": "Invalid session ID"}), path[:60]
        assert (await http.delete(f"/api/sessions/{uuid.uuid4()}")).json() == {"error": "Session not found"}
        for approval in ("x" * 4000, "1 OR 1=1"):
            refused = await http.post(f"/api/approvals/{approval}/approve")
            assert (refused.status_code, refused.json()) == (400, {"error": "Invalid approval ID"})
        assert (await http.post(f"/api/approvals/{uuid.uuid4()}/reject")).status_code == 404
        bad_name = await http.post(f"{base}/message", json={"message": "hi", "session_id": "a\u0000b"})
        assert (bad_name.status_code, bad_name.json()) == (400, {"error": "Invalid session_id"})
        assert (await http.put(f"{base}/tools", json={})).status_code == 405  # read-only: gateway.toml configures tools
        assert (await http.get(f"/api/agents/{uuid.uuid4()}/model")).json() == {"error": "Agent not found"}
        assert (await http.get("/api/health")).status_code == 200
