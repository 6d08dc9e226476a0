"""Sans-IO codec of Anthropic's Messages API, requests in: errors, the request plan,
token estimates and the model list. The answers out are in ``reply_codec.py``.

In: a ``/v1/messages`` body -> a :class:`MessagesPlan` (which agent, the prior turns as
kernel history, the last user turn as the prompt, options, the client's own tools) ->
the kernel commands of one throw-away conversation, as the OpenAI chat dialect does.
What the kernel cannot carry is refused with a clear 400 (an image by URL, a PDF), never
dropped; what needs no carrying is accepted and left out of the upstream's context
(``thinking`` / ``redacted_thinking`` blocks of earlier turns, which the client keeps
and replays itself; server tools the gateway cannot run). Pure; never raises on input.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import msgspec

from kernel import JsonDecoder, message_from_parts
from kernel import model as m
from kernel.errors import error_spec, http_headers, http_status

from ..openai.codec import TOOL_NAME, data_url, model_list, resolve_model
from .reply_codec import SignatureCheck, check_signature, upstream_tool_id
from .wire import AnthropicError, CountTokensRequest, InMessage, MessagesRequest, ModelInfo, ModelPage, ToolDef

# ---------------------------------------------------------------- errors

#: Anthropic's error type for each HTTP status it uses (others: by class, below).
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    501: "not_supported",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


class HttpFailure(Protocol):
    """What the router hands its error shaper (``transports.shared.HttpError``)."""

    @property
    def status(self) -> int: ...

    @property
    def message(self) -> str: ...

    @property
    def headers(self) -> dict[str, str]: ...


def bad_request(message: str) -> AnthropicError:
    return AnthropicError(status=400, type="invalid_request_error", message=message, headers={"x-should-retry": "false"})


def from_http(error: HttpFailure) -> AnthropicError:
    """A refusal of the router (401, 403, 404, 405, 413, 429) in Anthropic's shape (its
    headers are the router's; clients retry only the 429 of these by default)."""
    return AnthropicError(status=error.status, type=error_type(error.status), message=error.message, headers=error.headers)


def anthropic_error_body(error: HttpFailure) -> Any:
    """Router error shaper for the Anthropic routes."""
    return from_http(error).body()


def from_error_info(error: m.ErrorInfo) -> AnthropicError:
    """A kernel error (a failed run, a refused command) in Anthropic's shape: the status is
    the kernel's (``kernel.errors``), except that Anthropic says 529 ``overloaded_error``
    where HTTP says 503 (draining, a lost owner, an unreachable store) — the status its
    clients know to retry elsewhere. ``x-should-retry`` tells the client whether to."""
    status = http_status(error.code)
    if status == 503:
        status = 529
    headers = {**http_headers(error), "x-should-retry": "true" if error_spec(error.code).retryable else "false"}
    return AnthropicError(status=status, type=error_type(status), message=error.message, headers=headers)


def run_timeout(timeout_s: float) -> AnthropicError:
    return from_error_info(m.ErrorInfo(code="timeout", message=f"The model did not answer within {timeout_s:g}s"))


def client_gone() -> AnthropicError:
    """What a request whose client left is answered (if anybody still reads it)."""
    return bad_request("The client closed the request")


# ---------------------------------------------------------------- request in

_decode_messages: JsonDecoder[MessagesRequest] = JsonDecoder(MessagesRequest)
_decode_count: JsonDecoder[CountTokensRequest] = JsonDecoder(CountTokensRequest)
_MSGSPEC_PATH = re.compile(r" - at `\$\.?(.*)`$")
#: Claude Code's first system block: Anthropic's billing metadata, not part of the prompt
#: (it changes per request, which would defeat the upstream's prompt cache).
BILLING_HEADER = "x-anthropic-billing-header:"


def _decode(decoder: JsonDecoder[Any], raw: bytes) -> Any:
    if not raw.strip():
        return bad_request("The request body is empty; expected a JSON object.")
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        found = _MSGSPEC_PATH.search(text)
        if found and text.startswith("Object missing required field"):
            return bad_request(f"{found.group(1) or text}: Field required")
        return bad_request(f"Invalid request: {text}")
    except msgspec.DecodeError as exc:
        return bad_request(f"The request body is not valid JSON: {exc}")


def decode_request(raw: bytes) -> MessagesRequest | AnthropicError:
    result: MessagesRequest | AnthropicError = _decode(_decode_messages, raw)
    return result


