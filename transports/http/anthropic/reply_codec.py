"""Sans-IO codec of Anthropic's Messages API, answers out: a run's events -> one
``message`` or the stream's events, exactly as Anthropic sends them; tool ids and
thinking signatures, which go out here and come back in the next request.

Tool ids: Anthropic's clients replay only ids matching ``^[A-Za-z0-9_-]+$``; an upstream
id that does not (``call:1``, ``fc.2/x``) goes out as ``gwid_`` + its base64url, and comes
back to the upstream as it was — no table, so any instance of the gateway reads it.

Thinking signatures: ``gw1.<key id>.<HMAC-SHA256 of the text>`` under the gateway's
signing key. A replayed block whose key id is this gateway's but whose MAC does not match
was edited, and is refused; any other signature (Anthropic's, another gateway's, an old
key's) is the client's own record and passes untouched.

Pure; never raises on the kernel's events.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from kernel import decode_json
from kernel import model as m

from .wire import (
    AnthropicError,
    Block,
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    InputJsonDelta,
    Message,
    MessageDelta,
    MessageStart,
    MessageStop,
    Ping,
    SignatureDelta,
    StopDelta,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
    Usage,
)

_encode = msgspec.json.encode

# ---------------------------------------------------------------- tool ids

SAFE_ID = re.compile(r"^[A-Za-z0-9_-]+$")
MAPPED_ID = "gwid_"


def client_tool_id(upstream_id: str) -> str:
    """The id a client sees for an upstream tool call id (unchanged when it is safe)."""
    if SAFE_ID.match(upstream_id) and not upstream_id.startswith(MAPPED_ID):
        return upstream_id
    return MAPPED_ID + base64.urlsafe_b64encode(upstream_id.encode()).rstrip(b"=").decode()


def upstream_tool_id(client_id: str) -> str:
    """The inverse of :func:`client_tool_id` (an id it never made is returned as it is)."""
    if not client_id.startswith(MAPPED_ID):
        return client_id
    encoded = client_id[len(MAPPED_ID) :]
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, ValueError):
        return client_id


# ---------------------------------------------------------------- thinking signatures

SIGNATURE_VERSION = "gw1"


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"gateway thinking key id:" + key).hexdigest()[:12]


def sign_thinking(key: bytes, text: str) -> str:
    mac = hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION}.{_key_id(key)}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


class SignatureCheck(enum.Enum):
    OURS = "ours"
    #: This gateway's key id with a MAC that does not match the text: edited.
    FORGED = "forged"
    #: Not signed by this gateway's current key: the client's own record.
    FOREIGN = "foreign"


def check_signature(key: bytes, text: str, signature: str) -> SignatureCheck:
    version, _, rest = signature.partition(".")
    key_id, _, _ = rest.partition(".")
    if version != SIGNATURE_VERSION or key_id != _key_id(key):
        return SignatureCheck.FOREIGN
    return SignatureCheck.OURS if hmac.compare_digest(signature, sign_thinking(key, text)) else SignatureCheck.FORGED


# ---------------------------------------------------------------- answers

STOP_REASONS: dict[str, str] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
    "tool_calls": "tool_use",
    # The gateway's own tool loop stopped at its limit: cut short, as OpenAI's "length" says.
    # Not "pause_turn": a client resumes that by sending the conversation with the paused
    # assistant turn last, which this gateway cannot continue (no prefill).
    "tool_iterations": "max_tokens",
    "turn_limit": "max_tokens",
}

#: The events that become answer content. A stream sends its headers at the first of
#: them (or at the run's end), so that a failure before it keeps its HTTP status.
OUTPUT = (m.TextDelta, m.ReasoningDelta)

#: The keep-alive event of a quiet stream.
PING = _encode(Ping())


def stop_reason(finished: m.RunFinished, client_calls: Sequence[m.ToolCall]) -> str:
    return "tool_use" if client_calls else STOP_REASONS.get(finished.stop_reason, "end_turn")


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments as the ``input`` object (``{}`` for anything else: Anthropic's
    clients take only an object)."""
    try:
        value = decode_json(arguments)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def usage_of(usage: m.Usage, estimate: int) -> Usage:
    """The run's usage; the estimate stands in when the upstream counted no input."""
    return Usage(input_tokens=usage.input_tokens or estimate, output_tokens=usage.output_tokens)


def failed_before_output(end: m.RunFinished | m.RunFailed | None, events: Sequence[m.Event]) -> m.ErrorInfo | None:
    """Why an unfinished-looking run failed before any content: then a stream whose headers
    are not sent yet answers with the failure's real HTTP status."""
    if end is None or any(isinstance(e, OUTPUT) for e in events):
        return None
    return m.run_end_error(end)


