"""Sans-IO codec of the OpenAI Responses API (``/v1/responses``).

In: a request body -> a :class:`ResponsePlan`: which agent, the input items as kernel
history (messages, the client's ``function_call`` / ``custom_tool_call`` items and their
outputs, ``item_reference`` s resolved to stored items), the last user message as the
prompt or, when the input ends with tool results, a continuation; per-request options with
the client's tools as the model sees them (``tools.py``: namespaces, free-form tools,
hosted tools left out). Out: one run's kernel events -> a :class:`ResponseBuilder` that
yields the typed stream events (each with the next ``sequence_number``) and the
``response`` object with its output items, calls under the client's own tool names and
reasoning sealed (``sealed.py``) when asked. Errors have OpenAI's shape, shared with the
chat-completions dialect. Pure; never raises on input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from kernel import JsonDecoder, message_from_parts
from kernel import model as m

from ..openai.codec import bad_request, data_url, invalid_field, output_format, resolve_model, tool_choice
from ..openai.wire import OpenAIError
from . import wire as w
from .sealed import seal
from .tools import ToolSet, ToolTarget, custom_arguments, custom_input, tool_set

_decode_request: JsonDecoder[w.ResponsesRequest] = JsonDecoder(w.ResponsesRequest)
_encode = msgspec.json.encode

#: One stream event: its SSE ``event:`` name and its JSON.
Frame = tuple[str, bytes]

# ---------------------------------------------------------------- request in


def decode_request(raw: bytes) -> w.ResponsesRequest | OpenAIError:
    if not raw.strip():
        return bad_request("The request body is empty; expected a JSON Responses API request.")
    try:
        return _decode_request.decode(raw)
    except msgspec.ValidationError as exc:
        return invalid_field(exc)
    except msgspec.DecodeError as exc:
        return bad_request(f"We could not parse the JSON body of your request ({exc}).")


class Echo(msgspec.Struct, frozen=True, kw_only=True):
    """What the ``response`` object repeats of its request."""

    instructions: str | None = None
    max_output_tokens: int | None = None
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] | None = None
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] = "auto"
    tools: tuple[Any, ...] = ()
    top_p: float | None = None
    truncation: str = "disabled"
    user: str | None = None
    metadata: dict[str, str] | None = None
    #: ``include`` asked for ``reasoning.encrypted_content``: reasoning items carry a sealed copy.
    sealed_reasoning: bool = False


class ResponsePlan(msgspec.Struct, frozen=True, kw_only=True):
    """What one Responses request asks of the kernel."""

    agent_id: str
    #: ``model`` named an agent: a continued conversation must belong to it.
    agent_named: bool
    response_model: str
    history: tuple[m.Message, ...]
    prompt_parts: tuple[m.ContentPart, ...]
    #: The input ends with function results: run on the history, no new user turn.
    continuation: bool
    #: Carries the client's function tools (``client_tools``) and the request's limits.
    options: m.PromptOptions
    stream: bool
    store: bool
    previous_response_id: str | None
    conversation_id: str | None
    echo: Echo
    #: The client's tools as the model sees them, and the way back to the client's names.
    tools: ToolSet = ToolSet()


def plan_response(
    request: w.ResponsesRequest,
    agents: Sequence[m.AgentInfo],
    *,
    context_limit: int,
    known_calls: Mapping[str, str] | None = None,
    references: Mapping[str, dict[str, Any]] | None = None,
) -> ResponsePlan | OpenAIError:
    """``known_calls``: call id -> function name of the calls the continued response made;
    ``references``: the stored items that ``item_reference`` inputs name (``referenced_ids``
    lists them; one missing here is refused)."""
    if not agents:
        return OpenAIError(status=500, message="No agent is configured", type="server_error")
    refused = check_request(request)
    if refused is not None:
        return refused
    tools = tool_set(request.tools or [])
    if isinstance(tools, OpenAIError):
        return tools
    if not (request.input.strip() if isinstance(request.input, str) else request.input):
        return bad_request("input must not be empty.", param="input")
    items: list[dict[str, Any]] = [{"role": "user", "content": request.input}] if isinstance(request.input, str) else request.input
    converted = _conversation(items, dict(known_calls or {}), _Replay(tools=tools, references=references or {}))
    if isinstance(converted, OpenAIError):
        return converted
    system, turns = converted
    last = turns[-1] if turns else None  # system and developer items may follow it
    if last is not None and last.role == "user":
        parts = last.parts or ((m.TextPart(last.content),) if last.content.strip() else ())
        if not parts:
            return bad_request("The last user message is empty.", param="input")
        history, continuation = turns[:-1], False
    elif last is not None and last.role == "tool":
        history, parts, continuation = turns, (), True
    else:
        return bad_request("The last input item must be a user message or a function_call_output.", param="input")
    demands = _demands(request)
    if isinstance(demands, OpenAIError):
        return demands
    agent, model_override = resolve_model(request.model, agents)
    offer_tools = request.tool_choice != "none"
    instructions = [request.instructions] if request.instructions else []
    options = m.PromptOptions(
        max_tokens=request.max_output_tokens,
        temperature=request.temperature,
        system_prompt="\n\n".join([*instructions, *system]) or None,
        model=model_override,
        max_context_messages=max(context_limit, len(history) + 1),
        use_tools=offer_tools,
        client_tools=tools.offered if offer_tools else (),
        stream=bool(request.stream),
        output_format=demands[0],
        tool_choice=demands[1],
        parallel_tool_calls=request.parallel_tool_calls,
    )
    conversation = request.conversation.id if isinstance(request.conversation, w.ConversationRef) else request.conversation
    store = request.store is not False
    echo = Echo(
        instructions=request.instructions, max_output_tokens=request.max_output_tokens,
        parallel_tool_calls=request.parallel_tool_calls is not False, previous_response_id=request.previous_response_id,
        reasoning=request.reasoning, store=store, temperature=request.temperature, text=request.text,
        tool_choice=request.tool_choice or "auto", tools=tools.echo, top_p=request.top_p,
        truncation=request.truncation or "disabled", user=request.user, metadata=request.metadata,
        sealed_reasoning="reasoning.encrypted_content" in (request.include or ()),
    )
    return ResponsePlan(
        agent_id=agent.id, agent_named=model_override is None and request.model not in ("", "default"),
        response_model=request.model or agent.name, history=tuple(history), prompt_parts=parts, continuation=continuation,
        options=options, stream=bool(request.stream), store=store, previous_response_id=request.previous_response_id,
        conversation_id=conversation, echo=echo, tools=tools,
    )


def _demands(request: w.ResponsesRequest) -> tuple[m.OutputFormat | None, m.ToolChoice | None] | OpenAIError:
    """``text.format`` (``{"type": "json_schema", "name", "schema", "strict"}``, flat, unlike
    chat's ``response_format``) and ``tool_choice`` (``{"type": "function", "name"}``)."""
    fmt = (request.text or {}).get("format")
    if fmt is not None and not isinstance(fmt, dict):
        return bad_request("text.format must be an object.", param="text.format")
    output = output_format(fmt.get("type", "text"), fmt, "text.format") if fmt is not None else None
    if isinstance(output, OpenAIError):
        return output
    forced = request.tool_choice
    if isinstance(forced, dict) and forced.get("type") == "custom":  # a free-form tool is a function to the model
        forced = {**forced, "type": "function"}
    choice = tool_choice(forced, "tool_choice", nested=False)
    if isinstance(choice, OpenAIError):
        return choice
    return output, choice


def check_request(request: w.ResponsesRequest) -> OpenAIError | None:
    """What the gateway refuses rather than ignores (ignoring would answer wrongly);
    checked before ``previous_response_id`` is looked up."""
    if request.background:
        return bad_request("Background responses are not supported by this gateway.", param="background")
    if request.prompt is not None:
        return bad_request("Stored prompts are not supported by this gateway; send instructions and input.", param="prompt")
    if request.previous_response_id and request.conversation:
        return bad_request("Mutually exclusive parameters: give previous_response_id or conversation, not both.", param="conversation")
    if request.temperature is not None and not 0 <= request.temperature <= 2:
        return bad_request("temperature must be between 0 and 2.", param="temperature")
    if request.max_output_tokens is not None and request.max_output_tokens < 1:
        return bad_request("max_output_tokens must be at least 1.", param="max_output_tokens")
    return None


def _kind(item: dict[str, Any]) -> str:
    kind = item.get("type")
    return "message" if kind is None and "role" in item else str(kind)


def referenced_ids(request: w.ResponsesRequest) -> list[tuple[int, str]]:
    """The ``item_reference`` inputs: (index, item id) of each, for the route to look up."""
    if isinstance(request.input, str):
        return []
    return [(i, str(item.get("id"))) for i, item in enumerate(request.input) if item.get("type") == "item_reference"]


def unknown_reference(index: int, item_id: str) -> OpenAIError:
    return bad_request(
        f"Item with id {item_id!r} not found: it is not an item of a response stored by this gateway (or it was dropped).",
        param=f"input[{index}].id",
    )


def stored_items(body: bytes) -> dict[str, dict[str, Any]]:
    """The output items of a stored response (its JSON) by id, as input items."""
    response = msgspec.json.decode(body)
    return {item["id"]: item for item in response.get("output", ()) if isinstance(item, dict) and isinstance(item.get("id"), str)}


_TOOL_OUTPUTS = ("function_call_output", "custom_tool_call_output")
#: Records of tools OpenAI's servers ran (a conversation begun there, replayed here): left out
#: of the model's context — the answer after them holds what they found — never refused.
HOSTED_CALL_ITEMS = frozenset({
    "web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call", "local_shell_call",
    "local_shell_call_output", "computer_call", "computer_call_output", "mcp_call", "mcp_list_tools",
    "mcp_approval_request", "mcp_approval_response", "tool_search_call", "tool_search_output",
})


class _Replay(msgspec.Struct, frozen=True, kw_only=True):
    """What converting the input needs besides the items: the request's tools (a replayed
    call names the client's tool) and the items ``item_reference`` resolves to."""

    tools: ToolSet
    references: Mapping[str, dict[str, Any]]


def _conversation(items: list[dict[str, Any]], calls: dict[str, str], replay: _Replay) -> tuple[list[str], list[m.Message]] | OpenAIError:
    """System/developer texts (the system prompt) and the other items as kernel messages.

    ``function_call`` and ``custom_tool_call`` items join the assistant turn they follow,
    so that a turn's calls and its text are one message, as the models expect (a call is
    named as the model was offered its tool: ``tools.py``); images in tool outputs follow
    the round's results as a user turn (``_tool_output``). ``item_reference`` stands for
    the stored item it names. ``reasoning`` items (Codex sends each back, sealed) stay out
    of the conversation: the kernel's messages carry no reasoning, and chat-completions
    upstreams have no common way to take it back (DeepSeek refuses it in the input)."""
    system: list[str] = []
    turns: list[m.Message] = []
    images: list[m.ImagePart] = []  # of the tool outputs of the current round

    def flush_images() -> None:
        if images:
            turns.append(m.Message(role="user", parts=tuple(images)))
            images.clear()

    def add_call(tool_call: m.ToolCall) -> None:
        calls[tool_call.id] = tool_call.name
        if turns and turns[-1].role == "assistant":
            turns[-1] = msgspec.structs.replace(turns[-1], tool_calls=(*turns[-1].tool_calls, tool_call))
        else:
            turns.append(m.Message(role="assistant", tool_calls=(tool_call,)))

    for i, original in enumerate(items):
        where = f"input[{i}]"
        item = original
        kind = _kind(item)
        try:
            if kind == "item_reference":
                reference = msgspec.convert(item, w.ItemReference)
                found = replay.references.get(reference.id)
                if found is None:
                    return unknown_reference(i, reference.id)
                item, kind = found, _kind(found)
            if kind not in _TOOL_OUTPUTS:  # the round's results are all in: its images follow them
                flush_images()
            if kind == "message":
                message = msgspec.convert(item, w.MessageItem)
                parts = _parts(message.content, f"{where}.content")
                if isinstance(parts, OpenAIError):
                    return parts
                texts = [p.text for p in parts if isinstance(p, m.TextPart)]
                if message.role in ("system", "developer"):
                    if len(texts) != len(parts):
                        return bad_request("System messages may only contain text.", param=f"{where}.content")
                    system.append("\n".join(texts))
                elif message.role == "assistant":
                    if len(texts) != len(parts):
                        return bad_request("Assistant messages may only contain text.", param=f"{where}.content")
                    turns.append(m.Message(role="assistant", content="".join(texts)))
                else:
                    turns.append(message_from_parts(parts))
            elif kind == "function_call":
                call = msgspec.convert(item, w.FunctionCallItem)
                name = replay.tools.model_name(call.name, call.namespace)
                add_call(m.ToolCall(id=call.call_id, name=name, arguments=call.arguments or "{}"))
            elif kind == "custom_tool_call":
                custom = msgspec.convert(item, w.CustomToolCallItem)
                name = replay.tools.model_name(custom.name, custom.namespace)
                add_call(m.ToolCall(id=custom.call_id, name=name, arguments=custom_arguments(custom.input)))
            elif kind in _TOOL_OUTPUTS:
                result = msgspec.convert(item, w.FunctionCallOutputItem)
                output = _tool_output(result.output, f"{where}.output")
                if isinstance(output, OpenAIError):
                    return output
                turns.append(m.Message(role="tool", content=output[0], tool_call_id=result.call_id, name=calls.get(result.call_id)))
                images += output[1]
            elif kind == "reasoning":
                msgspec.convert(item, w.ReasoningItem)  # its shape is checked; its text is not replayed
            elif kind not in HOSTED_CALL_ITEMS:
                return bad_request(f"Unsupported input item type {kind!r}.", param=f"{where}.type")
        except msgspec.ValidationError as exc:
            return invalid_field(exc, where)
    flush_images()
    return system, turns


def _parts(content: str | list[w.InputPart], where: str) -> tuple[m.ContentPart, ...] | OpenAIError:
    if isinstance(content, str):
        return (m.TextPart(content),) if content else ()
    parts: list[m.ContentPart] = []
    for j, part in enumerate(content):
        if isinstance(part, (w.InputText, w.EchoedText)):
            parts.append(m.TextPart(part.text))
        elif isinstance(part, w.EchoedRefusal):
            parts.append(m.TextPart(part.refusal))
        elif isinstance(part, w.InputImage):
            decoded = data_url(part.image_url) if part.image_url else None
            if decoded is None:
                return bad_request("Images must be given as base64 data: URLs in image_url.", param=f"{where}[{j}]")
            parts.append(m.ImagePart(data=decoded[1], mime_type=decoded[0]))
        else:
            decoded = data_url(part.file_data) if part.file_data else None
            if decoded is None:
                return bad_request("Files must be given inline as file_data data: URLs.", param=f"{where}[{j}]")
            parts.append(m.FilePart(name=part.filename or "file", data=decoded[1], content_type=decoded[0]))
    return tuple(parts)


def _tool_output(output: str | list[w.InputPart], where: str) -> tuple[str, list[m.ImagePart]] | OpenAIError:
    """A tool's output as its tool message's text, and the images it holds (Codex's
    ``view_image``): a chat-completions tool message carries text only, so the images are
    shown to the model in a user turn right after the tool results."""
    parts = _parts(output, where)
    if isinstance(parts, OpenAIError):
        return parts
    texts = [p.text for p in parts if isinstance(p, m.TextPart)]
    images = [p for p in parts if isinstance(p, m.ImagePart)]
    if len(texts) + len(images) != len(parts):
        return bad_request("Tool outputs may only contain text and images.", param=where)
    if images and not texts:
        texts.append(f"(the output is {len(images)} image{'s' if len(images) > 1 else ''}, shown in the next message)")
    return "\n".join(texts), images


# ---------------------------------------------------------------- kernel commands


def run_command(plan: ResponsePlan, session_id: str, response_id: str) -> m.Prompt | m.Continue:
    """The last user message as the prompt, or a ``continue`` after function results."""
    return m.conversation_turn(session_id, response_id, plan.prompt_parts, plan.options, continuation=plan.continuation)


def history_until(messages: Sequence[m.Message], last_message_at: float | None) -> tuple[m.Message, ...] | None:
    """A conversation as it was when a response ended (its last message was stamped
    ``last_message_at``); None when that message is gone (cleared, or trimmed away)."""
    if last_message_at is None:
        return ()
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].created_at == last_message_at:
            return tuple(messages[: index + 1])
    return None


