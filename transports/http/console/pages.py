"""The console's page and files, behind the same token as the API, Jupyter-style.

``GET /`` is the console. With a token configured, the page is shown to a browser that
has the login cookie; ``/?token=…`` (the URL the start-up banner prints) checks the
token, sets the cookie and redirects to ``/``, so the token leaves the address bar; any
other visit gets a small login page (401) asking for it. The cookie is what the page's
own calls then carry (``EventSource`` cannot send a header): the shared router accepts it
on every route. ``GET /console/{name}`` serves the page's scripts and styles, which hold
no secret (they are the same for everyone; every call they make is checked). Both routes
count against the per-IP rate like every API call, so the login cannot be guessed fast.

:func:`hosted_console` is the console for another transport's port (OpenFang's): the
same page and the native API it calls, under that transport's security settings.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from kernel import LOG_RING, Kernel
from transports.shared import (
    HttpError,
    HttpServerConfig,
    KeyResolver,
    Request,
    Response,
    Router,
    extract_token,
    format_sse,
    resolve_principal,
    static_response,
    stream_log_entries,
    token_cookie,
)

from ..config import HttpConfig
from ..native.codec import native_error_body
from ..native.routes import NativeApi

STATIC = Path(__file__).resolve().parent / "static"
_encode = msgspec.json.Encoder().encode

#: The page runs its own module scripts and styles only, and talks to its own origin only.
PAGE_POLICY = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
}


class ConsolePages:
    """``/`` (the page, or its login) and ``/console/{name}`` (its files) on a router whose
    token is ``token`` (None and no keys: no login, as the API asks none). The login takes
    the admin token or an API key (``keys``: the kernel): the page then shows that key's
    sessions only, since every call it makes carries the cookie and so the key."""

    def __init__(self, token: str | None, keys: KeyResolver | None = None) -> None:
        self.token = token
        self.keys = keys

    def register(self, router: Router) -> None:
        router.get("/", auth=False, limited=True)(self.index)
        router.get("/console/{name}", auth=False, limited=True)(self.asset)
        router.get("/v1/logs")(self.logs)

    async def logs(self, request: Request) -> None:
        """The Logs pane's feed: the gateway's recent log records, then each new one, as SSE
        (``id`` = the record's sequence number; the fields are those of ``log_format = "json"``).
        The gateway's logs name every key's sessions: the admin's to read (docs/security.md)."""
        if not request.caller.principal.can("admin"):
            raise HttpError(403, "the gateway's logs need the 'admin' scope", code="forbidden")
        await stream_log_entries(request, LOG_RING, lambda entry: format_sse(_encode(entry), id=str(entry["seq"])))

    async def index(self, request: Request) -> Response:
        if self.token is None and (self.keys is None or not await self.keys.keys_required()):
            return await static_response(STATIC, "index.html", headers=PAGE_POLICY)
        offered = request.query.get("token")
        if offered is not None:
            if await resolve_principal(offered, self.token, self.keys) is None:
                return await self._login(wrong=True)
            cookie = token_cookie(request.headers.get("host"), offered)
            return Response(303, headers={"location": "/", "set-cookie": cookie, "cache-control": "no-store", "referrer-policy": "no-referrer"})
        if await resolve_principal(extract_token(request.headers, request.query), self.token, self.keys) is not None:
            return await static_response(STATIC, "index.html", headers=PAGE_POLICY)
        return await self._login(wrong=False)

    async def _login(self, *, wrong: bool) -> Response:
        page = await static_response(STATIC, "login.html", status=401, headers=PAGE_POLICY)
        if wrong:
            page.body = page.body.replace(b'data-wrong="false"', b'data-wrong="true"')
        return page

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name.endswith(".html"):  # the pages themselves are served at / only, behind the login
            raise HttpError(404, f"Not found: {request.path}", code="not_found")
        return await static_response(STATIC, name)


def hosted_console(kernel: Kernel, config: HttpServerConfig) -> Router:
    """The console for a transport that hosts it on its own port (a ``ConsoleFactory``): the
    page and the native API under ``config``'s token, Origin list, Host check and limits;
    the API's timings are the http transport's defaults, and the sessions it follows name
    ``console`` as their client."""
    router = Router(config, error_body=native_error_body, keys=kernel, transport="console")
    api = HttpConfig()
    NativeApi(
        kernel, keepalive_s=api.sse_keepalive_s, run_timeout_s=api.run_timeout_s, sessions_poll_s=api.sessions_poll_s, client="console"
    ).register(router)
    ConsolePages(router.token, kernel).register(router)
    return router
