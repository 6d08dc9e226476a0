"""Files of a directory on the web: a page and its scripts and styles, nothing else.

One place for the rules a static file answer must follow, for every page a transport
serves (OpenFang's ``dashboard_dir``, the gateway console): only a file directly in the
directory can be named (one path segment, no leading dot, and the resolved path must
still be inside it, so a symlink pointing out is refused), its content type is guessed
from its name, and the answer forbids framing and content sniffing.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

import anyio

from ._http import HttpError, Response

__all__ = ["PAGE_HEADERS", "page_url", "static_response"]

#: Headers every page and page asset gets: no stale copies after an upgrade, no framing
#: (clickjacking), no content sniffing, no Referer carrying a ``?token=`` away.
PAGE_HEADERS: dict[str, str] = {
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}


def _content_type(name: str) -> str:
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if name.endswith(".js"):  # some systems' mime tables call it text/plain; module scripts need this
        content_type = "text/javascript"
    if content_type.startswith("text/") or content_type in ("application/javascript", "application/json", "image/svg+xml"):
        content_type += "; charset=utf-8"
    return content_type


async def static_response(root: Path, name: str, *, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """The file ``name`` directly in ``root`` (resolved), or 404 ``HttpError`` for anything else."""
    folder = await anyio.Path(root).resolve()
    path = await (folder / name).resolve()
    if not name or name.startswith(".") or "/" in name or "\\" in name or path.parent != folder or not await path.is_file():
        raise HttpError(404, f"Not found: /{name}", code="not_found")
    return Response(status, await path.read_bytes(), content_type=_content_type(name), headers={**PAGE_HEADERS, **(headers or {})})


def page_url(base: str | None, token: str | None, path: str = "/") -> str:
    """A page's address to give a person (the start-up banner): with the token as
    ``?token=``, Jupyter-style — the page's login turns it into a cookie at once."""
    return f"{base or ''}{path}" + (f"?token={quote(token, safe='')}" if token else "")
