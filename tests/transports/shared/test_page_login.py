"""What a page served by the gateway needs from the shared policy: its login cookie is a
token like the others, its own origin is not cross-site, a router hands what it does not
route to another app on its port, and a page that checks the token itself is still
rate-limited. Pure helpers on values, the router on a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transports.shared import (
    Headers,
    Request,
    Response,
    Router,
    ServerConfig,
    cookie_value,
    extract_token,
    json_response,
    page_url,
    same_origin,
    serve_http,
    static_response,
    token_cookie,
    token_cookie_name,
)

pytestmark = pytest.mark.anyio


def headers(**values: str) -> Headers:
    return Headers([(k.replace("_", "-").encode(), v.encode()) for k, v in values.items()])


def test_the_cookie_is_named_per_port_and_read_back_exactly() -> None:
    assert token_cookie_name("127.0.0.1:8000") == "gateway_token_8000"
    assert token_cookie_name("[::1]:50051") == "gateway_token_50051"
    assert token_cookie_name("example.com") == "gateway_token" == token_cookie_name(None)
    set_cookie = token_cookie("127.0.0.1:8000", "a b;c%d")
    assert set_cookie.startswith("gateway_token_8000=a%20b%3Bc%25d;")
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie and "Path=/" in set_cookie
    sent = headers(host="127.0.0.1:8000", cookie="other=1; gateway_token_8000=a%20b%3Bc%25d; gateway_token_9000=no")
    assert extract_token(sent, {}) == "a b;c%d"
    assert extract_token(headers(host="127.0.0.1:9001", cookie="gateway_token_8000=x"), {}) is None  # another port's login
    # A header or the query wins over the cookie, as before.
    assert extract_token(headers(host="h:1", cookie="gateway_token_1=c", authorization="Bearer b"), {"token": "q"}) == "b"
    assert extract_token(headers(host="h:1", cookie="gateway_token_1=c"), {"token": "q"}) == "q"


def test_x_api_key_is_a_token_after_bearer() -> None:
    """Anthropic's clients (Claude Code, the SDKs before 2.x) send their key as ``x-api-key``."""
    assert extract_token(headers(host="h:1", **{"x-api-key": " k "}), {"token": "q"}) == "k"
    assert extract_token(headers(host="h:1", authorization="Bearer b", **{"x-api-key": "k"}), {}) == "b"
    assert extract_token(headers(host="h:1", **{"x-api-key": ""}), {"token": "q"}) == "q"


@given(st.text(max_size=200))
def test_any_token_survives_the_cookie(token: str) -> None:
    set_cookie = token_cookie("127.0.0.1:8000", token)
    pair = set_cookie.split(";", 1)[0]
    sent = headers(host="127.0.0.1:8000", cookie=f"x=1; {pair}")
    assert extract_token(sent, {}) == (token or None)


@given(st.text(max_size=300))
def test_a_cookie_header_of_any_shape_never_breaks_the_lookup(raw: str) -> None:
    value = cookie_value({"cookie": raw}, "gateway_token_1")
    assert value is None or isinstance(value, str)


def test_same_origin_compares_host_and_port_with_the_scheme_defaults() -> None:
    assert same_origin("http://127.0.0.1:8000", "127.0.0.1:8000")
    assert same_origin("http://[::1]:8000", "[::1]:8000")
    assert same_origin("https://gw.example", "gw.example:443") and same_origin("http://gw.example", "gw.example")
    assert not same_origin("http://127.0.0.1:8001", "127.0.0.1:8000")
    assert not same_origin("http://evil.example:8000", "127.0.0.1:8000")
    assert not same_origin("null", "127.0.0.1:8000") and not same_origin(None, "127.0.0.1:8000") and not same_origin("http://x", None)
    assert page_url("http://127.0.0.1:8000", "s e/c") == "http://127.0.0.1:8000/?token=s%20e%2Fc"
    assert page_url("ws://h:1", None, "/api/ws") == "ws://h:1/api/ws"


async def test_static_files_name_only_files_directly_in_the_folder(tmp_path: Path) -> None:
    (tmp_path / "page.js").write_text("export {};")
    (tmp_path / ".secret").write_text("no")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.css").write_text("a{}")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("no")
    (tmp_path / "link.txt").symlink_to(outside)
    served = await static_response(tmp_path, "page.js")
    assert served.headers["content-type"] == "text/javascript; charset=utf-8" and served.headers["x-frame-options"] == "DENY"
    for name in (".secret", "sub/x.css", "sub", "link.txt", "../" + outside.name, "", "missing.js", "a\\b"):
        with pytest.raises(Exception) as refused:
            await static_response(tmp_path, name)
        assert getattr(refused.value, "status", None) == 404, name



@asynccontextmanager
async def serving(router: Router, config: ServerConfig) -> AsyncIterator[str]:
    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_http, router, config)
        try:
            yield url
        finally:
            tg.cancel_scope.cancel()


async def test_a_router_hands_unrouted_paths_to_its_fallback_under_the_fallbacks_policy() -> None:
    config = ServerConfig(port=0, token="tok")
    guest = Router(config)

    @guest.get("/guest")
    async def guest_route(request: Request) -> Response:
        return json_response(200, {"from": "guest"})

    host = Router(config, fallback=guest)

    @host.get("/mine")
    async def mine(request: Request) -> Response:
        return json_response(200, {"from": "host"})


    async with serving(host, config) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        assert (await http.get("/mine", headers={"authorization": "Bearer tok"})).json() == {"from": "host"}
        assert (await http.post("/mine", headers={"authorization": "Bearer tok"})).status_code == 405  # ours: not handed on
        assert (await http.get("/guest")).status_code == 401  # the guest checks the token itself
        port = url.rsplit(":", 1)[1]
        cookie = {"cookie": f"gateway_token_{port}=tok"}
        assert (await http.get("/guest", headers=cookie)).json() == {"from": "guest"}  # a page's login cookie
        assert (await http.get("/nowhere", headers=cookie)).status_code == 404


async def test_a_page_that_checks_the_token_itself_still_counts_against_the_rate() -> None:
    config = ServerConfig(port=0, token="tok", requests_per_minute_per_ip=3)
    router = Router(config)

    @router.get("/page", auth=False, limited=True)
    async def page(request: Request) -> Response:
        return json_response(200, {"from": "page"})

    @router.get("/health", auth=False)
    async def health(request: Request) -> Response:
        return json_response(200, {"ok": True})

    async with serving(router, config) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        assert [(await http.get("/page")).status_code for _ in range(4)] == [200, 200, 200, 429]
        assert (await http.get("/health")).status_code == 200  # an unlimited route stays open


async def test_the_servers_own_origin_passes_where_other_origins_are_refused() -> None:
    config = ServerConfig(port=0, allowed_origins=[])
    router = Router(config)

    @router.post("/act")
    async def act(request: Request) -> Response:
        return json_response(200, {"ok": True})

    async with serving(router, config) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        assert (await http.post("/act", headers={"origin": url})).status_code == 200
        assert (await http.post("/act", headers={"origin": "http://127.0.0.1:1"})).status_code == 403
        assert (await http.post("/act", headers={"origin": "http://evil.example"})).status_code == 403
