"""Base configuration shared by every network transport, and bind-safety checks.

Each transport's ``Config`` subclasses :class:`ServerConfig` so that the security
defaults (loopback bind, Origin allow-list, size and rate limits) are written once
and are the same for every dialect.  Units are part of the field names because the
TOML file is edited by humans.
"""

from __future__ import annotations

import functools
import ipaddress
import os
from collections.abc import Mapping

import msgspec

__all__ = [
    "LOOPBACK_ORIGINS",
    "TOKEN_ENV_VAR",
    "ConfigError",
    "HttpServerConfig",
    "ServerConfig",
    "is_loopback_host",
    "resolve_token",
    "validate_bind",
]

#: Environment variable that supplies the access token when the config has none.
TOKEN_ENV_VAR = "GATEWAY_TOKEN"

#: Default Origin allow-list.  An entry without a port matches any port, so a
#: dashboard served from ``http://localhost:5173`` is accepted without extra config.
LOOPBACK_ORIGINS: tuple[str, ...] = (
    "http://localhost",
    "https://localhost",
    "http://127.0.0.1",
    "https://127.0.0.1",
    "http://[::1]",
    "https://[::1]",
)


class ConfigError(ValueError):
    """A configuration that is unsafe or invalid; raised before anything is bound."""


class HttpServerConfig(msgspec.Struct, kw_only=True):
    """Settings every HTTP transport has (the base of one without WebSockets, ``http``'s).

    Subclass it (``class Config(HttpServerConfig, kw_only=True): port: int = 8000``);
    msgspec lets a subclass redefine a field's default.
    """

    host: str = "127.0.0.1"
    port: int = 0
    #: Access token; ``None`` falls back to ``$GATEWAY_TOKEN`` (see :func:`resolve_token`).
    token: str | None = None
    #: Origins accepted on WebSocket upgrades (and CORS when enabled).  ``"*"`` allows any.
    allowed_origins: list[str] = msgspec.field(default_factory=lambda: list(LOOPBACK_ORIGINS))
    #: HTTP requests per client IP per minute, on every route but unauthenticated ones
    #: (health checks); 0 disables the limit.
    requests_per_minute_per_ip: int = 600
    #: Largest HTTP request body; bigger ones are answered 413.
    max_body_bytes: int = 1_048_576
    #: A request body that sends nothing for this long is answered 408 and its connection
    #: closed (headers that stall are hypercorn's to time out: 5 s).
    body_timeout_s: float = 10.0
    #: Request bodies being read at once per client IP; more are answered 429 (0: no cap).
    max_body_reads_per_ip: int = 256


class ServerConfig(HttpServerConfig, kw_only=True):
    """Settings every HTTP/WebSocket transport has: the HTTP ones and the WebSocket limits.

    Subclass it (``class Config(ServerConfig, kw_only=True): port: int = 50051``).
    """

    #: Largest WebSocket message the application accepts; bigger ones are reported.
    max_message_bytes: int = 65536
    #: Messages per connection per minute (sliding window); 0 disables the limit.
    rate_limit_per_minute: int = 120
    #: Concurrent WebSocket connections per client IP; 0 disables the limit.
    max_connections_per_ip: int = 16
    #: WebSocket ping interval (keeps NAT/proxies from dropping idle sockets); 0 disables.
    ping_interval_s: float = 20.0
    #: A WebSocket with no traffic in either direction for this long is reported idle; 0 disables.
    idle_timeout_s: float = 1800.0


@functools.lru_cache(maxsize=256)
def is_loopback_host(host: str) -> bool:
    """Whether binding to ``host`` only exposes the server to this machine.

    Wildcards (``""``, ``0.0.0.0``, ``::``) and non-loopback names count as exposed.
    Remembered (bounded): every HTTP request's ``Host`` is checked with it, and parsing an
    address each time was 35 µs of a proxied request (issue 27's profile).
    """
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def resolve_token(config: HttpServerConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The effective access token: ``config.token``, else ``$GATEWAY_TOKEN``, else None.

    Empty strings count as unset so that ``GATEWAY_TOKEN=`` cannot disable auth by accident
    while looking like a configured token.
    """
    if config.token:
        return config.token
    env = os.environ if environ is None else environ
    return env.get(TOKEN_ENV_VAR) or None


def validate_bind(config: HttpServerConfig, env_token: str | None = None) -> None:
    """Refuse to expose an unauthenticated server beyond loopback.

    ``env_token`` is the token found in the environment (pass
    ``os.environ.get("GATEWAY_TOKEN")``); either it or ``config.token`` must be set
    when ``config.host`` is not a loopback address.
    """
    if not 0 <= config.port <= 65535:
        raise ConfigError(f"port {config.port} is out of range 0-65535")
    for name, value in (("max_body_bytes", config.max_body_bytes), ("body_timeout_s", config.body_timeout_s)):
        if value <= 0:
            raise ConfigError(f"{name} must be positive")
    if isinstance(config, ServerConfig) and config.max_message_bytes <= 0:
        raise ConfigError("max_message_bytes must be positive")
    if config.max_body_reads_per_ip < 0:
        raise ConfigError("max_body_reads_per_ip must be 0 (no cap) or more")
    if not is_loopback_host(config.host) and not (config.token or env_token):
        raise ConfigError(
            f"refusing to bind to non-loopback host {config.host!r} without a token: "
            f"set 'token' in the config or the {TOKEN_ENV_VAR} environment variable, "
            "or bind to 127.0.0.1"
        )
