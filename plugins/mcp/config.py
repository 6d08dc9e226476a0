"""What a server's settings decide: its tools' names, which are offered, which ask first.

A server's settings are a :class:`kernel.McpServerSettings`, from a ``[[tools.mcp]]``
table (validated when the settings load) or built from an editor's ``mcpServers``
(whose names are free text). Model APIs take tool names of letters, digits, ``_`` and
``-``, at most 64 long, so every name offered is made of those: ``PREFIX__TOOL``, the
prefix from the server's name, the rest from the server's own tool name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from kernel import McpServerSettings

#: Longest tool name the model APIs accept (OpenAI: 64).
MAX_TOOL_NAME = 64
MAX_PREFIX = 32
SEPARATOR = "__"

_UNSAFE = re.compile(r"[^A-Za-z0-9-]+")


def _identifier(text: str) -> str:
    """Letters, digits and ``-``, runs of anything else as one ``_`` (never two in a row)."""
    return _UNSAFE.sub("_", text).strip("_")


def namespace(name: str) -> str:
    """The prefix of a server's tools: a ``[[tools.mcp]]`` name as it is, an editor's
    free-text name (``My files``) made an identifier (``My_files``)."""
    return _identifier(name)[:MAX_PREFIX].rstrip("_") or "mcp"


def prefixes(names: Iterable[str]) -> list[str]:
    """One distinct prefix per server, in order (``docs``, ``docs_2``, … for equal names)."""
    out: list[str] = []
    for name in names:
        base = candidate = namespace(name)
        count = 1
        while candidate in out:
            count += 1
            candidate = f"{base[: MAX_PREFIX - 1 - len(str(count))]}_{count}"
        out.append(candidate)
    return out


def tool_name(prefix: str, remote: str, taken: Iterable[str] = ()) -> str:
    """The name the model calls the server's tool ``remote`` by: ``PREFIX__TOOL``.

    A tool name the APIs would refuse (``files/read``, a very long one) is made safe;
    where two of a server's tools would end up with one name, or a name is cut to fit,
    a short hash of the server's own name keeps them apart.
    """
    used = set(taken)
    name = f"{prefix}{SEPARATOR}{_identifier(remote) or 'tool'}"
    if len(name) <= MAX_TOOL_NAME and name not in used:
        return name
    digest = hashlib.sha256(remote.encode()).hexdigest()[:8]
    return f"{name[: MAX_TOOL_NAME - 9]}_{digest}"


def offered(settings: McpServerSettings, remote: str) -> bool:
    """Whether the model sees the tool: every tool, or those of the allow-list ``tools``."""
    return not settings.tools or remote in settings.tools


def needs_approval(settings: McpServerSettings, remote: str) -> bool:
    """MCP tools ask before they run, unless the server or this tool is configured not to."""
    return settings.require_approval and remote not in settings.approved_tools


def describe(settings: McpServerSettings) -> str:
    """The server for a log line: its command or URL, never its headers, environment, or
    the credentials and query of its URL."""
    if settings.url is not None:
        url = urlsplit(settings.url)
        port = f":{url.port}" if url.port is not None else ""
        return f"{url.scheme}://{url.hostname or ''}{port}{url.path}"
    return " ".join([settings.command or "", *settings.args]).strip()
