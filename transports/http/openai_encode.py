"""Sans-IO encoding of OpenAI-compatible answers: kernel run events -> exactly OpenAI's
``chat.completion.chunk`` SSE frames or one ``chat.completion`` body, and the model list.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from kernel import model as m
from transports.shared import format_sse

from .openai_codec import OpenAIError

_encode = msgspec.json.encode
DONE_FRAME = b"data: [DONE]\n\n"

# ---------------------------------------------------------------- response shapes

FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "interrupted": "stop",
    "max_tokens": "length",
    "tool_iterations": "length",
    "turn_limit": "length",
    "refusal": "content_filter",
}


class OutUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def usage_of(usage: m.Usage) -> OutUsage:
    return OutUsage(prompt_tokens=usage.input_tokens, completion_tokens=usage.output_tokens, total_tokens=usage.total_tokens)


class OutFunction(msgspec.Struct, kw_only=True):
    name: str
    arguments: str


class OutToolCall(msgspec.Struct, kw_only=True):
    id: str
    type: str
    function: OutFunction


class OutToolCallDelta(msgspec.Struct, kw_only=True):
    index: int
    id: str
    type: str
    function: OutFunction


class OutMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: str
    content: str | None
    refusal: None
    tool_calls: list[OutToolCall] | None = None
    reasoning_content: str | None = None


class OutChoice(msgspec.Struct, kw_only=True):
    index: int
    message: OutMessage
    logprobs: None
    finish_reason: str


class ChatCompletion(msgspec.Struct, kw_only=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[OutChoice]
    usage: OutUsage
    system_fingerprint: None = None


class OutDelta(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[OutToolCallDelta] | None = None


class OutChunkChoice(msgspec.Struct, kw_only=True):
    index: int
    delta: OutDelta
    logprobs: None
    finish_reason: str | None


class Chunk(msgspec.Struct, kw_only=True):
    id: str
    object: str
    created: int
    model: str
    system_fingerprint: None
    choices: list[OutChunkChoice]


class UsageChunk(Chunk, kw_only=True):
    """With ``stream_options.include_usage`` every chunk carries ``usage`` (null but the last)."""

    usage: OutUsage | None


def _tool_calls(calls: Sequence[m.ToolCall]) -> list[OutToolCall]:
    return [OutToolCall(id=c.id, type="function", function=OutFunction(name=c.name, arguments=c.arguments)) for c in calls]


def completion(
    *, completion_id: str, created: int, model: str, finished: m.RunFinished, reasoning: str, client_calls: Sequence[m.ToolCall]
) -> ChatCompletion:
    """One non-streamed answer: the run's text, the client's tool calls if the model made any."""
    message = OutMessage(
        role="assistant",
        content=finished.text if finished.text or not client_calls else None,
        refusal=None,
        tool_calls=_tool_calls(client_calls) or None,
        reasoning_content=reasoning or None,
    )
    finish = "tool_calls" if client_calls else FINISH_REASONS.get(finished.stop_reason, "stop")
    return ChatCompletion(
        id=completion_id, object="chat.completion", created=created, model=model,
        choices=[OutChoice(index=0, message=message, logprobs=None, finish_reason=finish)],
        usage=usage_of(finished.usage),
    )


class ChunkEncoder:
    """Kernel events of one run -> ``chat.completion.chunk`` SSE frames."""

    def __init__(self, *, completion_id: str, created: int, model: str, include_usage: bool) -> None:
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.include_usage = include_usage

    def _frame(self, choices: list[OutChunkChoice], usage: OutUsage | None = None) -> bytes:
        common = {
            "id": self.completion_id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": None, "choices": choices,
        }
        chunk = UsageChunk(**common, usage=usage) if self.include_usage else Chunk(**common)  # type: ignore[arg-type]
        return format_sse(_encode(chunk))

    def _delta(self, delta: OutDelta, finish: str | None = None) -> bytes:
        return self._frame([OutChunkChoice(index=0, delta=delta, logprobs=None, finish_reason=finish)])

    def opening(self) -> bytes:
        return self._delta(OutDelta(role="assistant", content=""))

    def event(self, event: m.Event) -> bytes | None:
        if isinstance(event, m.TextDelta) and event.text:
            return self._delta(OutDelta(content=event.text))
        if isinstance(event, m.ReasoningDelta) and event.text:
            return self._delta(OutDelta(reasoning_content=event.text))
        return None

    def closing(self, finished: m.RunFinished, client_calls: Sequence[m.ToolCall]) -> list[bytes]:
        frames: list[bytes] = []
        if client_calls:
            deltas = [
                OutToolCallDelta(index=i, id=c.id, type="function", function=OutFunction(name=c.name, arguments=c.arguments))
                for i, c in enumerate(client_calls)
            ]
            frames.append(self._delta(OutDelta(tool_calls=deltas)))
            frames.append(self._delta(OutDelta(), "tool_calls"))
        else:
            frames.append(self._delta(OutDelta(), FINISH_REASONS.get(finished.stop_reason, "stop")))
        if self.include_usage:
            frames.append(self._frame([], usage_of(finished.usage)))
        frames.append(DONE_FRAME)
        return frames

    def failure(self, error: OpenAIError) -> bytes:
        """A failure after the stream started: the SDKs raise on a ``data: {"error": ...}`` frame."""
        return format_sse(_encode(error.body()))


# ---------------------------------------------------------------- models


class ModelInfo(msgspec.Struct, kw_only=True):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct, kw_only=True):
    object: str
    data: list[ModelInfo]


def model_list(agents: Sequence[m.AgentInfo], created: int) -> ModelList:
    """Every agent by name, then each provider model the agents use (pass-through names)."""
    data = [ModelInfo(id=a.name, object="model", created=created, owned_by="gateway") for a in agents]
    seen = {a.name for a in agents}
    for agent in agents:
        if agent.model and agent.model not in seen:
            seen.add(agent.model)
            data.append(ModelInfo(id=agent.model, object="model", created=created, owned_by=agent.provider or "gateway"))
    return ModelList(object="list", data=data)


def find_model(agents: Sequence[m.AgentInfo], created: int, model_id: str) -> ModelInfo | OpenAIError:
    for info in model_list(agents, created).data:
        if info.id == model_id:
            return info
    for agent in agents:
        if agent.id == model_id:
            return ModelInfo(id=agent.id, object="model", created=created, owned_by="gateway")
    return OpenAIError(
        status=404, message=f"The model '{model_id}' does not exist", param="model", code="model_not_found"
    )
