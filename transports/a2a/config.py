"""``[transports.a2a]``: the A2A server's configuration (docs/a2a.md).

A2A clients answer questions — a task goes to INPUT_REQUIRED and the client's next message on
the task answers — so runs ask by default (``tool_approval = "ask"``). Push notifications go
only to URLs under a ``push_allow`` entry (empty: none at all).
"""

from __future__ import annotations

import msgspec

from kernel import model as m
from transports.shared import ConfigError, ServerConfig


class A2AConfig(ServerConfig, kw_only=True, forbid_unknown_fields=True):
    """``[transports.a2a]``. Inherited WebSocket-only fields are accepted and unused."""

    port: int = 8002
    #: The agent the root card and endpoints serve (its name or id); unset: the first agent.
    #: Every agent also has its own under ``/agents/{agent_id}``.
    agent: str | None = None
    #: The URL clients reach this server by (behind a proxy); unset: from each request's Host.
    public_url: str | None = None
    #: Who answers tool approvals and the turn limit: ``"ask"`` the client (INPUT_REQUIRED),
    #: ``"approve"``, ``"reject"``, or a policy table.
    tool_approval: m.ApprovalSetting = "ask"
    #: URL prefixes push notifications may go to (``"https://hooks.example.com/"``); a host
    #: that resolves to a loopback or private address must be named by its entry.
    push_allow: list[str] = msgspec.field(default_factory=list)
    push_timeout_s: float = 10.0
    #: Further attempts after a failed delivery (with doubling backoff from 0.5 s).
    push_retries: int = 3
    #: Tasks remembered in memory (older ones are rebuilt from the store on demand).
    max_tasks: int = 10_000
    #: A message may carry files (raw parts, base64).
    max_body_bytes: int = 4_194_304
    #: Seconds of silence after which an SSE stream gets a ``: keep-alive`` comment; 0: never.
    sse_keepalive_s: float = 15.0

    def __post_init__(self) -> None:
        """Checked as the section is decoded (every transport's config the same way)."""
        if self.public_url is not None and not self.public_url.startswith(("http://", "https://")):
            raise ConfigError(f"public_url must be an http:// or https:// URL: {self.public_url!r}")
        if self.push_retries < 0 or self.push_timeout_s <= 0:
            raise ConfigError("push_retries must be >= 0 and push_timeout_s > 0")
        if self.max_tasks < 1:
            raise ConfigError("max_tasks must be at least 1")
        for entry in self.push_allow:
            if not entry.startswith(("http://", "https://")):
                raise ConfigError(f"push_allow entries are URL prefixes (http:// or https://): {entry!r}")
