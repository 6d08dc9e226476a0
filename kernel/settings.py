"""Settings: msgspec Structs loaded from TOML, with environment overrides for secrets.

``config/gateway.toml`` documents every option with its default; a test keeps the
two equal. Units are in the names (``_s`` seconds, ``_bytes``).
"""

from __future__ import annotations

import os
import re
import tomllib
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import msgspec

from .model import KernelError

AGENT_NAMESPACE = uuid.UUID("6f1c1d2e-8a4b-4c39-9d51-2b7f0e3a9c11")


@lru_cache(maxsize=1024)
def _named_agent_id(name: str) -> str:
    """An agent's id from its name (stable across restarts). Cached: every event of a run
    names its agent, and a UUID5 (SHA-1 and a UUID object) cost 50 µs of each proxied request."""
    return str(uuid.uuid5(AGENT_NAMESPACE, name))


DEFAULT_AGENT_NAME = "General Assistant"

DEFAULT_TOOL_LIMITS: dict[str, int] = {
    "persona_query_max": 1,
    "persona_update_max": 1,
    "task_query_max": 4,
    "task_update_max": 2,
    "memory_query_max": 20,
    "memory_update_max": 10,
}


class OpenAISettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    api_key: str | None = None
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    timeout_s: float = 60.0
    max_retries: int = 2


class EchoSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # Pause before each streamed word; lets a person (or a test) watch and interrupt a stream.
    delay_s: float = 0.0


class ProviderSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # "auto": the openai provider when an API key is configured, else the offline echo model.
    default: str = "auto"
    openai: OpenAISettings = msgspec.field(default_factory=OpenAISettings)
    echo: EchoSettings = msgspec.field(default_factory=EchoSettings)
    # [provider.options.NAME] tables: settings of third-party provider plugins, as given.
    options: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)


class AgentSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str = DEFAULT_AGENT_NAME
    id: str | None = None
    description: str = "A helpful general-purpose assistant."
    system_prompt: str = "You are a helpful assistant."
    provider: str | None = None
    model: str | None = None
    tools: list[str] = msgspec.field(default_factory=lambda: ["*"])
    max_turns: int = 0
    max_tool_iterations: int = 10
    max_context_messages: int = 100
    ask_before_tool_execution: bool = False

    def agent_id(self) -> str:
        return self.id or _named_agent_id(self.name)


class SessionSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    inbox_size: int = 16
    subscriber_buffer: int = 512
    subscriber_buffer_bytes: int = 1_048_576
    lag_grace_s: float = 5.0
    event_retention: int = 4096
    event_retention_bytes: int = 1_048_576
    approval_timeout_s: float = 300.0
    turn_confirmation_timeout_s: float = 600.0
    history_cap: int = 500


class McpServerSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One ``[[tools.mcp]]`` table: an MCP server whose tools the model may use (docs/mcp.md).

    Either ``command`` (with ``args``, ``env``, ``cwd``: a child process spoken to over its
    stdin/stdout) or ``url`` (with ``headers``: a streamable HTTP endpoint). Its tools are
    offered as ``NAME__TOOL``; each call needs approval unless ``require_approval`` is false
    or the tool is in ``approved_tools``; ``tools`` (when not empty) is the allow-list.
    """

    name: str
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    require_approval: bool = True
    approved_tools: list[str] = []
    tools: list[str] = []
    connect_timeout_s: float = 30.0


#: A server's name prefixes its tools (``NAME__TOOL``), so it is a plain identifier.
MCP_SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}$")


class A2AAgentSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One ``[[tools.a2a]]`` table: a remote A2A agent the model may ask (docs/a2a.md).

    ``url`` is the base its agent card is read from (``/.well-known/agent-card.json``), with
    ``headers`` (credentials) on every request; the agent becomes one tool ``NAME__ask``, each
    call needing approval unless ``require_approval`` is false; ``timeout_s`` bounds one call.
    """

    name: str
    url: str
    headers: dict[str, str] = {}
    require_approval: bool = True
    timeout_s: float = 300.0


class ToolSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    workspace: str = "."
    file_max_bytes: int = 1_048_576
    result_max_chars: int = 65_536
    timeout_s: float = 60.0
    limits: dict[str, int] = msgspec.field(default_factory=lambda: dict(DEFAULT_TOOL_LIMITS))
    # [[tools.mcp]]: MCP servers started with the gateway, their tools offered to every session.
    mcp: list[McpServerSettings] = []
    # [[tools.a2a]]: remote A2A agents, each offered to every session as one tool NAME__ask.
    a2a: list[A2AAgentSettings] = []


class StoreSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    path: str = "~/.local/share/gateway/gateway.db"


class ClusterSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Several gateway instances sharing sessions (docs/scaling.md); off without a URL."""

    # redis://… (or GATEWAY_REDIS_URL): where leases, live events and forwarded commands go.
    redis_url: str | None = None
    # This instance's name in the cluster; unset: a new random one at each start.
    instance_id: str | None = None
    key_prefix: str = "gateway"
    # An owner that stops renewing its lease for this long loses its sessions to the others.
    lease_s: float = 5.0
    forward_timeout_s: float = 30.0
    # Events kept per session in the shared stream (for followers on other instances, and resume).
    stream_retention: int = 10_000


class ConfigKeySettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A key of ``[[auth.keys]]`` (read-only setups, no key table to write): its secret is read
    from the environment variable ``secret_env``, never from the file. docs/security.md."""

    name: str
    secret_env: str
    scopes: list[str] = msgspec.field(default_factory=lambda: ["read", "prompt", "approve"])
    agents: list[str] = []
    rpm: int = 0
    concurrent: int = 0
    tokens_per_day: int = 0


class AuthSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    keys: list[ConfigKeySettings] = []


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    log_level: str = "info"
    # One JSON object per line on stderr for log collectors, or text for people (docs/operations.md).
    log_format: Literal["text", "json"] = "text"
    # GET /metrics and the counters behind it (docs/operations.md "Metrics"); traces: OTEL_* variables.
    metrics: bool = True
    # SIGTERM: how long runs in flight may go on while the gateway drains (docs/operations.md).
    drain_s: float = 30.0
    provider: ProviderSettings = msgspec.field(default_factory=ProviderSettings)
    agents: list[AgentSettings] = msgspec.field(default_factory=lambda: [AgentSettings()])
    session: SessionSettings = msgspec.field(default_factory=SessionSettings)
    tools: ToolSettings = msgspec.field(default_factory=ToolSettings)
    store: StoreSettings = msgspec.field(default_factory=StoreSettings)
    cluster: ClusterSettings = msgspec.field(default_factory=ClusterSettings)
    auth: AuthSettings = msgspec.field(default_factory=AuthSettings)
    # Each transport decodes its own section into its ``Config`` struct.
    transports: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)


ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": ("provider", "openai", "api_key"),
    "OPENAI_BASE_URL": ("provider", "openai", "base_url"),
    "OPENAI_MODEL": ("provider", "openai", "model"),
    "GATEWAY_DB": ("store", "path"),
    "GATEWAY_REDIS_URL": ("cluster", "redis_url"),
    "GATEWAY_ECHO_DELAY_S": ("provider", "echo", "delay_s"),
}

SECRET_KEYS = frozenset({"api_key", "token", "password", "secret"})
#: Tables whose every value may be a credential (an MCP server's ``headers`` and ``env``).
SECRET_TABLES = frozenset({"headers", "env"})


def mask_secret(value: str | None) -> str | None:
    """``sk-abcdef123456`` -> ``sk-…3456``: enough to recognise a key, never to use it."""
    if not value:
        return value
    if len(value) <= 8:
        return "…"
    prefix = value[:3] if value[2:3] == "-" else ""
    return f"{prefix}…{value[-4:]}"


_URL_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^/@:]*:)([^/@]+)(@)", re.IGNORECASE)


def mask_secrets(data: Any) -> Any:
    """A copy of plain data with every secret-named field masked, every value of a
    ``headers`` or ``env`` table (an MCP server's credentials), and the password of every
    URL (``postgresql://user:…@host``)."""
    if isinstance(data, dict):
        return {k: _masked_entry(k, v) for k, v in data.items()}
    if isinstance(data, list):
        return [mask_secrets(v) for v in data]
    if isinstance(data, str) and "://" in data:
        return _URL_PASSWORD.sub(r"\1…\3", data)
    return data


def _masked_entry(key: str, value: Any) -> Any:
    if key in SECRET_KEYS and isinstance(value, str):
        return mask_secret(value)
    if key in SECRET_TABLES and isinstance(value, dict):
        return {name: mask_secret(v) if isinstance(v, str) else v for name, v in value.items()}
    return mask_secrets(value)


#: Settings are a few tables deep; a change nested deeper is refused before any recursion.
MAX_SETTINGS_DEPTH = 16


