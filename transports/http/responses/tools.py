"""The request's ``tools`` as the model sees them, and the way back (pure).

The Responses API has more kinds of tool than a chat-completions model understands:

* ``function``: offered as it is;
* ``namespace``: a group of function (or custom) tools; each is offered as one function
  named ``<namespace>__<name>``, so that the model's call maps back to exactly the
  namespace and name the client knows (its ``function_call`` item names both, as Codex
  expects);
* ``custom`` (free-form): offered as a function whose single string argument ``input`` is
  the raw text (a grammar in ``format`` is shown to the model in the description); the
  call goes back as a ``custom_tool_call`` item whose ``input`` is that text;
* anything else (``web_search``, ``file_search``, ``image_generation``, ``local_shell``,
  ``code_interpreter``, ``computer_use_preview``, ``mcp``, …) is a tool OpenAI's servers
  run: the gateway cannot, so it is not offered, and the plan lists its type (the route
  logs it once) — never a refusal, since clients send them by default.

The mapping is a function of the request alone, so a client that replays the whole
conversation (``store: false``) gets the same names on every turn.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import msgspec

from kernel import model as m

from ..openai.codec import TOOL_NAME, bad_request, invalid_field
from ..openai.wire import OpenAIError
from . import wire as w

#: The parameters of a free-form tool as a function: its raw text.
CUSTOM_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's input: raw text, not JSON."}},
    "required": ["input"],
    "additionalProperties": False,
}
_MAX_NAME = 64


class ToolTarget(msgspec.Struct, frozen=True, kw_only=True):
    """The client's tool behind a name the model sees."""

    name: str
    namespace: str | None = None
    #: A free-form (``custom``) tool: its call carries raw text, not JSON arguments.
    custom: bool = False


class ToolSet(msgspec.Struct, frozen=True, kw_only=True):
    #: What the model is offered (the kernel's client tools).
    offered: tuple[m.ClientTool, ...] = ()
    #: Model-facing name -> the client's tool.
    targets: dict[str, ToolTarget] = {}
    #: ``response.tools``: function tools normalised, the others as sent.
    echo: tuple[Any, ...] = ()
    #: Types of the hosted tools left out.
    hosted: tuple[str, ...] = ()

    def model_name(self, name: str, namespace: str | None) -> str:
        """The name the model knows a client's tool by (also for a tool no longer offered)."""
        for model_name, target in self.targets.items():
            if target.name == name and target.namespace == namespace:
                return model_name
        return joined(namespace, name)


def joined(namespace: str | None, name: str) -> str:
    """``<namespace>__<name>``, shortened with a digest to fit the 64 characters models allow."""
    full = name if namespace is None else f"{namespace}__{name}"
    if len(full) <= _MAX_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[: _MAX_NAME - 9]}_{digest}"


def tool_set(tools: list[dict[str, Any]]) -> ToolSet | OpenAIError:
    offered: list[m.ClientTool] = []
    targets: dict[str, ToolTarget] = {}
    echo: list[Any] = []
    hosted: list[str] = []

    def add(tool: dict[str, Any], where: str, namespace: str | None) -> OpenAIError | None:
        kind = tool.get("type")
        shown: Any
        try:
            if kind == "function":
                spec = msgspec.convert(tool, w.FunctionToolDef)
                name, description = spec.name, spec.description or ""
                parameters = spec.parameters or {"type": "object", "properties": {}}
                shown = w.FunctionToolOut(name=spec.name, description=spec.description, parameters=parameters, strict=spec.strict is not False)
            else:
                custom = msgspec.convert(tool, w.CustomToolDef)
                name, description, parameters, shown = custom.name, _custom_description(custom), CUSTOM_PARAMETERS, tool
        except msgspec.ValidationError as exc:
            return invalid_field(exc, where)
        if namespace is None:
            echo.append(shown)
        if not TOOL_NAME.match(name):
            return bad_request("Tool names must be 1-64 characters of a-z, A-Z, 0-9, _ and -.", param=f"{where}.name")
        model_name = joined(namespace, name)
        if model_name in targets:
            return bad_request(f"Two tools are named {model_name!r}.", param=f"{where}.name")
        targets[model_name] = ToolTarget(name=name, namespace=namespace, custom=kind == "custom")
        offered.append(m.ClientTool(name=model_name, description=description, parameters=parameters))
        return None

    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind in ("function", "custom"):
            refused = add(tool, f"tools[{i}]", None)
        elif kind == "namespace":
            refused = _namespace(tool, f"tools[{i}]", add)
            if refused is None:
                echo.append(tool)
        else:
            hosted.append(str(kind))
            continue
        if refused is not None:
            return refused
    return ToolSet(offered=tuple(offered), targets=targets, echo=tuple(echo), hosted=tuple(dict.fromkeys(hosted)))


def _namespace(tool: dict[str, Any], where: str, add: Callable[[dict[str, Any], str, str | None], OpenAIError | None]) -> OpenAIError | None:
    try:
        group = msgspec.convert(tool, w.NamespaceToolDef)
    except msgspec.ValidationError as exc:
        return invalid_field(exc, where)
    if not TOOL_NAME.match(group.name):
        return bad_request("Namespace names must be 1-64 characters of a-z, A-Z, 0-9, _ and -.", param=f"{where}.name")
    for j, inner in enumerate(group.tools):
        if inner.get("type") not in ("function", "custom"):
            return bad_request("A namespace holds function and custom tools only.", param=f"{where}.tools[{j}].type")
        refused = add(inner, f"{where}.tools[{j}]", group.name)
        if refused is not None:
            return refused
    return None


def _custom_description(tool: w.CustomToolDef) -> str:
    fmt = tool.format or {}
    text = tool.description or ""
    if fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        text += f"\n\nThe input must follow this {fmt.get('syntax', '')} grammar:\n{fmt['definition']}"
    return text.strip()


def custom_input(arguments: str) -> str:
    """A free-form tool's raw text from the model's arguments (``{"input": …}``; a model
    that sent the text bare keeps it as it is)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    text = value.get("input") if isinstance(value, dict) else None
    return text if isinstance(text, str) else arguments


def custom_arguments(text: str) -> str:
    """The arguments the model gave for a free-form tool's raw text (history replay)."""
    return json.dumps({"input": text}, ensure_ascii=False)
