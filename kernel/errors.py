"""What each kernel error code means on HTTP: its status, whether a retry can help, its headers.

One table for every dialect (native, OpenAI chat and Responses, Anthropic, AG-UI, OpenFang REST,
A2A's HTTP+JSON binding): a dialect shapes the *body* of an error, never its status. A new code
is one entry here, and ``tests/kernel/test_errors.py`` walks every code through every HTTP
dialect. The way h11's ``ProtocolError`` carries ``error_status_hint``: the fact travels with the
error instead of being looked up in a table per caller.

Pure: imports only the model (codecs may use it).
"""

from __future__ import annotations

from typing import get_args

import msgspec

from .model import ErrorCode, ErrorInfo

#: Keyed by :data:`~kernel.model.ErrorCode` (checked complete below).


class ErrorSpec(msgspec.Struct, frozen=True, kw_only=True):
    """How one code is answered over HTTP.

    ``retryable``: the same request may succeed later (a client's SDK retries it; dialects
    that have such a header say ``x-should-retry``). ``retry_after_s``: the ``Retry-After`` to
    send when the error's details give none (None: send none unless the details give one).
    """

    status: int
    retryable: bool = False
    retry_after_s: int | None = None


ERROR_SPECS: dict[str, ErrorSpec] = {
    "parse_error": ErrorSpec(status=400),
    "invalid_request": ErrorSpec(status=400),
    # The client's own credentials were refused (a missing or wrong token or key).
    "unauthorized": ErrorSpec(status=401),
    # The credentials are good but do not allow this (a key's scope or agents).
    "forbidden": ErrorSpec(status=403),
    "not_found": ErrorSpec(status=404),
    "busy": ErrorSpec(status=409, retryable=True),
    # The run was cut by an interrupt command: its partial answer is not the answer asked for.
    "interrupted": ErrorSpec(status=409),
    "too_large": ErrorSpec(status=413),
    "rate_limited": ErrorSpec(status=429, retryable=True, retry_after_s=1),
    "internal": ErrorSpec(status=500),
    "tool_error": ErrorSpec(status=500),
    # The upstream model failed or answered an error: not the client's fault.
    "provider_error": ErrorSpec(status=502, retryable=True),
    # The upstream refused the *gateway's* key: the operator must fix it, a retry cannot help.
    "upstream_unauthorized": ErrorSpec(status=502),
    "unavailable": ErrorSpec(status=503, retryable=True, retry_after_s=1),
    # The instance is draining (SIGTERM): another instance, or this one restarted, will serve.
    "draining": ErrorSpec(status=503, retryable=True, retry_after_s=1),
    "owner_lost": ErrorSpec(status=503, retryable=True, retry_after_s=1),
    "timeout": ErrorSpec(status=504, retryable=True),
}

_MISSING = set(get_args(ErrorCode)) - set(ERROR_SPECS)
if _MISSING:  # a code without its HTTP meaning is a programming error, caught at import
    raise RuntimeError(f"kernel/errors.py: no ErrorSpec for {sorted(_MISSING)}")

_INTERNAL = ERROR_SPECS["internal"]


def error_spec(code: str) -> ErrorSpec:
    """The spec of a code (an unknown code, e.g. from a newer peer instance, is ``internal``)."""
    return ERROR_SPECS.get(code, _INTERNAL)


def http_status(code: str) -> int:
    return error_spec(code).status


def retry_after_s(error: ErrorInfo) -> int | None:
    """Seconds for ``Retry-After``: the error's own ``retry_after_s`` detail, else the code's default."""
    spec = error_spec(error.code)
    if not spec.retryable:
        return None
    given = (error.details or {}).get("retry_after_s")
    if isinstance(given, (int, float)) and not isinstance(given, bool) and given >= 0:
        return max(1, round(given))
    return spec.retry_after_s


def http_headers(error: ErrorInfo) -> dict[str, str]:
    """The headers every dialect sends with this error (lower-case names)."""
    seconds = retry_after_s(error)
    return {} if seconds is None else {"retry-after": str(seconds)}
