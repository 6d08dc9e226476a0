"""``[transports.packet]``, and the approval policy of every packet conversation.

The packet API has no way to put a question to its caller: ``process_message`` blocks
until the answer. So a tool call that needs approval, and the turn limit, are decided
by a policy (``tool_approval``), never asked: ``"ask"`` would only wait for the
kernel's approval timeout long after the caller gave up, and is refused here.
"""

from __future__ import annotations

import msgspec

from kernel import model as m

REASON = "the packet API cannot ask for approval; set [transports.packet] tool_approval"


def approval_policy(setting: m.ApprovalSetting) -> m.ApprovalPolicy:
    """The policy of ``tool_approval`` (a mode or a table); ValueError if it would ask."""
    try:
        return m.approval_policy(setting, reason=REASON, unattended="the packet API's callers")
    except ValueError as exc:
        raise ValueError(f"tool_approval: {exc}") from None


class PacketConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Every option is documented with its default in ``docs/packet.md``."""

    #: The name :func:`transports.packet.connect` looks up.
    endpoint: str = "packet"
    #: The conversation (kernel session) packets talk to.
    session_id: str = "packet"
    #: Agent name or id for that conversation (None: the first agent).
    agent: str | None = None
    #: An API key this process acts with (else ``$GATEWAY_API_KEY``; neither: the admin) —
    #: then it sees and does only what that key may (docs/security.md).
    api_key: str | None = None
    #: Default wait of ``connect()`` handles.
    timeout_s: float = 30.0
    #: Tool calls that need approval: ``"reject"``, ``"approve"``, or a table
    #: (``mode``, ``allow_tools``, ``allow_categories``, ``turn_limit``, ``reason``).
    tool_approval: m.ApprovalSetting = "reject"

    def __post_init__(self) -> None:
        approval_policy(self.tool_approval)  # refused at load time, not at the first message
