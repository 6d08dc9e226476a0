"""``[transports.stdio]``: the stdio transport's options (docs/stdio.md)."""

from __future__ import annotations

import msgspec

from kernel import model as m

#: What the model is told when ``tool_approval`` refuses a call.
APPROVAL_REASON = "declined by [transports.stdio] tool_approval"


class StdioConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``[transports.stdio]``; every option is described in docs/stdio.md."""

    session_id: str | None = None
    agent: str | None = None
    #: An API key this process acts with (else ``$GATEWAY_API_KEY``; neither: the admin) —
    #: then it sees and does only what that key may (docs/security.md).
    api_key: str | None = None
    max_line_bytes: int = 1_048_576
    eof_grace_s: float = 30.0
    max_concurrent_commands: int = 32
    #: Questions of a run (tool approval, the turn limit): ``"ask"`` the client (the
    #: ``tool_approval_requested`` / ``turn_limit_reached`` events), ``"approve"``,
    #: ``"reject"`` or a table; a command's own ``options.approval`` wins.
    tool_approval: m.ApprovalSetting = "ask"

    def approval(self) -> m.ApprovalPolicy:
        """The policy of runs whose command sets none."""
        return m.approval_policy(self.tool_approval, reason=APPROVAL_REASON)