# ---------------------------------------------------------------- errors


def previous_not_found(response_id: str) -> OpenAIError:
    return OpenAIError(
        status=400, message=f"Previous response with id '{response_id}' not found.", param="previous_response_id", code="previous_response_not_found"
    )


def previous_in_progress(response_id: str) -> OpenAIError:
    return bad_request(f"Previous response '{response_id}' is still in progress; continue once it has ended.", param="previous_response_id")


def previous_gone(response_id: str) -> OpenAIError:
    return bad_request(
        f"Previous response '{response_id}' can no longer be continued: its conversation was cleared or trimmed past it.", param="previous_response_id"
    )


def conversation_not_found(session_id: str) -> OpenAIError:
    return OpenAIError(status=404, message=f"Conversation with id '{session_id}' not found.", param="conversation", code="not_found")


def other_agent(model: str) -> OpenAIError:
    return bad_request(f"model {model!r} names another agent than the one holding this conversation.", param="model")


def response_not_found(response_id: str) -> OpenAIError:
    return OpenAIError(status=404, message=f"Response with id '{response_id}' not found.", code="not_found")


def not_streamable() -> OpenAIError:
    return bad_request("Streaming a stored response again is not supported; GET it without stream.", param="stream")


# ---------------------------------------------------------------- events out