def decode_count_request(raw: bytes) -> CountTokensRequest | AnthropicError:
    result: CountTokensRequest | AnthropicError = _decode(_decode_count, raw)
    return result


class MessagesPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``/v1/messages`` request asks of the kernel."""

    agent_id: str
    response_model: str
    history: tuple[m.Message, ...]
    prompt_parts: tuple[m.ContentPart, ...]
    #: The last turn holds only tool results: run the model on the history, no new user turn.
    continuation: bool
    options: m.PromptOptions
    stream: bool
    #: Reasoning becomes ``thinking`` blocks unless the request turned thinking off or
    #: asked for it to be omitted.
    show_thinking: bool
    #: Server tools of the request the gateway cannot run: not offered to the model.
    hosted_tools: tuple[str, ...] = ()


def plan_messages(
    request: MessagesRequest, agents: Sequence[m.AgentInfo], *, context_limit: int, signing_key: bytes
) -> MessagesPlan | AnthropicError:
    if not agents:
        return from_error_info(m.ErrorInfo(code="internal", message="No agent is configured"))
    if request.max_tokens is None:
        return bad_request("max_tokens: Field required")
    if request.max_tokens < 1:
        return bad_request("max_tokens: must be at least 1")
    if request.temperature is not None and not 0 <= request.temperature <= 1:
        return bad_request("temperature: must be between 0 and 1")
    if request.top_p is not None and not 0 < request.top_p <= 1:
        return bad_request("top_p: must be above 0 and at most 1")
    if any(not sequence for sequence in request.stop_sequences or ()):
        return bad_request("stop_sequences: a stop sequence must not be empty")
    if not request.messages:
        return bad_request("messages: at least one message is required")
    tools = client_tools(request.tools, request.tool_choice)
    if isinstance(tools, AnthropicError):
        return tools
    choice = tool_choice(request.tool_choice)
    if isinstance(choice, AnthropicError):
        return choice
    fmt = output_format((request.output_config or {}).get("format", request.output_format))
    if isinstance(fmt, AnthropicError):
        return fmt
    converted = conversation(request.system, request.messages, signing_key)
    if isinstance(converted, AnthropicError):
        return converted
    system, turns, last = converted
    if last is None:
        return bad_request("messages: the conversation has no user or assistant turn")
    if last.role == "assistant":
        return bad_request("messages: the last turn must come from the user (an assistant prefill cannot be continued here)")
    if last.role == "user":
        if not last.parts and not last.content.strip():
            return bad_request("messages: the last user turn is empty")
        history, parts, continuation = turns[:-1], last.parts or (m.TextPart(last.content),), False
    else:
        history, parts, continuation = turns, (), True
    agent, model_override = resolve_model(request.model, agents)
    thinking = request.thinking or {}
    options = m.PromptOptions(
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        system_prompt=system,
        model=model_override,
        max_context_messages=max(context_limit, len(history) + 1),
        client_tools=tools[0],
        stream=bool(request.stream),
        output_format=fmt,
        tool_choice=choice[0],
        parallel_tool_calls=choice[1],
        top_p=request.top_p,
        stop=tuple(request.stop_sequences or ()),
    )
    return MessagesPlan(
        agent_id=agent.id,
        response_model=request.model or agent.name,
        history=tuple(history),
        prompt_parts=tuple(parts),
        continuation=continuation,
        options=options,
        stream=bool(request.stream),
        show_thinking=thinking.get("type") != "disabled" and thinking.get("display") != "omitted",
        hosted_tools=tools[1],
    )


def client_tools(tools: list[ToolDef] | None, choice: dict[str, Any] | None) -> tuple[tuple[m.ClientTool, ...], tuple[str, ...]] | AnthropicError:
    """The client's tools (offered to the model, run by the client) and the names of the
    server tools among them, which nobody here can run."""
    if not tools or (choice or {}).get("type") == "none":
        return (), ()
    offered: list[m.ClientTool] = []
    hosted: list[str] = []
    for i, tool in enumerate(tools):
        if tool.input_schema is None and tool.type not in (None, "custom"):
            hosted.append(tool.name)
            continue
        if not TOOL_NAME.match(tool.name):
            return bad_request(f"tools.{i}.name: must be 1-64 characters of a-z, A-Z, 0-9, _ and -")
        schema = tool.input_schema if tool.input_schema is not None else {"type": "object", "properties": {}}
        offered.append(m.ClientTool(name=tool.name, description=tool.description, parameters=schema))
    return tuple(offered), tuple(hosted)


_CHOICES: dict[str, Literal["auto", "required", "tool", "none"]] = {"auto": "auto", "any": "required", "tool": "tool", "none": "none"}


def tool_choice(choice: dict[str, Any] | None) -> tuple[m.ToolChoice | None, bool | None] | AnthropicError:
    """``tool_choice`` (``auto``, ``any``: some tool, ``tool``: the tool ``name``, ``none``)
    and whether parallel calls are allowed (``disable_parallel_tool_use``). Whether a forced
    tool exists is the kernel's to say (it may be one of the agent's own tools)."""
    if choice is None:
        return None, None
    mode = _CHOICES.get(choice.get("type"))  # type: ignore[arg-type]
    if mode is None:
        return bad_request("tool_choice.type: must be 'auto', 'any', 'tool' or 'none'")
    name = choice.get("name")
    if mode == "tool" and (not isinstance(name, str) or not name):
        return bad_request("tool_choice.name: Field required")
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    return (None if mode == "auto" else m.ToolChoice(mode=mode, name=name if mode == "tool" else None)), parallel


def output_format(value: Any) -> m.OutputFormat | AnthropicError | None:
    """Structured output: ``{"type": "json_schema", "schema": {...}}`` (None: free text)."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "json_schema" or not isinstance(value.get("schema"), dict):
        return bad_request("output_config.format: must be {'type': 'json_schema', 'schema': {...}}")
    return m.OutputFormat(type="json_schema", schema=value["schema"])


