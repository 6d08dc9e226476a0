"""``[transports.openfang]``: the shared server settings with OpenFang's defaults, and
who answers a run's questions (tool approval, turn limit) on each of its carriers.

The socket can put a question to its client (``/approve``, ``/deny``, ``/continue``), so
it asks by default. A REST or SSE client cannot answer, so those runs are decided by
``rest_tool_approval``: declined by default, with a reason the model sees. ``"ask"``
there would only wait for the kernel's approval timeout, and is refused at load time.
``dashboard_dir`` (off by default) names a directory served as a page from the
gateway's origin; a directory that does not exist is refused at load time too. Without
one, ``console`` puts the gateway console at ``/`` (docs/console.md).
"""

from __future__ import annotations

from pathlib import Path

from kernel import model as m
from transports.shared import ServerConfig

#: What the model is told when a REST run's tool call is declined by the policy.
REST_DENIAL = "tool approval is not possible over the REST API; connect over the WebSocket to approve tools"


def rest_policy(setting: m.ApprovalSetting) -> m.ApprovalPolicy:
    """The policy of REST runs (a mode or a table); ValueError if it would ask."""
    try:
        return m.approval_policy(setting, reason=REST_DENIAL, unattended="REST clients")
    except ValueError as exc:
        raise ValueError(f"rest_tool_approval: {exc}") from None


class OpenFangConfig(ServerConfig, kw_only=True, forbid_unknown_fields=True):
    """Every option is documented with its default in ``docs/openfang.md``."""

    #: OpenFang's port (the seed's clients connect to 50051).
    port: int = 50051
    #: Text deltas are buffered this long before a ``text_delta`` frame (0 disables).
    coalesce_ms: float = 100.0
    #: ... or until this many characters are buffered (0 disables).
    coalesce_chars: int = 200
    #: Frames per socket per minute.  OpenFang allows 10; ours is generous by default.
    rate_limit_per_minute: int = 120
    #: Largest WebSocket frame and REST ``message``: OpenFang's 64 KiB.
    max_message_bytes: int = 65536
    #: Concurrent WebSockets per client IP (OpenFang: 5).
    max_connections_per_ip: int = 5
    #: A socket idle this long gets an error event and is closed (OpenFang: 30 min).
    idle_timeout_s: float = 1800.0
    #: Keep-alive comment interval on idle SSE streams.
    sse_keepalive_s: float = 15.0
    #: Largest file ``POST /api/agents/{id}/upload`` accepts.
    max_upload_bytes: int = 10 * 1024 * 1024
    #: Uploads are kept in memory: at most this many bytes in total (oldest evicted first) ...
    upload_store_bytes: int = 64 * 1024 * 1024
    #: ... and at most this long.
    upload_ttl_s: float = 3600.0
    #: Context window used for ``context_pressure`` (OpenFang assumes 200k tokens).
    context_window_tokens: int = 200_000
    #: How often sockets check whether the agent list changed (``agents_updated``).
    agents_poll_s: float = 5.0
    #: Questions of runs started over the socket: ``"ask"`` its client, ``"approve"``,
    #: ``"reject"``, or a table (``mode``, ``allow_tools``, ``allow_categories``, ``turn_limit``, ``reason``).
    tool_approval: m.ApprovalSetting = "ask"
    #: Questions of runs started over REST / SSE, whose clients cannot answer: as above, without ``"ask"``.
    rest_tool_approval: m.ApprovalSetting = "reject"
    #: A directory served at ``/`` (its ``index.html``) and ``/{name}``, without a token: a
    #: dashboard page opened from the gateway's own origin. Empty: nothing is served there.
    dashboard_dir: str = ""
    #: The gateway console at ``/`` (and the native API it calls, ``/v1/...``) on this port,
    #: when ``dashboard_dir`` is empty (a dashboard set there wins).
    console: bool = True

    def __post_init__(self) -> None:
        rest_policy(self.rest_tool_approval)  # refused at load time, not at the first request
        if self.dashboard_dir and not Path(self.dashboard_dir).expanduser().is_dir():
            raise ValueError(f"dashboard_dir: {self.dashboard_dir!r} is not a directory")

    @property
    def socket_policy(self) -> m.ApprovalPolicy:
        return m.approval_policy(self.tool_approval)

    @property
    def rest_policy(self) -> m.ApprovalPolicy:
        return rest_policy(self.rest_tool_approval)
