"""Sealed reasoning: the ``encrypted_content`` of a ``reasoning`` output item.

A client that keeps nothing stored (``store: false``, Codex) asks for
``include: ["reasoning.encrypted_content"]`` and sends each reasoning item back on the next
turn. The gateway has no encryption of its own to offer, but it must be able to tell its
own reasoning from text a client made up: the token is the reasoning text with an
HMAC-SHA256 tag under the gateway's key (``gw1.<text, base64url>.<tag, base64url>``; the key
is derived from the token, so it holds across restarts and instances that share it, and is
random per process without one). A token that does not verify — forged, edited, or sealed
under another key (OpenAI's own opaque blobs) — opens to None and is ignored, never an error.
The text is readable by whoever holds the token (the client already saw it as the summary);
the tag only proves where it came from. Pure.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

_PREFIX = "gw1."


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _tag(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, (_PREFIX + body).encode("ascii"), hashlib.sha256).digest())


def seal(key: bytes, text: str) -> str:
    body = _b64(text.encode("utf-8"))
    return f"{_PREFIX}{body}.{_tag(key, body)}"


def unseal(key: bytes, token: str) -> str | None:
    """The sealed text, or None when ``token`` is not one this key sealed."""
    if not token.startswith(_PREFIX):
        return None
    body, dot, tag = token[len(_PREFIX) :].partition(".")
    if not dot or not body.isascii() or not hmac.compare_digest(tag.encode("ascii", "replace"), _tag(key, body).encode("ascii")):
        return None
    try:
        return _unb64(body).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
