"""Authentication, Origin and rate-limit primitives, independent of any carrier.

Kept free of ASGI so that the same rules can be unit-tested directly and reused by
non-HTTP transports (a token check is a token check on any wire).
"""

from __future__ import annotations

import hmac
from collections import deque
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

import anyio

__all__ = ["ClientLimiter", "SlidingWindowLimiter", "extract_token", "origin_allowed", "token_matches"]


def host_name(host: str) -> str:
    """``127.0.0.1:8000`` -> ``127.0.0.1``; ``[::1]:8000`` -> ``::1``."""
    host = host.strip()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host: str | None, token: str | None) -> bool:
    """DNS-rebinding protection: without a token, only loopback ``Host`` names are served.

    A page on evil.example that rebinds its name to 127.0.0.1 reaches a loopback server
    as same-origin; its requests still carry ``Host: evil.example``. With a token the
    token is the protection, so any Host is fine (and needed for remote access).
    """
    from ._config import is_loopback_host

    return token is not None or not host or is_loopback_host(host_name(host))


def extract_token(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The token a client presented: ``Authorization: Bearer X`` first, then ``?token=X``.

    Browsers cannot set headers on a WebSocket upgrade, hence the query fallback.
    """
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return query.get("token") or None


def token_matches(presented: str | None, expected: str | None) -> bool:
    """Constant-time token comparison; no expected token means auth is off."""
    if expected is None:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def _origin_parts(value: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port


def origin_allowed(origin: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request's ``Origin`` is in the allow-list.

    A missing Origin is allowed: only browsers send it, and they are what the check
    protects against (cross-site WebSocket hijacking).  ``"*"`` allows everything; an
    entry without a port matches any port of that scheme and host; the literal
    ``"null"`` origin (sandboxed frames, ``file://``) matches only an explicit ``"null"``.
    """
    if origin is None:
        return True
    origin = origin.strip()
    allowed = list(allowed)
    if "*" in allowed:
        return True
    if origin == "null":
        return "null" in allowed
    got = _origin_parts(origin)
    if got is None:
        return False
    for entry in allowed:
        want = _origin_parts(entry)
        if want is None:
            continue
        if want[0] == got[0] and want[1] == got[1] and (want[2] is None or want[2] == got[2]):
            return True
    return False


class SlidingWindowLimiter:
    """At most ``limit`` events in any ``window_s`` seconds (exact sliding window).

    One per connection, so memory is bounded by ``limit`` timestamps.  Rejected events
    are not counted, so a client that backs off recovers at once.
    """

    def __init__(self, limit: int, window_s: float = 60.0) -> None:
        self.limit = limit
        self.window_s = window_s
        self._stamps: deque[float] = deque()

    def check(self, now: float | None = None) -> float:
        """Record an event; return 0.0 if allowed, else seconds until one would be."""
        if self.limit <= 0:
            return 0.0
        now = anyio.current_time() if now is None else now
        horizon = now - self.window_s
        stamps = self._stamps
        while stamps and stamps[0] <= horizon:
            stamps.popleft()
        if len(stamps) >= self.limit:
            return max(stamps[0] - horizon, 0.001)
        stamps.append(now)
        return 0.0


class ClientLimiter:
    """A sliding-window request limit per client IP; the least recently seen clients
    are forgotten beyond ``max_clients`` so memory stays bounded."""

    def __init__(self, limit: int, *, window_s: float = 60.0, max_clients: int = 4096) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_clients = max_clients
        self._clients: dict[str, SlidingWindowLimiter] = {}

    def check(self, ip: str) -> float:
        """0.0 if allowed, else seconds until the client may retry."""
        if self.limit <= 0:
            return 0.0
        limiter = self._clients.pop(ip, None) or SlidingWindowLimiter(self.limit, self.window_s)
        self._clients[ip] = limiter
        if len(self._clients) > self.max_clients:
            del self._clients[next(iter(self._clients))]
        return limiter.check()