def _text_of(value: str | list[dict[str, Any]], where: str) -> str | AnthropicError:
    """A system prompt or system turn: a string or text blocks (``cache_control`` ignored)."""
    if isinstance(value, str):
        return value
    texts: list[str] = []
    for j, block in enumerate(value):
        text = block.get("text")
        if block.get("type") != "text" or not isinstance(text, str):
            return bad_request(f"{where}.{j}: system content must be text blocks")
        if not text.startswith(BILLING_HEADER):
            texts.append(text)
    return "\n\n".join(texts)


def conversation(
    system: str | list[dict[str, Any]] | None, messages: Sequence[InMessage], signing_key: bytes
) -> tuple[str | None, list[m.Message], m.Message | None] | AnthropicError:
    """The system prompt (``system`` and every ``role: "system"`` turn, in order), the other
    turns as kernel messages, and the last of them (None if there is none)."""
    prompts: list[str] = []
    if system is not None:
        text = _text_of(system, "system")
        if isinstance(text, AnthropicError):
            return text
        if text:
            prompts.append(text)
    turns: list[m.Message] = []
    last: m.Message | None = None
    names: dict[str, str] = {}
    for i, message in enumerate(messages):
        where = f"messages.{i}.content"
        if message.role == "system":
            text = _text_of(message.content, where)
            if isinstance(text, AnthropicError):
                return text
            if text:
                prompts.append(text)
            continue
        blocks = [{"type": "text", "text": message.content}] if isinstance(message.content, str) else message.content
        if message.role == "user":
            converted = _user_turn(blocks, where, names)
        elif message.role == "assistant":
            converted = _assistant_turn(blocks, where, names, signing_key)
        else:
            return bad_request(f"messages.{i}.role: must be 'user' or 'assistant' (or 'system'), not {message.role!r}")
        if isinstance(converted, AnthropicError):
            return converted
        turns.extend(converted)
        if converted:
            last = converted[-1]
    return ("\n\n".join(prompts) if prompts else None), turns, last


def _user_turn(blocks: list[dict[str, Any]], where: str, names: dict[str, str]) -> list[m.Message] | AnthropicError:
    """Tool results first (as kernel tool messages, in order), then the rest as one user message."""
    out: list[m.Message] = []
    parts: list[m.ContentPart] = []
    for j, block in enumerate(blocks):
        at = f"{where}.{j}"
        if block.get("type") == "tool_result":
            result = _tool_result(block, at, names)
            if isinstance(result, AnthropicError):
                return result
            out.append(result)
            continue
        part = content_part(block, at)
        if isinstance(part, AnthropicError):
            return part
        if part is not None:
            parts.append(part)
    if parts:
        out.append(message_from_parts(tuple(parts)))
    elif not out:
        return bad_request(f"{where}: a user turn must not be empty")
    return out


