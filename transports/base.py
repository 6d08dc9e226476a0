"""The transport protocol: what a dialect plugin provides to the gateway.

A transport is a class with a ``name``, a ``Config`` msgspec Struct (its
``[transports.NAME]`` section of the TOML file) and ``serve``. The gateway
instantiates it with no arguments and runs ``serve`` in its task group; the
transport reports readiness through ``task_status.started(address)`` and stops
when its scope is cancelled, closing its connections cleanly.

This protocol, ``plugins.hookspecs`` (``hookimpl``, ``gateway_register_transports``),
:mod:`kernel` and :mod:`transports.shared` are what a third-party transport uses;
docs/writing-a-transport.md builds one from nothing. ``load_config`` is the
gateway's (it decodes ``[transports.NAME]`` and names the section in errors).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Kernel


@runtime_checkable
class Transport(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type[msgspec.Struct]]

    async def serve(self, kernel: Kernel, config: Any, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None: ...


def load_config(transport: type[Transport] | Transport, data: dict[str, Any] | None) -> msgspec.Struct:
    """Decode a transport's config section, naming the transport in the error."""
    try:
        return msgspec.convert(data or {}, transport.Config, str_keys=True)
    except msgspec.ValidationError as exc:
        raise ValueError(f"[transports.{transport.name}]: {exc}") from None