def message(
    *, message_id: str, model: str, finished: m.RunFinished, events: Sequence[m.Event], key: bytes,
    show_thinking: bool, input_estimate: int,
) -> Message:
    """One non-stream answer: thinking (signed), text, then the client's tool calls."""
    content: list[Block] = []
    reasoning = "".join(e.text for e in events if isinstance(e, m.ReasoningDelta))
    if reasoning and show_thinking:
        content.append(ThinkingBlock(thinking=reasoning, signature=sign_thinking(key, reasoning)))
    if finished.text or not finished.pending_tool_calls:
        content.append(TextBlock(text=finished.text))
    for call in finished.pending_tool_calls:
        content.append(ToolUseBlock(id=client_tool_id(call.id), name=call.name, input=tool_input(call.arguments)))
    return Message(
        id=message_id, role="assistant", model=model, content=content,
        stop_reason=stop_reason(finished, finished.pending_tool_calls), stop_sequence=None,
        usage=usage_of(finished.usage, input_estimate),
    )


Frame = tuple[str, bytes]


class StreamEncoder:
    """Kernel events of one run -> the stream's ``(event name, JSON)`` frames.

    Content blocks open as the content changes kind (reasoning, text) and close before the
    next; a thinking block gets its signature just before its stop; the client's tool calls
    are ``tool_use`` blocks whose input arrives as one ``input_json_delta`` (Claude Code
    builds the input from those fragments only)."""

    def __init__(self, *, message_id: str, model: str, key: bytes, show_thinking: bool, input_estimate: int) -> None:
        self.message_id = message_id
        self.model = model
        self.key = key
        self.show_thinking = show_thinking
        self.input_estimate = input_estimate
        self._index = -1
        self._open: str | None = None  # "text" | "thinking"
        self._thinking: list[str] = []

    @staticmethod
    def _frame(event: Any) -> Frame:
        payload = _encode(event)
        return event.__struct_config__.tag, payload

    def opening(self) -> list[Frame]:
        start = Message(
            id=self.message_id, role="assistant", model=self.model, content=[], stop_reason=None, stop_sequence=None,
            usage=Usage(input_tokens=self.input_estimate, output_tokens=0),
        )
        return [self._frame(MessageStart(message=start))]

    def _close(self) -> list[Frame]:
        frames: list[Frame] = []
        if self._open == "thinking":
            signature = sign_thinking(self.key, "".join(self._thinking))
            frames.append(self._frame(ContentBlockDelta(index=self._index, delta=SignatureDelta(signature=signature))))
            self._thinking = []
        if self._open is not None:
            frames.append(self._frame(ContentBlockStop(index=self._index)))
        self._open = None
        return frames

    def _start(self, block: Block, kind: str | None) -> list[Frame]:
        frames = self._close()
        self._index += 1
        self._open = kind
        frames.append(self._frame(ContentBlockStart(index=self._index, content_block=block)))
        return frames

    def event(self, event: m.Event) -> list[Frame]:
        if isinstance(event, m.TextDelta) and event.text:
            frames = self._start(TextBlock(text=""), "text") if self._open != "text" else []
            frames.append(self._frame(ContentBlockDelta(index=self._index, delta=TextDelta(text=event.text))))
            return frames
        if isinstance(event, m.ReasoningDelta) and event.text and self.show_thinking:
            frames = self._start(ThinkingBlock(thinking="", signature=""), "thinking") if self._open != "thinking" else []
            self._thinking.append(event.text)
            frames.append(self._frame(ContentBlockDelta(index=self._index, delta=ThinkingDelta(thinking=event.text))))
            return frames
        return []

    def closing(self, finished: m.RunFinished) -> list[Frame]:
        """The end of a whole answer (the caller checked :func:`kernel.model.run_end_error`)."""
        calls = finished.pending_tool_calls
        frames: list[Frame] = []
        if self._index < 0 and not calls:  # an empty answer still has its one text block
            frames += self._start(TextBlock(text=""), "text")
        for call in calls:
            frames += self._start(ToolUseBlock(id=client_tool_id(call.id), name=call.name, input={}), None)
            frames.append(self._frame(ContentBlockDelta(index=self._index, delta=InputJsonDelta(partial_json=_encode(tool_input(call.arguments)).decode()))))
            frames.append(self._frame(ContentBlockStop(index=self._index)))
        frames += self._close()
        delta = MessageDelta(
            delta=StopDelta(stop_reason=stop_reason(finished, calls), stop_sequence=None),
            usage=usage_of(finished.usage, self.input_estimate),
        )
        frames.append(self._frame(delta))
        frames.append(self._frame(MessageStop()))
        return frames

    def failure(self, error: AnthropicError) -> list[Frame]:
        """A failure after the headers: ``event: error`` with the error body; no
        ``message_stop`` follows, so no client takes the partial answer for a whole one."""
        return [("error", _encode(error.body()))]
