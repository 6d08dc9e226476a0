"""The transport protocol: what a dialect plugin provides to the gateway.

A transport is a class with a ``name``, a ``Config`` msgspec Struct (its
``[transports.NAME]`` section of the TOML file) and ``serve``. The gateway
instantiates it with no arguments and runs ``serve`` in its task group; the
transport reports readiness through ``task_status.started(address)`` and stops
when its scope is cancelled, closing its connections cleanly.

Two optional parts, each a protocol of its own that the gateway checks with ``isinstance``:

* :class:`DescribesBanner` — ``banner(kernel, config, address, command) -> list[BannerLine]``:
  the start-up banner's lines for this transport — the exact URL a client uses (with the
  agent id, path and token it needs) or, for a pipe, the command that starts it
  (``command``: this gateway serving this transport alone). Without it the banner shows
  the reported address.
* :class:`HostsConsole` — ``hosts_console = True`` and ``serve`` also takes ``console=``, a
  :data:`ConsoleFactory`, to put the gateway console on the transport's own port (OpenFang's,
  where its clients look for a dashboard); the transport's config decides whether it does.

This protocol, ``plugins.hookspecs`` (``hookimpl``, ``gateway_register_transports``),
:mod:`kernel` and :mod:`transports.shared` are what a third-party transport uses;
docs/writing-a-transport.md builds one from nothing. ``load_config`` is the
gateway's (it decodes ``[transports.NAME]`` and names the section in errors).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Kernel
from transports.shared import HttpServerConfig, Router

log = logging.getLogger(__name__)

#: Builds the gateway console for a transport that hosts it (``hosts_console``): from the
#: kernel and that transport's own config — whose token, Origin list, Host check and limits
#: then apply — a router serving ``/``, the console's files and the native API they call
#: (the host's router hands it the paths it routes). The gateway (the composition root)
#: passes the http transport's; a transport never imports another.
ConsoleFactory = Callable[[Kernel, HttpServerConfig], Router]


class BannerLine(NamedTuple):
    """One line of the start-up banner: what it is (``openfang``, ``console``) and what to use."""

    label: str
    text: str


@runtime_checkable
class Transport(Protocol):
    """Read-only members, so that plain class attributes (``name = "stdio"``,
    ``Config = StdioConfig``) provide them; :func:`config_type` reads ``Config`` off the class."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def Config(self) -> type[msgspec.Struct]: ...

    async def serve(self, kernel: Kernel, config: Any, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None: ...


@runtime_checkable
class DescribesBanner(Protocol):
    """A transport that writes its own start-up banner lines."""

    def banner(self, kernel: Kernel, config: Any, address: str | None, command: str) -> list[BannerLine]: ...


@runtime_checkable
class HostsConsole(Protocol):
    """A transport that can serve the gateway console on its own port."""

    @property
    def hosts_console(self) -> bool: ...

    async def serve(
        self,
        kernel: Kernel,
        config: Any,
        *,
        task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED,
        console: ConsoleFactory | None = None,
    ) -> None: ...


def config_type(transport: type[Transport] | Transport) -> type[msgspec.Struct]:
    """A transport's ``Config`` struct (a class attribute: the protocol declares it read-only)."""
    return cast("type[msgspec.Struct]", transport.Config)  # on the class it is the attribute itself


#: Keys an older release spelled otherwise, in a config type that now has only the new name:
#: ``[transports.http] rate_limit_per_minute`` was that port's per-address HTTP rate (the
#: WebSocket transports' ``rate_limit_per_minute`` is a per-socket frame rate, kept).
RENAMED_KEYS: dict[str, str] = {"rate_limit_per_minute": "requests_per_minute_per_ip"}


def _renamed(transport: type[Transport] | Transport, data: dict[str, Any]) -> dict[str, Any]:
    fields = {f.name for f in msgspec.structs.fields(config_type(transport))}
    out = dict(data)
    for old, new in RENAMED_KEYS.items():
        if old in out and old not in fields and new in fields:
            value = out.pop(old)
            if new not in out:
                out[new] = value
            log.warning("[transports.%s] %s is now called %s; please rename it", transport.name, old, new)
    return out


def load_config(transport: type[Transport] | Transport, data: dict[str, Any] | None) -> msgspec.Struct:
    """Decode a transport's config section, naming the transport in the error."""
    try:
        return msgspec.convert(_renamed(transport, data or {}), config_type(transport), str_keys=True)
    except msgspec.ValidationError as exc:
        raise ValueError(f"[transports.{transport.name}]: {exc}") from None
