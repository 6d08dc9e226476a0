"""``[transports.agui]``: the AG-UI transport's configuration (docs/agui.md).

AG-UI clients can answer questions — a run ends with an interrupt and the client's next
run resumes it — so runs ask by default (``tool_approval = "ask"``). Browser front-ends
served from another origin need CORS: ``cors_origins`` lists the origins allowed to call
the endpoint (empty: CORS off, and a request carrying an ``Origin`` header is refused).
"""

from __future__ import annotations

import msgspec

from kernel import model as m
from transports.shared import ConfigError, ServerConfig


class AguiConfig(ServerConfig, kw_only=True, forbid_unknown_fields=True):
    """``[transports.agui]``. Inherited WebSocket-only fields are accepted and unused."""

    port: int = 8001
    #: Where the endpoint lives: ``POST {path}`` runs, ``GET {path}/threads/{id}/events``
    #: reconnects, ``POST {path}/threads/{id}/interrupt`` stops a run.
    path: str = "/agui"
    #: The agent that answers (its name or id); unset: the first agent.
    agent: str | None = None
    #: Browser origins allowed to call the endpoint (CORS); empty: off. ``"*"`` allows all.
    cors_origins: list[str] = msgspec.field(default_factory=list)
    #: Run input carries the whole conversation as the client holds it, images included.
    max_body_bytes: int = 4_194_304
    #: Seconds of silence after which an SSE stream gets a ``: keep-alive`` comment; 0: never.
    sse_keepalive_s: float = 15.0
    #: Who answers tool approvals and the turn limit: ``"ask"`` the client (AG-UI's
    #: interrupts), ``"approve"``, ``"reject"``, or a policy table.
    tool_approval: m.ApprovalSetting = "ask"

    def __post_init__(self) -> None:
        """Checked as the section is decoded (every transport's config the same way)."""
        if not self.path.startswith("/") or self.path.endswith("/") or "{" in self.path:
            raise ConfigError(f"path must start with '/', not end with one, and hold no '{{': {self.path!r}")
        if self.sse_keepalive_s < 0:
            raise ConfigError("sse_keepalive_s must be >= 0")