def _tool_result(block: dict[str, Any], at: str, names: dict[str, str]) -> m.Message | AnthropicError:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        return bad_request(f"{at}.tool_use_id: Field required")
    content = block.get("content", "")
    texts: list[str] = []
    parts: list[m.ContentPart] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for k, item in enumerate(content):
            part = content_part(item, f"{at}.content.{k}") if isinstance(item, dict) else bad_request(f"{at}.content.{k}: must be a block")
            if isinstance(part, AnthropicError):
                return part
            if isinstance(part, m.TextPart):
                texts.append(part.text)
            elif part is not None:
                parts.append(part)
    else:
        return bad_request(f"{at}.content: must be a string or a list of blocks")
    return m.Message(
        role="tool", content="\n".join(texts), parts=tuple(parts), tool_call_id=upstream_tool_id(call_id),
        name=names.get(call_id), outcome="error" if block.get("is_error") is True else "ok",
    )


def _assistant_turn(blocks: list[dict[str, Any]], where: str, names: dict[str, str], signing_key: bytes) -> list[m.Message] | AnthropicError:
    """Text and tool calls; ``thinking`` blocks are checked (a signature of this gateway
    that does not match its text was edited: refused, as Anthropic refuses it) and, like
    ``redacted_thinking`` and server-tool blocks, left out of the upstream's context."""
    texts: list[str] = []
    calls: list[m.ToolCall] = []
    for j, block in enumerate(blocks):
        kind = block.get("type")
        at = f"{where}.{j}"
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not isinstance(arguments, dict):
                return bad_request(f"{at}: a tool_use block needs an id, a name and an input object")
            names[call_id] = name
            calls.append(m.ToolCall(id=upstream_tool_id(call_id), name=name, arguments=msgspec.json.encode(arguments).decode()))
        elif kind == "thinking":
            text, signature = block.get("thinking"), block.get("signature")
            if not isinstance(text, str) or not isinstance(signature, str):
                return bad_request(f"{at}: a thinking block needs thinking and signature strings")
            if check_signature(signing_key, text, signature) is SignatureCheck.FORGED:
                return bad_request(f"{at}: Invalid signature in thinking block")
        elif kind == "text":
            return bad_request(f"{at}.text: Field required")
        # redacted_thinking, server_tool_use, *_tool_result: the client's record, not context
    if not texts and not calls:
        return []
    return [m.Message(role="assistant", content="".join(texts), tool_calls=tuple(calls))]


def _b64(data: Any) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None


def content_part(block: dict[str, Any], at: str) -> m.ContentPart | AnthropicError | None:
    """A user content block as a kernel part (None: a block with nothing to carry)."""
    kind = block.get("type")
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    if kind == "text":
        text = block.get("text")
        return m.TextPart(text) if isinstance(text, str) else bad_request(f"{at}.text: Field required")
    if kind == "image":
        if source.get("type") == "base64":
            data = _b64(source.get("data"))
            media = source.get("media_type")
            if data is None or not isinstance(media, str):
                return bad_request(f"{at}.source: base64 images need media_type and valid base64 data")
            return m.ImagePart(data=data, mime_type=media)
        if source.get("type") == "url" and isinstance(source.get("url"), str) and (decoded := data_url(source["url"])) is not None:
            return m.ImagePart(data=decoded[1], mime_type=decoded[0])
        return bad_request(f"{at}.source: the gateway takes images as base64 (or data: URLs); it does not fetch URLs or files")
    if kind == "document":
        title = block["title"] if isinstance(block.get("title"), str) else "document"
        if source.get("type") == "text" and isinstance(source.get("data"), str):
            return m.FilePart(name=title, data=source["data"].encode(), content_type=str(source.get("media_type", "text/plain")))
        if source.get("type") == "content" and isinstance(source.get("content"), (str, list)):
            inner = source["content"]
            texts = [inner] if isinstance(inner, str) else [b.get("text") for b in inner if isinstance(b, dict)]
            if all(isinstance(t, str) for t in texts):
                return m.FilePart(name=title, data="\n".join(t for t in texts if isinstance(t, str)).encode(), content_type="text/plain")
        if source.get("type") == "base64" and source.get("media_type") == "text/plain" and (data := _b64(source.get("data"))) is not None:
            return m.FilePart(name=title, data=data, content_type="text/plain")
        return bad_request(f"{at}.source: the gateway takes text documents only (its upstream reads no PDF or URL)")
    if kind in ("thinking", "redacted_thinking"):
        return None
    return bad_request(f"{at}.type: content blocks of type {kind!r} are not supported in a user turn")


