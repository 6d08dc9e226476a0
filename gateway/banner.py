"""The start-up banner: what to connect to, on stderr, once every transport is ready.

A new user should not have to ask an API for an agent id and assemble a WebSocket URL
by hand: each transport gives the exact address its clients use (its ``banner``
method: the agent id, the path, the token as ``?token=`` where a browser needs it) or,
for a pipe, the command that starts it; then the model (with the warning when it is the
offline echo model) and where the conversations are kept, passwords masked.
``gateway serve --quiet`` prints none of it.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sniffio

from kernel import Kernel, mask_secrets
from transports.base import BannerLine, DescribesBanner

ECHO_WARNING = (
    "the offline echo model repeats your prompt; no LLM is called. Set OPENAI_API_KEY (and OPENAI_BASE_URL for another "
    "OpenAI-compatible server) or [provider.openai] in the config file to use a real model."
)


@dataclass(frozen=True)
class Launch:
    """How this gateway was started, as far as starting it again needs: the options that
    go before any transport (``--config``, ``--db``, ``--backend``)."""

    options: tuple[str, ...] = ()

    def command(self, transport: str) -> str:
        """The shell command that starts this gateway serving ``transport`` alone (what an
        editor's agent-server setting or a script runs for a pipe transport)."""
        return shlex.join([sys.executable, "-m", "gateway", "serve", "--transport", transport, *self.options])


@dataclass(frozen=True)
class Started:
    """A transport that reported ready, with what ``banner`` needs of it."""

    name: str
    transport: Any
    config: Any
    address: str | None


def transport_lines(kernel: Kernel, started: Started, launch: Launch) -> list[BannerLine]:
    if not isinstance(started.transport, DescribesBanner):
        return [BannerLine(started.name, started.address or "ready")]
    return started.transport.banner(kernel, started.config, started.address, launch.command(started.name))


def model_lines(kernel: Kernel) -> list[BannerLine]:
    provider = kernel.provider_name()
    if provider == "echo":
        return [BannerLine("model", "echo (offline)"), BannerLine("warning", ECHO_WARNING)]
    return [BannerLine("model", f"{kernel.agent_info(kernel.agent(None)).model} via {provider}")]


def store_lines(kernel: Kernel) -> list[BannerLine]:
    path = kernel.settings.store.path
    shown = mask_secrets(path) if "://" in path else os.path.abspath(os.path.expanduser(path))
    lines = [BannerLine("store", shown)]
    if kernel.settings.cluster.redis_url:
        lines.append(BannerLine("cluster", mask_secrets(kernel.settings.cluster.redis_url)))
    return lines


def loop_line() -> BannerLine:
    """The async backend this process runs on (called on it): trio, asyncio, or asyncio on uvloop."""
    backend = sniffio.current_async_library()
    if backend == "asyncio":
        import asyncio

        if type(asyncio.get_running_loop()).__module__.startswith("uvloop"):
            return BannerLine("loop", "asyncio on uvloop")
    return BannerLine("loop", backend)


def banner_text(kernel: Kernel, started: Sequence[Started], launch: Launch) -> str:
    """The whole banner, one aligned ``label  text`` line each."""
    lines = [line for each in started for line in transport_lines(kernel, each, launch)]
    lines += model_lines(kernel) + store_lines(kernel) + [loop_line()]
    width = max(len(line.label) for line in lines)
    body = "\n".join(f"  {line.label.ljust(width)}  {line.text}" for line in lines)
    return f"gateway {kernel.version} is ready (Ctrl+C stops it):\n{body}\n"