_ERROR_CODES: dict[str, str] = {
    "rate_limited": "rate_limit_exceeded",
    "invalid_request": "invalid_prompt",
    "parse_error": "invalid_prompt",
    "too_large": "invalid_prompt",
}


def _usage(usage: m.Usage) -> w.ResponseUsage:
    return w.ResponseUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, total_tokens=usage.total_tokens)


class _OpenItem:
    """The output item being streamed: a message or a reasoning summary."""

    def __init__(self, kind: Literal["message", "reasoning"], item_id: str, index: int) -> None:
        self.kind = kind
        self.item_id = item_id
        self.index = index
        self.texts: list[str] = []


class ResponseBuilder:
    """One run's kernel events -> stream events with rising sequence numbers, and the
    ``response`` object (its output items in order: reasoning, message, function calls).

    At most one message or reasoning item is open at a time; text after reasoning opens
    a message, reasoning after text a new reasoning item, so ``output_text`` (the
    messages' texts joined) is the run's text. A call of one of the client's tools ends
    the open item and becomes a complete ``function_call`` item at once (the kernel
    announces its arguments whole) — or a ``custom_tool_call`` for a free-form tool —
    under the name (and namespace) the client gave its tool.

    ``client_tools``: the model-facing names of the client's tools and what each stands
    for (a plain name: a top-level function). ``seal_key``: seals reasoning items'
    ``encrypted_content`` when the request asked for it.
    """

    def __init__(
        self,
        *,
        response_id: str,
        created_at: int,
        model: str,
        echo: Echo,
        client_tools: Mapping[str, ToolTarget] | Sequence[str],
        conversation_id: str | None,
        seal_key: bytes | None = None,
    ) -> None:
        self.response_id = response_id
        self.created_at = created_at
        self.model = model
        self.echo = echo
        self.client_tools: Mapping[str, ToolTarget] = (
            client_tools if isinstance(client_tools, Mapping) else {name: ToolTarget(name=name) for name in client_tools}
        )
        self.seal_key = seal_key if echo.sealed_reasoning else None
        self.conversation_id = conversation_id
        self.output: list[w.OutputItem] = []
        self.calls: dict[str, str] = {}
        self.final: w.Response | None = None
        self._open: _OpenItem | None = None
        self._sequence = 0
        self._ids = 0

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_{self.response_id.removeprefix('resp_')}{self._ids:03d}"

    def _frame(self, event: w.StreamEvent) -> Frame:
        event.sequence_number = self._sequence
        self._sequence += 1
        name = type(event).__struct_config__.tag
        assert isinstance(name, str)
        return name, _encode(event)

    def shows(self, event: m.Event) -> bool:
        """Whether ``event`` puts something in the response (a streamed response holds
        its headers until then, so that an early failure keeps its HTTP status)."""
        return isinstance(event, (m.TextDelta, m.ReasoningDelta)) or (isinstance(event, m.ToolCallStarted) and event.name in self.client_tools)

    def snapshot(self, status: w.ResponseStatus = "in_progress") -> w.Response:
        echo = self.echo
        return w.Response(
            id=self.response_id, created_at=self.created_at, status=status, model=self.model, output=list(self.output),
            instructions=echo.instructions, max_output_tokens=echo.max_output_tokens, parallel_tool_calls=echo.parallel_tool_calls,
            previous_response_id=echo.previous_response_id, reasoning=echo.reasoning or {"effort": None, "summary": None},
            store=echo.store, temperature=echo.temperature, text=echo.text or {"format": {"type": "text"}},
            tool_choice=echo.tool_choice, tools=list(echo.tools), top_p=echo.top_p, truncation=echo.truncation, user=echo.user,
            metadata=echo.metadata or {}, conversation=w.ConversationRef(id=self.conversation_id) if self.conversation_id else None,
        )

    def opening(self) -> list[Frame]:
        return [
            self._frame(w.Created(response=self.snapshot())),
            self._frame(w.InProgress(response=self.snapshot())),
        ]

    def feed(self, event: m.Event) -> list[Frame]:
        if isinstance(event, m.TextDelta) and event.text:
            return self._text("message", event.text)
        if isinstance(event, m.ReasoningDelta) and event.text:
            return self._text("reasoning", event.text)
        if isinstance(event, m.ToolCallStarted) and event.name in self.client_tools:
            return self._call(m.ToolCall(id=event.call_id, name=event.name, arguments=event.arguments))
        return []

    def _text(self, kind: Literal["message", "reasoning"], text: str) -> list[Frame]:
        frames: list[Frame] = []
        item = self._open
        if item is not None and item.kind != kind:
            frames += self._close()
            item = None
        if item is None:
            frames += self._start(kind)
            item = self._open
            assert item is not None
        item.texts.append(text)
        if kind == "message":
            frames.append(self._frame(w.TextDelta(item_id=item.item_id, output_index=item.index, content_index=0, delta=text)))
        else:
            frames.append(self._frame(w.SummaryTextDelta(item_id=item.item_id, output_index=item.index, summary_index=0, delta=text)))
        return frames

    def _start(self, kind: Literal["message", "reasoning"]) -> list[Frame]:
        index = len(self.output)
        item = _OpenItem(kind, self._next_id("msg" if kind == "message" else "rs"), index)
        self._open = item
        if kind == "message":
            return [
                self._frame(w.ItemAdded(output_index=index, item=w.OutputMessage(id=item.item_id, status="in_progress"))),
                self._frame(w.ContentPartAdded(item_id=item.item_id, output_index=index, content_index=0, part=w.OutputText(text=""))),
            ]
        return [
            self._frame(w.ItemAdded(output_index=index, item=w.Reasoning(id=item.item_id, status="in_progress"))),
            self._frame(w.SummaryPartAdded(item_id=item.item_id, output_index=index, summary_index=0, part=w.SummaryText(""))),
        ]

    def _close(self, status: Literal["completed", "incomplete"] = "completed") -> list[Frame]:
        item = self._open
        if item is None:
            return []
        self._open = None
        text = "".join(item.texts)
        item_id, index = item.item_id, item.index
        done: w.OutputItem
        if item.kind == "message":
            part = w.OutputText(text=text)
            done = w.OutputMessage(id=item.item_id, status=status, content=[part])
            frames = [
                self._frame(w.TextDone(content_index=0, text=text, item_id=item_id, output_index=index)),
                self._frame(w.ContentPartDone(content_index=0, part=part, item_id=item_id, output_index=index)),
            ]
        else:
            summary = w.SummaryText(text)
            sealed = seal(self.seal_key, text) if self.seal_key is not None else None
            done = w.Reasoning(id=item.item_id, summary=[summary], status=status, encrypted_content=sealed)
            frames = [
                self._frame(w.SummaryTextDone(summary_index=0, text=text, item_id=item_id, output_index=index)),
                self._frame(w.SummaryPartDone(summary_index=0, part=summary, item_id=item_id, output_index=index)),
            ]
        self.output.append(done)
        frames.append(self._frame(w.ItemDone(output_index=item.index, item=done)))
        return frames

    def _call(self, call: m.ToolCall) -> list[Frame]:
        if call.id in self.calls:
            return []
        frames = self._close()
        self.calls[call.id] = call.name
        target = self.client_tools.get(call.name) or ToolTarget(name=call.name)
        index = len(self.output)
        if target.custom:
            item_id, text = self._next_id("ctc"), custom_input(call.arguments)
            custom = w.CustomToolCall(id=item_id, call_id=call.id, name=target.name, input=text, namespace=target.namespace)
            self.output.append(custom)
            return [
                *frames,
                self._frame(w.ItemAdded(output_index=index, item=msgspec.structs.replace(custom, input=""))),
                self._frame(w.CustomInputDelta(item_id=item_id, output_index=index, delta=text)),
                self._frame(w.CustomInputDone(item_id=item_id, output_index=index, input=text)),
                self._frame(w.ItemDone(output_index=index, item=custom)),
            ]
        item_id = self._next_id("fc")
        done = w.FunctionCall(id=item_id, call_id=call.id, name=target.name, arguments=call.arguments, namespace=target.namespace)
        self.output.append(done)
        return [
            *frames,
            self._frame(w.ItemAdded(output_index=index, item=msgspec.structs.replace(done, arguments="", status="in_progress"))),
            self._frame(w.ArgumentsDelta(item_id=item_id, output_index=index, delta=call.arguments)),
            self._frame(w.ArgumentsDone(item_id=item_id, output_index=index, name=target.name, arguments=call.arguments)),
            self._frame(w.ItemDone(output_index=index, item=done)),
        ]

    def finish(self, end: m.RunFinished | m.RunFailed, completed_at: int, *, client_left: bool = False) -> list[Frame]:
        """The run's end: the open item closed, calls not seen yet added, the last event.
        ``client_left``: the client went away first (its own cancel: see ``outcome``)."""
        status, reason, error = outcome(end, client_left=client_left)
        frames = self._close("completed" if status == "completed" else "incomplete")
        if isinstance(end, m.RunFinished):
            for call in end.pending_tool_calls:
                frames += self._call(call)
        response = msgspec.structs.replace(
            self.snapshot(status), completed_at=completed_at, usage=_usage(end.usage), error=error,
            incomplete_details=w.IncompleteDetails(reason=reason) if status == "incomplete" else None,
        )
        self.final = response
        last: w.StreamEvent
        if status == "completed":
            last = w.Completed(response=response)
        elif status == "failed":
            last = w.Failed(response=response)
        else:  # incomplete, and cancelled (nobody reads it: the client left)
            last = w.Incomplete(response=response)
        return [*frames, self._frame(last)]


