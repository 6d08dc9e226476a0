"""The document's ``BackendClient``: convenience methods over ``server.send(packet)``.

Like the reference client it only calls ``server.send``, ``server.process_message``
and ``server.shutdown``, so it works with a :class:`BackendServer`, with a handle
from :func:`transports.packet.connect`, or with any object offering those three.
Return conventions follow the reference: the uniform answer dict, except
``get_history`` (the list itself) and ``save_history``/``clear_history`` (the
``data`` dict; the error answer when it failed).
"""

from __future__ import annotations

import uuid
from typing import Any

from .wire import Packet, PacketType


class BackendClient:
    def __init__(self, server: Any) -> None:
        self.server = server

    def _send(self, packet_type: PacketType, body: dict[str, Any] | None = None) -> dict[str, Any]:
        packet = Packet(id=str(uuid.uuid4()), type=packet_type, body=body or {})
        return self.server.send(packet).body

    def process_message(self, user_input: str) -> dict[str, Any]:
        return self.server.process_message(user_input)

    def execute_tool(self, tool_name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._send(PacketType.EXECUTE_TOOL, {"tool_name": tool_name, "arguments": arguments or {}})

    def get_status(self) -> dict[str, Any]:
        return self._send(PacketType.GET_STATUS)

    def get_settings(self) -> dict[str, Any]:
        return self._send(PacketType.GET_SETTINGS)

    def update_settings(self, api_config: dict[str, Any] | None = None, tool_limits: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if api_config:
            body["api_config"] = api_config
        if tool_limits:
            body["tool_limits"] = tool_limits
        return self._send(PacketType.SET_SETTINGS, body)

    def get_history(self) -> list[dict[str, str]]:
        answer = self._send(PacketType.GET_HISTORY)
        return list(answer["data"]["history"]) if answer.get("success") else []

    def save_history(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        answer = self._send(PacketType.SAVE_HISTORY, {"messages": list(messages)})
        return answer["data"] if answer.get("success") else answer

    def clear_history(self) -> dict[str, Any]:
        return self.save_history([])

    def shutdown(self) -> dict[str, Any]:
        self.server.shutdown()
        return {"success": True, "data": {"status": "shutdown"}}
