"""The Packet dialect's shapes: the document's objects and the bodies of its requests.

``PacketType``, ``Packet`` and ``PacketResponse`` are the reference API's own objects
(a program imports them); the body Structs are what each packet type carries, and
``Answer`` is the uniform answer every request gets. Types are matched by *value*
(:data:`KINDS`), so a program with its own ``PacketType``/``Packet`` classes works.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

import msgspec


class PacketType(Enum):
    PROCESS_MESSAGE = "process_message"
    EXECUTE_TOOL = "execute_tool"
    GET_STATUS = "get_status"
    GET_SETTINGS = "get_settings"
    SET_SETTINGS = "set_settings"
    GET_HISTORY = "get_history"
    SAVE_HISTORY = "save_history"
    SHUTDOWN = "shutdown"


KINDS = frozenset(t.value for t in PacketType)


@dataclass
class Packet:
    """A request (or, from ``send``, its answer: same id and type, the answer as ``body``)."""

    id: str
    type: Any
    body: dict[str, Any] = field(default_factory=dict)
    response_queue: queue.Queue[Any] | None = None
    created_at: float = field(default_factory=time.time)


@dataclass
class PacketResponse:
    id: str
    success: bool
    data: Any = None
    error: str | None = None

    @classmethod
    def from_answer(cls, packet_id: str, answer: dict[str, Any]) -> PacketResponse:
        return cls(id=packet_id, success=bool(answer.get("success")), data=answer.get("data"), error=answer.get("error"))


class Answer(dict[str, Any]):
    """The uniform answer. A missing key is looked up in ``data``, so code written as
    ``result["content"]`` (as in the document's basic example) works as well as
    ``result["data"]["content"]``; the dict itself (and its JSON) keeps the uniform form."""

    def __missing__(self, key: str) -> Any:
        data = dict.get(self, "data")
        if isinstance(data, dict) and key in data:
            return data[key]
        raise KeyError(key)


# ---------------------------------------------------------------- request bodies


class _Body(msgspec.Struct, kw_only=True):
    pass


class ProcessMessageBody(_Body):
    user_input: str


class ExecuteToolBody(_Body):
    tool_name: str
    arguments: dict[str, Any] | None = None


class SetSettingsBody(_Body):
    api_config: dict[str, Any] | None = None
    tool_limits: dict[str, Any] | None = None


class HistoryEntry(_Body):
    role: Literal["user", "assistant", "system"]
    content: str


class SaveHistoryBody(_Body):
    messages: list[HistoryEntry]
