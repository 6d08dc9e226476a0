"""``[transports.http]``: the http transport's configuration (docs/http.md), and who
answers the questions (tool approval, turn limit) of its runs.

The native API's clients answer them (``/approvals``, ``/turn-limit``): its runs ask.
An OpenAI client cannot be asked anything, so OpenAI requests are decided by
``openai_tool_approval``: declined by default, and they do not extend the turn limit.
``"ask"`` there would only wait for the kernel's approval timeout, and is refused at
load time.
"""

from __future__ import annotations

import msgspec

from kernel import model as m
from transports.shared import ConfigError, HttpServerConfig

#: What the model is told when the policy declines a tool call of an OpenAI request.
OPENAI_DENIAL = "answered by the http transport's openai_tool_approval policy"


def openai_policy(setting: m.ApprovalSetting) -> m.ApprovalPolicy:
    """The policy of OpenAI requests (a mode or a table); ValueError if it would ask."""
    try:
        return m.approval_policy(setting, reason=OPENAI_DENIAL, unattended="OpenAI clients")
    except ValueError as exc:
        raise ValueError(f"openai_tool_approval: {exc}") from None


class HttpConfig(HttpServerConfig, kw_only=True, forbid_unknown_fields=True):
    """``[transports.http]``: HTTP only, so no WebSocket limits (the per-IP request limit is
    the inherited ``requests_per_minute_per_ip``)."""

    port: int = 8000
    #: Origins allowed to call the API from a browser (CORS); empty = CORS off and any
    #: request carrying an ``Origin`` header is refused (403). ``"*"`` allows all.
    cors_origins: list[str] = msgspec.field(default_factory=list)
    #: Largest request body (chat requests carry whole conversations and images).
    max_body_bytes: int = 4_194_304
    #: Seconds of silence after which an SSE stream gets a ``: keep-alive`` comment; 0 = never.
    sse_keepalive_s: float = 15.0
    #: Longest wait for a JSON answer (native ``Accept: application/json``, non-streamed
    #: chat completions, or the first streamed chunk); then 504 and the run is interrupted.
    run_timeout_s: float = 600.0
    #: How the questions of OpenAI requests are answered, whose clients cannot answer
    #: them: ``"reject"``, ``"approve"`` or a policy table (``mode``, ``allow_tools``,
    #: ``allow_categories``, ``turn_limit``, ``reason``) that never asks.
    openai_tool_approval: m.ApprovalSetting = "reject"
    #: Responses (``/v1/responses`` with ``store``) kept for ``GET``, ``DELETE`` and
    #: ``previous_response_id``, in this process's memory: the oldest go first, and all
    #: go with a restart (their conversations stay, as kernel sessions). 0 keeps none.
    stored_responses: int = 1000
    #: The stored responses' JSON may take this many bytes in all.
    stored_responses_bytes: int = 33_554_432
    #: The gateway console at ``/`` (docs/console.md): a page watching and steering every
    #: transport's sessions through the native API.
    console: bool = True
    #: How often the live session list (``GET /v1/sessions`` as SSE) asks the kernel for changes.
    sessions_poll_s: float = 0.5

    def __post_init__(self) -> None:
        """Checked as the section is decoded (every transport's config the same way): refused
        at load time, not at the first request."""
        openai_policy(self.openai_tool_approval)
        if self.sse_keepalive_s < 0:
            raise ConfigError("sse_keepalive_s must be >= 0")
        if self.run_timeout_s <= 0:
            raise ConfigError("run_timeout_s must be positive")
        if self.requests_per_minute_per_ip < 0:
            raise ConfigError("requests_per_minute_per_ip must be >= 0")
        if self.stored_responses < 0 or self.stored_responses_bytes < 0:
            raise ConfigError("stored_responses and stored_responses_bytes must be >= 0")
        if self.sessions_poll_s <= 0:
            raise ConfigError("sessions_poll_s must be positive")
