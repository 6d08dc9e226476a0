"""Sans-IO: what the editor sees of a session besides its conversation.

Its modes and config options (``session/set_mode``, ``session/set_config_option``:
the mode, the model — a select of the provider's models, category ``model`` — and
the turn limit), the pages of ``session/list`` with their cursors, and the
``session_info_update`` that carries a session's title. Pure functions over kernel
model values and wire shapes, like :mod:`.codec`.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from kernel import JsonDecoder
from kernel import model as m

from .jsonrpc import INVALID_PARAMS, RpcFailure
from .wire import ConfigValue, ListedSession, SelectOption, SessionInfoUpdate, SessionPage, SetConfigOptionParams

# ---------------------------------------------------------------- modes

MODES: dict[str, tuple[str, str]] = {
    "default": ("Default", "Ask before tools that require approval (file writes, commands)"),
    "ask": ("Ask every time", "Ask before every tool call"),
}


def mode_state(current: str) -> dict[str, Any]:
    modes = [{"id": key, "name": name, "description": text} for key, (name, text) in MODES.items()]
    return {"currentModeId": current, "availableModes": modes}


def check_mode(mode_id: str) -> str:
    if mode_id not in MODES:
        raise RpcFailure(INVALID_PARAMS, f"Unknown mode {mode_id!r}; available modes: {', '.join(MODES)}")
    return mode_id


# ---------------------------------------------------------------- config options

MODE_OPTION = "mode"
MODEL_OPTION = "model"
TURNS_OPTION = "max_turns"
#: The turn limits offered (0: none); the session's own limit is offered too when it is another.
#: The kernel's turn limit counts the session's model calls since its context was cleared.
TURN_LIMITS = (0, 5, 10, 25, 50, 100)


class SessionSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the config options show: the session's mode, its model and the provider's
    models (the configured one first), and its turn limit (0: none)."""

    mode: str
    model: str
    models: tuple[str, ...]
    max_turns: int


def _turns_name(limit: int) -> str:
    return "No limit" if limit == 0 else f"{limit} model calls"


def config_options(current: SessionSettings) -> tuple[SelectOption, ...]:
    """The session's config options, most important first (the order editors show them in)."""
    models = current.models if current.model in current.models else (current.model, *current.models)
    limits = sorted({*TURN_LIMITS, current.max_turns})
    return (
        SelectOption(
            id=MODE_OPTION,
            name="Mode",
            description="When the agent asks before running a tool",
            category="mode",
            current_value=current.mode,
            options=tuple(ConfigValue(value=key, name=name, description=text) for key, (name, text) in MODES.items()),
        ),
        SelectOption(
            id=MODEL_OPTION,
            name="Model",
            category="model",
            current_value=current.model,
            options=tuple(ConfigValue(value=model, name=model) for model in models if model),
        ),
        SelectOption(
            id=TURNS_OPTION,
            name="Turn limit",
            description="Model calls the conversation may make (since /clear) before prompts stop with max_turn_requests",
            current_value=str(current.max_turns),
            options=tuple(ConfigValue(value=str(limit), name=_turns_name(limit)) for limit in limits),
        ),
    )


def config_choice(params: SetConfigOptionParams, options: Iterable[SelectOption]) -> tuple[str, str]:
    """(option id, value) of a valid choice; an unknown option or value answers ``-32602``."""
    found = {option.id: option for option in options}
    option = found.get(params.config_id)
    if option is None:
        raise RpcFailure(INVALID_PARAMS, f"Unknown config option {params.config_id!r}; available: {', '.join(found)}")
    values = [choice.value for choice in option.options]
    if isinstance(params.value, bool) or params.type == "boolean":
        raise RpcFailure(INVALID_PARAMS, f"Config option {option.id!r} is a select, not a boolean: one of {', '.join(values)}")
    if params.value not in values:
        raise RpcFailure(INVALID_PARAMS, f"Invalid value {params.value!r} for {option.id!r}; one of: {', '.join(values)}")
    return option.id, params.value


# ---------------------------------------------------------------- session/list


def iso_time(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def session_info_update(info: m.SessionInfo) -> SessionInfoUpdate:
    return SessionInfoUpdate(title=info.title, updated_at=iso_time(info.updated_at or info.created_at))


_decode_cursor = JsonDecoder[tuple[float, str]](tuple[float, str]).decode


def _position(info: m.SessionInfo) -> tuple[float, str]:
    return (info.updated_at or info.created_at, info.session_id)


def encode_cursor(info: m.SessionInfo) -> str:
    """Where a page ended: the last session's (updated time, id), opaque to the editor."""
    return base64.urlsafe_b64encode(msgspec.json.encode(_position(info))).decode("ascii")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        return _decode_cursor(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (UnicodeEncodeError, binascii.Error, ValueError, msgspec.DecodeError, msgspec.ValidationError):
        raise RpcFailure(INVALID_PARAMS, f"Invalid params: {cursor!r} is not a cursor from session/list") from None


def session_page(
    sessions: Iterable[m.SessionInfo],
    *,
    cwd: str | None,
    cursor: str | None,
    known_cwds: Mapping[str, str],
    default_cwd: str,
    page_size: int,
) -> SessionPage:
    """One page of the store's sessions, the most recently active first.

    The kernel keeps no working directory, so a session's ``cwd`` is known only for the
    sessions this editor opened (``known_cwds``); those are filtered by ``cwd``, the
    others are listed for any ``cwd`` and reported with it (or ``default_cwd``). The
    cursor is a position in the order (updated time, then id), so sessions that change
    between two pages neither repeat nor vanish from what is still to come.
    """
    after = decode_cursor(cursor) if cursor is not None else None
    ordered = sorted(sessions, key=_position, reverse=True)
    listed = [s for s in ordered if cwd is None or known_cwds.get(s.session_id, cwd) == cwd]
    if after is not None:
        listed = [s for s in listed if _position(s) < after]
    page = listed[:page_size]
    entries = tuple(
        ListedSession(
            session_id=s.session_id,
            cwd=known_cwds.get(s.session_id) or cwd or default_cwd,
            title=s.title,
            updated_at=iso_time(_position(s)[0]),
        )
        for s in page
    )
    more = len(listed) > page_size
    return SessionPage(sessions=entries, next_cursor=encode_cursor(page[-1]) if more else None)