def outcome(
    end: m.RunFinished | m.RunFailed, *, client_left: bool = False
) -> tuple[w.ResponseStatus, Literal["max_output_tokens", "content_filter"] | None, w.ResponseError | None]:
    """A run's end as the response's status, ``incomplete_details.reason`` and ``error``.

    An answer that is not whole (``kernel.model.run_end_error``: a failure, or an interrupt
    by anyone, a drain, a shutdown or a timeout) is ``failed`` with the reason as its
    error — never ``completed``; the API's ``incomplete`` reasons are only about the
    model's own stops (``max_output_tokens``, ``content_filter``), and the SDKs accept no
    other. The one silent end is the client's own cancel: it left, and its response is
    recorded as ``cancelled``."""
    error = m.run_end_error(end)
    if error is not None:
        if client_left and isinstance(end, m.RunFinished) and end.interrupt_cause in (None, "client"):
            return "cancelled", None, None
        return "failed", None, w.ResponseError(code=_ERROR_CODES.get(error.code, "server_error"), message=error.message)
    assert isinstance(end, m.RunFinished)  # every failed run has its error
    if end.stop_reason == "max_tokens":
        return "incomplete", "max_output_tokens", None
    if end.stop_reason == "refusal":
        return "incomplete", "content_filter", None
    if end.stop_reason in ("tool_iterations", "turn_limit"):
        return "incomplete", None, None
    return "completed", None, None


def encode(value: w.Response | w.Deleted) -> bytes:
    return _encode(value)