# ---------------------------------------------------------------- token estimate

#: Characters per token of the estimate (the usual figure for English text and code).
CHARS_PER_TOKEN = 4
#: Tokens counted for each image (Anthropic's figure for a ~1.15 megapixel image).
IMAGE_TOKENS = 1600
#: Tokens of framing per message (role markers).
MESSAGE_TOKENS = 4


def _chars(value: Any) -> tuple[int, int]:
    """(characters of text, images) in a block tree; thinking blocks of earlier turns and
    base64 payloads do not count (the model never reads them as text)."""
    if isinstance(value, str):
        return len(value), 0
    if isinstance(value, list):
        total = images = 0
        for item in value:
            chars, pics = _chars(item)
            total, images = total + chars, images + pics
        return total, images
    if isinstance(value, dict):
        kind = value.get("type")
        if kind == "image":
            return 0, 1
        if kind in ("thinking", "redacted_thinking"):
            return 0, 0
        total = images = 0
        for key, item in value.items():
            if key in ("type", "cache_control", "id", "tool_use_id", "signature") or (key == "data" and kind == "base64"):
                continue
            chars, pics = _chars(item)
            total, images = total + chars, images + pics
        return total, images
    return 0, 0


def estimate_tokens(system: str | list[dict[str, Any]] | None, messages: Sequence[InMessage], tools: Sequence[ToolDef] | None) -> int:
    """The prompt's size in tokens, estimated without a tokenizer (the upstream's is
    unknown): its text (system, turns, tool inputs and results, the tools' schemas as
    JSON) at :data:`CHARS_PER_TOKEN` characters a token, :data:`IMAGE_TOKENS` per image
    and :data:`MESSAGE_TOKENS` per message."""
    chars, images = _chars(system) if system is not None else (0, 0)
    for message in messages:
        more, pics = _chars(message.content)
        chars, images = chars + more, images + pics
    for tool in tools or ():
        chars += len(tool.name) + len(tool.description) + len(msgspec.json.encode(tool.input_schema or {}))
    return math.ceil(chars / CHARS_PER_TOKEN) + images * IMAGE_TOKENS + MESSAGE_TOKENS * len(messages)


# ---------------------------------------------------------------- models


def _rfc3339(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def model_page(agents: Sequence[m.AgentInfo], created: int, query: dict[str, str]) -> ModelPage | AnthropicError:
    """``GET /v1/models`` in Anthropic's shape: the same models as OpenAI's list, paged by
    ``after_id`` / ``before_id`` / ``limit`` (1-1000, 20 by default)."""
    ids = [info.id for info in model_list(agents, created).data]
    limit_text = query.get("limit", "20")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 1000:
        return bad_request("limit: must be an integer from 1 to 1000")
    limit = int(limit_text)
    start, stop = 0, len(ids)
    for key in ("after_id", "before_id"):
        if key in query and query[key] not in ids:
            return AnthropicError(status=404, type="not_found_error", message=f"{key}: no model {query[key]!r}", headers={"x-should-retry": "false"})
    if "after_id" in query:
        start = ids.index(query["after_id"]) + 1
    if "before_id" in query:
        stop = ids.index(query["before_id"])
        start = max(start, stop - limit)
    window = ids[start:stop][:limit]
    data = [ModelInfo(id=model, display_name=model, created_at=_rfc3339(created)) for model in window]
    has_more = start + len(window) < stop if "before_id" not in query else start > 0
    return ModelPage(data=data, has_more=has_more, first_id=window[0] if window else None, last_id=window[-1] if window else None)


def find_model(agents: Sequence[m.AgentInfo], created: int, model_id: str) -> ModelInfo | AnthropicError:
    for info in model_list(agents, created).data:
        if info.id == model_id:
            return ModelInfo(id=info.id, display_name=info.id, created_at=_rfc3339(created))
    return AnthropicError(status=404, type="not_found_error", message=f"model: {model_id}", headers={"x-should-retry": "false"})
