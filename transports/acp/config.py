"""``[transports.acp]``: the ACP transport's section of the configuration (docs/acp.md)."""

from __future__ import annotations

import msgspec


class AcpConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str | None = None
    #: An API key this process acts with (else ``$GATEWAY_API_KEY``; neither: the admin) —
    #: then it sees and does only what that key may (docs/security.md).
    api_key: str | None = None
    max_line_bytes: int = 16_777_216
    eof_grace_s: float = 10.0
    permission_timeout_s: float = 300.0
    fs_timeout_s: float = 30.0
    context_window_tokens: int = 128_000
    default_mode: str = "default"
    max_concurrent_requests: int = 64
    list_page_size: int = 50
    model_list_timeout_s: float = 5.0
    terminal: bool = True
    terminal_output_bytes: int = 1_048_576
