"""``[transports.agent_cli]``: the Agent-CLI transport's options (docs/agent-cli.md)."""

from __future__ import annotations

from typing import Literal

from kernel import model as m
from transports.shared import ConfigError, ServerConfig

#: What the model is told when ``tool_approval`` refuses a call.
APPROVAL_REASON = "declined by [transports.agent_cli] tool_approval"


class AgentCliConfig(ServerConfig, kw_only=True, forbid_unknown_fields=True):
    """``[transports.agent_cli]``; every option is described in docs/agent-cli.md."""

    port: int = 8080
    path: str = "/"
    agent: str | None = None
    complete_tag: Literal["Complete", "StreamComplete"] = "Complete"
    #: A non-streaming request gets one reply; its tool activity is left out (``"omit"``)
    #: or sent inside that reply as ``{"Multi": [ToolCall, ToolResult, ..., Text]}``.
    non_stream_tool_activity: Literal["omit", "multi"] = "omit"
    approval_timeout_s: float = 300.0
    max_turns: int | None = None
    #: Questions of a run (tool approval, the turn limit): ``"ask"`` the client (a
    #: ``ToolConfirmationRequest``, the dialect's way), ``"approve"``, ``"reject"`` or a table.
    tool_approval: m.ApprovalSetting = "ask"
    max_queued_requests: int = 8
    #: Streamed text is held up to this many milliseconds (0: off, every chunk its own
    #: frame) or until ``coalesce_chars`` are held, and always sent before any other frame.
    coalesce_ms: float = 0.0
    coalesce_chars: int = 200
    max_file_bytes: int = 1_048_576
    max_image_bytes: int = 3_145_728
    max_input_parts: int = 16
    max_message_bytes: int = 4_194_304

    def __post_init__(self) -> None:
        """Checked as the section is decoded (every transport's config the same way)."""
        if not self.path.startswith("/"):
            raise ConfigError(f"path must start with '/': {self.path!r}")
        for name in ("max_queued_requests", "max_file_bytes", "max_image_bytes", "max_input_parts"):
            if getattr(self, name) < (0 if name == "max_queued_requests" else 1):
                raise ConfigError(f"{name} is out of range: {getattr(self, name)}")
        if self.coalesce_ms < 0 or self.coalesce_chars < 1:
            raise ConfigError("coalesce_ms must be >= 0 and coalesce_chars >= 1")
        if self.max_turns is not None and self.max_turns < 0:
            raise ConfigError("max_turns must be >= 0 (0 = unlimited)")

    def approval(self) -> m.ApprovalPolicy:
        """The policy every prompt of this transport carries."""
        return m.approval_policy(self.tool_approval, reason=APPROVAL_REASON)
