"""OpenFang 0.6's own A2A shapes (an older dialect than A2A 1.0; its apps call them), pure.

From ``crates/openfang-api/src/routes.rs`` and ``crates/openfang-runtime/src/a2a.rs``: a card
at ``/.well-known/agent.json`` whose ``url`` is ``{base}/a2a``; a task is ``{id, sessionId,
status, messages, artifacts}`` with the status a bare camelCase state (``inputRequired``,
``cancelled``); parts are ``{"type": "text", "text"}``. The server reads the first text part
of ``params.message.parts`` and ``params.sessionId``; its client posts JSON-RPC ``tasks/send``
and ``tasks/get`` to the card's ``url`` and reads ``result``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from kernel import model as m

OpenFangState = Literal["submitted", "working", "inputRequired", "completed", "cancelled", "failed"]

_STATES: dict[str, OpenFangState] = {
    "working": "working",
    "input_required": "inputRequired",
    "completed": "completed",
    "canceled": "cancelled",
    "failed": "failed",
}


class TextPart(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class FilePart(msgspec.Struct, tag="file", tag_field="type"):
    name: str = ""
    data: str = ""


class DataPart(msgspec.Struct, tag="data", tag_field="type"):
    data: Any = None


class A2AMessage(msgspec.Struct, kw_only=True):
    role: str = "user"
    parts: list[TextPart | FilePart | DataPart] = []


class SendParams(msgspec.Struct, kw_only=True, rename="camel"):
    message: A2AMessage = msgspec.field(default_factory=A2AMessage)
    session_id: str | None = None


class SendRequest(msgspec.Struct, kw_only=True):
    """``POST /a2a/tasks/send``: a JSON-RPC-like envelope whose ``params`` is all that is read."""

    params: SendParams = msgspec.field(default_factory=SendParams)


class RpcCall(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: Any = None
    method: str = ""
    params: msgspec.Raw = msgspec.Raw(b"{}")


class TaskIdParams(msgspec.Struct, kw_only=True):
    id: str


def send_input(params: SendParams) -> tuple[str, str | None]:
    """The prompt (the first text part, as OpenFang reads it) and the session asked for."""
    text = next((p.text for p in params.message.parts if isinstance(p, TextPart)), "No message provided")
    return text, params.session_id or None


def task_json(task_id: str, session_id: str, state: str, *, prompt: str, text: str, error: m.ErrorInfo | None) -> dict[str, Any]:
    """A task as OpenFang answers it: the user's message, then the agent's (or the error)."""
    messages: list[dict[str, Any]] = [{"role": "user", "parts": [{"type": "text", "text": prompt}]}] if prompt else []
    reply = f"Error: {error.message}" if error is not None else text
    if reply:
        messages.append({"role": "agent", "parts": [{"type": "text", "text": reply}]})
    return {"id": task_id, "sessionId": session_id, "status": _STATES[state], "messages": messages, "artifacts": []}


def agent_card(agent: m.AgentInfo, base_url: str) -> dict[str, Any]:
    """``build_agent_card``: the agent's tools as skills, the endpoint ``{base}/a2a``."""
    return {
        "name": agent.name,
        "description": agent.description,
        "url": f"{base_url}/a2a",
        "version": "0.1.0",
        "capabilities": {"streaming": True, "pushNotifications": False, "stateTransitionHistory": True},
        "skills": [{"id": t, "name": t.replace("_", " "), "description": f"Can use the {t} tool", "tags": ["tool"], "examples": []} for t in agent.tools],
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
    }


def rpc_result(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def rpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