def check_depth(data: Any, limit: int = MAX_SETTINGS_DEPTH) -> None:
    """``invalid_request`` for data nested deeper than ``limit`` (checked without recursing)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                raise KernelError("invalid_request", f"invalid settings: nested too deeply (more than {limit} levels)")
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))


def drop_masked_secrets(changes: Any, current: Any = None) -> Any:
    """A settings patch without the secret values that are masks (``sk-…abcd``).

    A client that reads the settings, edits one field and sends the whole document back
    must not overwrite the real API key with its mask; every transport's update goes
    through the kernel, so this is done once, here. Tables merge, so a mask left out
    keeps the current value; a list replaces the current one whole (``tools.mcp``, with
    its servers' headers), so there, with ``current`` (the settings as data), a mask
    becomes the current value at the same place again instead of being lost.
    """
    return _unmask(changes, current, in_list=False)


def _unmask(changes: Any, current: Any, *, in_list: bool) -> Any:
    if isinstance(changes, list):
        before = current if isinstance(current, list) else []
        return [_unmask(value, before[i] if i < len(before) else None, in_list=True) for i, value in enumerate(changes)]
    if not isinstance(changes, dict):
        return changes
    here = current if isinstance(current, dict) and in_list else {}
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if key in SECRET_KEYS and _masked(value):
            if isinstance(here.get(key), str):
                out[key] = here[key]
        elif key in SECRET_TABLES and isinstance(value, dict):
            stored = here.get(key)
            table: dict[str, Any] = stored if isinstance(stored, dict) else {}
            out[key] = {name: table[name] if _masked(v) else v for name, v in value.items() if not _masked(v) or name in table}
        else:
            out[key] = _unmask(value, current.get(key) if isinstance(current, dict) else None, in_list=in_list)
    return out


def _masked(value: Any) -> bool:
    return isinstance(value, str) and "…" in value


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``changes`` into a copy of ``base`` (tables merge, values replace)."""
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def validate(data: dict[str, Any]) -> Settings:
    """Convert plain data to Settings, with a clear ``invalid_request`` error."""
    try:
        # strict=False: values from the environment arrive as strings ("0.05").
        settings = msgspec.convert(data, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise KernelError("invalid_request", f"invalid settings: {exc}") from None
    problems = [f"tools.limits.{k} must be >= 1" for k, v in settings.tools.limits.items() if v < 1]
    names = [a.name for a in settings.agents]
    if not names:
        problems.append("at least one agent is required")
    if len(set(names)) != len(names):
        problems.append("agent names must be unique")
    for field in ("inbox_size", "subscriber_buffer", "subscriber_buffer_bytes", "event_retention", "event_retention_bytes", "history_cap"):
        if getattr(settings.session, field) < 1:
            problems.append(f"session.{field} must be >= 1")
    problems += _mcp_problems(settings.tools.mcp)
    problems += _a2a_problems(settings.tools.a2a)
    if settings.drain_s < 0:
        problems.append("drain_s must be >= 0")
    if problems:
        raise KernelError("invalid_request", "invalid settings: " + "; ".join(problems))
    return settings


def _name_problems(table: str, names: list[str], used_as: str) -> list[str]:
    """A tool source's names (``[[tools.mcp]]``, ``[[tools.a2a]]``): unique, and fit to prefix
    a tool name (``used_as`` says how)."""
    problems = [f"{table}: the name {duplicate!r} is used twice" for duplicate in sorted({name for name in names if names.count(name) > 1})]
    problems += [
        f"{table} {name!r}: a name is 1-32 letters, digits, '-' or single '_' ({used_as})" for name in names if not MCP_SERVER_NAME.match(name)
    ]
    return problems


def _a2a_problems(agents: list[A2AAgentSettings]) -> list[str]:
    problems = _name_problems("tools.a2a", [agent.name for agent in agents], "it names the tool: NAME__ask")
    for agent in agents:
        where = f"tools.a2a {agent.name!r}"
        if not agent.url.startswith(("http://", "https://")):
            problems.append(f"{where}: url must be http:// or https://")
        if agent.timeout_s <= 0:
            problems.append(f"{where}: timeout_s must be > 0")
    return problems


def _mcp_problems(servers: list[McpServerSettings]) -> list[str]:
    problems = _name_problems("tools.mcp", [server.name for server in servers], "it prefixes the tools: NAME__TOOL")
    for server in servers:
        where = f"tools.mcp {server.name!r}"
        if (server.command is None) == (server.url is None):
            problems.append(f"{where}: give either command (a stdio server) or url (a streamable HTTP server)")
        if server.url is not None and not server.url.startswith(("http://", "https://")):
            problems.append(f"{where}: url must start with http:// or https://")
        if server.command is not None and not server.command.strip():
            problems.append(f"{where}: command is empty")
        if server.connect_timeout_s <= 0:
            problems.append(f"{where}: connect_timeout_s must be > 0")
    return problems


def to_data(settings: Settings) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(settings)
    return data


def load_settings(path: str | Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Defaults, then the TOML file, then environment overrides (secrets live there)."""
    env = dict(os.environ) if env is None else env
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise KernelError("not_found", f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise KernelError("parse_error", f"config file {path}: {exc}") from None
    for var, keys in ENV_OVERRIDES.items():
        if env.get(var):
            node = data
            for key in keys[:-1]:
                node = node.setdefault(key, {})
            node[keys[-1]] = env[var]
    return validate(data)
