"""A fake OpenAI-compatible server for tests and benchmarks.

A real hypercorn server (raw ASGI, no framework) on ``127.0.0.1`` with an
ephemeral port, on whichever anyio backend is running (asyncio or trio)::

    from tests.fakes.openai_server import Reply, ToolCallScript, fake_openai_server

    async with fake_openai_server([Reply(text="Hello world", chunks=2)]) as server:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.base_url)
        ...
        assert server.requests[0]["stream_options"] == {"include_usage": True}

Scripting
---------
``script`` is a list of :class:`Reply` objects. Each ``POST /v1/chat/completions``
consumes the next one; the last one repeats (so ``[Reply.echo()]`` echoes forever).
``server.script`` can be replaced between requests. A :class:`Reply` describes:

* a streamed answer: ``text`` split into ``chunks`` pieces, ``reasoning`` streamed
  first as ``reasoning_content`` deltas (or ``reasoning`` with
  ``reasoning_field="reasoning"``), ``tool_calls`` (:class:`ToolCallScript`: id and
  name in the first fragment, the arguments split over ``pieces`` fragments, several
  calls by index), ``finish_reason`` (default ``stop`` / ``tool_calls``), and a final
  usage chunk when the request asks for ``stream_options.include_usage``
  (``usage=(prompt, completion)``; by default counted in words), ``delay_s`` before
  every event up to the finish reason's (a schedule: event ``n`` is due ``n * delay_s``
  after the first, however long sending took); the usage chunk and ``[DONE]`` follow the
  finish reason at once, as real servers send them (the model produced nothing more: its
  stop token is the last step that takes time). Non-streaming requests get the same
  answer as one JSON completion; the faults below that act after N events break it
  part-way through its body instead.
* failures: ``Reply.error(status, message, retry_after=...)`` (an HTTP error with an
  OpenAI-style error body, e.g. 429 with ``Retry-After``, 500),
  ``Reply.cut(after=N)`` (the connection drops after N events, no terminating chunk,
  no ``[DONE]``; ``mode="eof"`` ends the body cleanly but still without a finish
  reason or ``[DONE]``), ``Reply.stall(seconds, after=None)`` (sleep before the
  response headers, or after N events), ``Reply.malformed(after=N)`` (an invalid JSON
  ``data:`` line after N events).
* ``echo(words_per_s=None, repeat=1)`` (same as ``Reply.echo_reply(...)``): streams the
  last user message (``repeat`` times) back in word chunks, paced at ``words_per_s`` when
  given, for benchmarks and smoke tests.
* ``openai_framing=True`` frames any of these as api.openai.com does: a stream opens with a
  chunk that carries the role alone (``{"role": "assistant", "content": "", "refusal":
  null}``), sent with the headers, before the schedule of the deltas; every chunk and a whole
  answer carry ``service_tier``, ``system_fingerprint`` and ``usage`` (``null`` until the
  usage chunk), a whole answer's message ``refusal`` and ``annotations``. The benchmarks'
  upstream uses it, so that a client calling it directly parses what it would parse from
  OpenAI (the role chunk alone costs the ``openai`` SDK a model build).
* Like a real model, every reply honours what the request demands (``_as_a_model_would``):
  a forced ``tool_choice`` calls that function (``"required"``: the first tool) with a
  minimal instance of its parameters unless the script calls a tool anyway; ``"none"``
  drops the scripted calls; ``response_format`` turns a text answer into a JSON instance
  of the schema (``json_schema``) or an object (``json_object``). To refuse a format as some
  upstreams do, script ``Reply.error(400, "response_format ... not supported")``.
* ``Reply.prompted()``: what the conversation asks for (``_as_prompted``), for real agents
  (Claude Code, Codex) that run their own tools: a last user message holding
  ``TOOL_CALL <name> <json>`` gets a call of tool ``<name>`` with exactly those arguments; a
  conversation ending with a tool result gets ``The tool returned: <its output>``; anything
  else is echoed.
* ``Reply.raw(pieces, content_type=..., headers=...)``: a 200 answer whose body is exactly these bytes,
  one write each, whatever the request asked for (line ends, odd events, an error event
  inside the stream, a JSON answer to a streamed request).

"Events" are the ``data:`` lines of the SSE body, counted from the first delta.

What the server records
-----------------------
``server.requests`` (JSON bodies of chat requests, in order), ``server.headers``
(their headers, lower-cased), ``server.client_ports`` (the client's port of each chat
request: one port for two requests means the connection was reused),
``server.completed`` (responses sent to the end, error responses included; cut ones never),
``server.disconnects`` (a :class:`Disconnect` each time a client went away before
its response was complete: proof that a cancelled consumer closed the upstream
response), ``server.connections_closed`` (their count) and
``await server.wait_for_disconnect(timeout)``.

``GET /v1/models`` lists ``models``. With ``api_key=...`` every request must carry
``Authorization: Bearer <api_key>``; otherwise it gets a 401 whose message quotes the
key it received in full (the worst case, to check that clients redact it).
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import anyio
import msgspec
import sniffio
from hypercorn.config import Config

from plugins.providers.schema_instance import instance

__all__ = ["Disconnect", "FakeOpenAIServer", "Reply", "ToolCallScript", "echo", "fake_openai_server"]

log = logging.getLogger(__name__)

_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_denied",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


#: The fields api.openai.com adds to every chunk and whole answer (``openai_framing``).
OPENAI_FRAMING: dict[str, Any] = {"service_tier": "default", "system_fingerprint": "fp_fake0000"}


@dataclass(frozen=True)
class ToolCallScript:
    """One tool call the fake model makes; ``arguments`` is sent in ``pieces`` fragments."""

    name: str
    arguments: str = "{}"
    id: str | None = None  # default: call_<index>
    pieces: int = 3


@dataclass(frozen=True)
class Reply:
    """How the fake answers one chat-completions request. See the module docstring."""

    text: str = "Hello from the fake model."
    chunks: int = 3
    delay_s: float = 0.0
    reasoning: str = ""
    reasoning_chunks: int = 2
    reasoning_field: str = "reasoning_content"
    tool_calls: Sequence[ToolCallScript] = ()
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None
    # Failures.
    status: int = 200
    error_message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    cut_mode: Literal["drop", "eof"] = "drop"
    stall_s: float = 0.0
    stall_after: int | None = None
    malformed_after: int | None = None
    # Echo mode.
    echo: bool = False
    words_per_s: float | None = None
    repeat: int = 1
    # Prompted mode (``Reply.prompted()``): the tool call, or the answer, the prompt asks for.
    from_prompt: bool = False
    # A body sent as given.
    raw_pieces: Sequence[bytes] | None = None
    content_type: str = "text/event-stream; charset=utf-8"
    # api.openai.com's framing (see the module docstring).
    openai_framing: bool = False

    # ------------------------------------------------------------ constructors

    @classmethod
    def error(cls, status: int, message: str = "", *, retry_after: float | str | None = None, headers: dict[str, str] | None = None) -> Reply:
        """An HTTP error with an OpenAI-style ``{"error": {...}}`` body."""
        hdrs = dict(headers or {})
        if retry_after is not None:
            hdrs["retry-after"] = str(retry_after)
        return cls(status=status, error_message=message or f"fake upstream error {status}", headers=hdrs)

    @classmethod
    def rate_limited(cls, retry_after: float | str = 1, message: str = "Rate limit reached, slow down") -> Reply:
        return cls.error(429, message, retry_after=retry_after)

    @classmethod
    def cut(cls, after: int = 2, *, text: str = "Hello there, this will be cut", chunks: int = 5, mode: Literal["drop", "eof"] = "drop") -> Reply:
        """Drop the connection (or end the body, ``mode="eof"``) after ``after`` events, without [DONE]."""
        return cls(text=text, chunks=chunks, cut_after=after, cut_mode=mode)

    @classmethod
    def stall(cls, seconds: float = 60.0, *, after: int | None = None, text: str = "slow") -> Reply:
        """Sleep ``seconds`` before the response starts (``after=None``) or after ``after`` events."""
        return cls(text=text, stall_s=seconds, stall_after=after)

    @classmethod
    def malformed(cls, after: int = 1, *, text: str = "Hello there", chunks: int = 3) -> Reply:
        """Send a ``data:`` line that is not JSON after ``after`` events."""
        return cls(text=text, chunks=chunks, malformed_after=after)

    @classmethod
    def raw(cls, pieces: Sequence[bytes], *, content_type: str = "text/event-stream; charset=utf-8", headers: dict[str, str] | None = None) -> Reply:
        """Answer 200 with exactly these bytes as the body, one write per piece."""
        return cls(raw_pieces=list(pieces), content_type=content_type, headers=dict(headers or {}))

    @classmethod
    def echo_reply(cls, words_per_s: float | None = None, *, repeat: int = 1, openai_framing: bool = False) -> Reply:
        """Stream the last user message back in word chunks (``words_per_s`` paces it)."""
        return cls(echo=True, words_per_s=words_per_s, repeat=repeat, openai_framing=openai_framing)

    @classmethod
    def prompted(cls) -> Reply:
        """Answer what the conversation asks for (see :func:`_as_prompted`): one reply that
        drives a real agent's tool round trip, however many requests it makes."""
        return cls(from_prompt=True)


# ``Reply.echo`` is a field (bool); the constructor is exposed as ``Reply.echo_reply``
# and, for convenience, as the module-level ``echo``.
def echo(words_per_s: float | None = None, *, repeat: int = 1, openai_framing: bool = False) -> Reply:
    return Reply.echo_reply(words_per_s, repeat=repeat, openai_framing=openai_framing)


@dataclass(frozen=True)
class Disconnect:
    """A client went away before its response was complete."""

    request_index: int
    at: float  # time.monotonic()
    events_sent: int


# ---------------------------------------------------------------- helpers


def split_even(text: str, n: int) -> list[str]:
    """``text`` in at most ``n`` non-empty pieces of near-equal length."""
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size, extra = divmod(len(text), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text) or ([text] if text else [])


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _count_words(body: dict[str, Any]) -> int:
    return sum(len(_message_text(m).split()) for m in body.get("messages", []) if isinstance(m, dict))


class _Plan(msgspec.Struct):
    deltas: list[dict[str, Any]]
    text: str
    reasoning: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    usage: dict[str, int]
    delay_s: float


def _as_a_model_would(reply: Reply, body: dict[str, Any]) -> Reply:
    """The scripted reply, bent to what the request demands, as a real model bends:
    a forced ``tool_choice`` (the named function, or the first tool for ``"required"``) is
    called with a minimal instance of its parameters when the script calls no tool; with
    ``"none"`` no tool is called; a ``response_format`` makes a text answer a JSON instance
    of its schema (``json_schema``) or a JSON object (``json_object``)."""
    choice = body.get("tool_choice")
    tools = [t.get("function") or {} for t in body.get("tools") or [] if isinstance(t, dict)]
    if choice == "none" and reply.tool_calls:
        reply = replace(reply, tool_calls=(), finish_reason=None)
    forced = None
    if isinstance(choice, dict):
        forced = next((t for t in tools if t.get("name") == (choice.get("function") or {}).get("name")), None)
    elif choice == "required" and tools:
        forced = tools[0]
    if forced is not None and not reply.tool_calls:
        arguments = _encode(instance(forced.get("parameters") or {"type": "object"})).decode()
        return replace(reply, text="", echo=False, tool_calls=(ToolCallScript(name=str(forced.get("name")), arguments=arguments),), finish_reason=None)
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and not reply.tool_calls:
        if fmt.get("type") == "json_schema":
            text = _encode(instance((fmt.get("json_schema") or {}).get("schema") or {})).decode()
        elif fmt.get("type") == "json_object":
            text = _encode({"answer": reply.text}).decode()
        else:
            return reply
        return replace(reply, text=text, echo=False)
    return reply


#: What a prompted reply's prompt says to call a tool with exact arguments.
TOOL_CALL = re.compile(r"TOOL_CALL\s+([A-Za-z0-9_.-]+)\s+(\{.*\})\s*$", re.S)


def _as_prompted(reply: Reply, body: dict[str, Any]) -> Reply:
    """A prompted reply, made concrete for this request: a tool result last -> an answer
    quoting it; a user message ending ``TOOL_CALL <name> <json>`` -> that call, the JSON
    given as it is (whatever wraps the prompt, as agents add reminders before it); else echo."""
    if not reply.from_prompt:
        return reply
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return replace(reply, from_prompt=False, text=f"The tool returned: {_message_text(last).strip()}")
    asked = TOOL_CALL.search(_message_text(last)) if last.get("role") == "user" else None
    if asked is not None:
        return replace(reply, from_prompt=False, text="", tool_calls=(ToolCallScript(name=asked.group(1), arguments=asked.group(2)),))
    return replace(reply, from_prompt=False, echo=True)


def _plan(reply: Reply, body: dict[str, Any]) -> _Plan:
    reply = _as_a_model_would(_as_prompted(reply, body), body)
    deltas: list[dict[str, Any]] = []
    delay = reply.delay_s
    if reply.echo:
        last = next((m for m in reversed(body.get("messages", [])) if isinstance(m, dict) and m.get("role") == "user"), {})
        text = " ".join([_message_text(last)] * max(1, reply.repeat))
        text_pieces = _words(text)
        if reply.words_per_s:
            delay = 1.0 / reply.words_per_s
        reasoning_pieces: list[str] = []
        reasoning = ""
    else:
        text = reply.text
        text_pieces = split_even(text, reply.chunks)
        reasoning = reply.reasoning
        reasoning_pieces = split_even(reasoning, reply.reasoning_chunks)
    for piece in reasoning_pieces:
        deltas.append({reply.reasoning_field: piece})
    for piece in text_pieces:
        deltas.append({"content": piece})
    calls: list[dict[str, Any]] = []
    for index, call in enumerate(() if reply.echo else reply.tool_calls):
        call_id = call.id or f"call_{index}"
        calls.append({"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}})
        deltas.append(
            {"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": ""}}]}
        )
        for piece in split_even(call.arguments, call.pieces):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    if not reply.openai_framing:  # (with it, the role goes in a chunk of its own, sent with the headers)
        deltas[:1] = [{"role": "assistant", **(deltas[0] if deltas else {"content": ""})}]
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    if reply.usage is not None:
        prompt, completion = reply.usage
    else:
        prompt = _count_words(body)
        completion = len(text.split()) + len(reasoning.split()) + sum(len(c["function"]["arguments"].split()) for c in calls)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return _Plan(deltas, text, reasoning, calls, finish, usage, delay)


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


# ---------------------------------------------------------------- the server


class FakeOpenAIServer:
    """The ASGI app and what it recorded. Use :func:`fake_openai_server` to run it."""

    def __init__(self, script: Sequence[Reply] | None = None, *, api_key: str | None = None, models: Sequence[str] = ("fake-model",)) -> None:
        self.script: list[Reply] = list(script or [Reply()])
        self.api_key = api_key
        self.models = list(models)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.client_ports: list[int] = []
        #: Told the time (``time.perf_counter``, which every process on a machine shares) each HTTP
        #: request reaches the app, before its body is read: a benchmark's split of a proxied
        #: request's time into the way there and the way back (tests/bench/diag_arrivals.py).
        self.on_request: Callable[[float], None] | None = None
        self.disconnects: list[Disconnect] = []
        self.completed = 0
        self.port = 0
        self._active: set[anyio.CancelScope] = set()
        self._counter = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def connections_closed(self) -> int:
        """How many clients went away before their response was complete."""
        return len(self.disconnects)

    async def wait_for_disconnect(self, timeout: float = 2.0, *, request_index: int | None = None) -> Disconnect:
        """Wait until the client of ``request_index`` (default: the latest request) went away early.

        Raises TimeoutError when it did not within ``timeout`` seconds.
        """
        with anyio.fail_after(timeout):
            while True:
                index = len(self.requests) - 1 if request_index is None else request_index
                for seen in self.disconnects:
                    if seen.request_index == index:
                        return seen
                await anyio.sleep(0.005)

    def next_reply(self) -> Reply:
        index = len(self.requests) - 1
        return self.script[min(index, len(self.script) - 1)]

    # ------------------------------------------------------------ ASGI

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if self.on_request is not None:
            self.on_request(time.perf_counter())
        raw = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"].rstrip("/")
        method = scope["method"]
        if self.api_key is not None:
            auth = headers.get("authorization", "")
            if auth != f"Bearer {self.api_key}":
                given = auth.removeprefix("Bearer ")
                await _send_json(send, 401, _error_body(401, f"Incorrect API key provided: {given}.", code="invalid_api_key"))
                return
        if path == "/v1/models" and method == "GET":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
            await _send_json(send, 200, {"object": "list", "data": data})
            return
        if path != "/v1/chat/completions":
            await _send_json(send, 404, _error_body(404, f"no route for {method} {scope['path']}"))
            return
        if method != "POST":
            await _send_json(send, 405, _error_body(405, "method not allowed"))
            return
        try:
            body = _decode(bytes(raw))
            if not isinstance(body, dict):
                raise ValueError("body is not an object")
        except (msgspec.DecodeError, ValueError) as exc:
            await _send_json(send, 400, _error_body(400, f"invalid JSON body: {exc}"))
            return
        self.requests.append(body)
        self.headers.append(headers)
        self.client_ports.append(int((scope.get("client") or ("", 0))[1]))
        index = len(self.requests) - 1
        reply = self.next_reply()
        await self._respond(index, reply, body, receive, send)

    async def _respond(self, index: int, reply: Reply, body: dict[str, Any], receive: Any, send: Any) -> None:
        progress: dict[str, Any] = {"events": 0, "done": False, "cut": False}
        async with anyio.create_task_group() as tg:
            self._active.add(tg.cancel_scope)

            async def watch() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        if not progress["done"] and not progress["cut"]:
                            self.disconnects.append(Disconnect(index, time.monotonic(), progress["events"]))
                            log.debug("client disconnected from request %d after %d events", index, progress["events"])
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watch)
            try:
                await self._answer(reply, body, send, progress)
            finally:
                self._active.discard(tg.cancel_scope)
                tg.cancel_scope.cancel()

    async def _answer(self, reply: Reply, body: dict[str, Any], send: Any, progress: dict[str, Any]) -> None:
        if reply.stall_s and reply.stall_after is None:
            await anyio.sleep(reply.stall_s)
        if reply.status >= 400:
            progress["done"] = True
            self.completed += 1
            await _send_json(send, reply.status, _error_body(reply.status, reply.error_message), reply.headers)
            return
        if reply.raw_pieces is not None:
            raw_headers = [(b"content-type", reply.content_type.encode("latin-1"))]
            raw_headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()]
            await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
            for piece in reply.raw_pieces:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            progress["done"] = True
            self.completed += 1
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        plan = _plan(reply, body)
        model = str(body.get("model", "fake-model"))
        self._counter += 1
        completion_id = f"chatcmpl-fake-{self._counter}"
        created = int(time.time())
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": plan.text or None}
            if reply.openai_framing:
                message |= {"refusal": None, "annotations": []}
            if plan.reasoning:
                message[reply.reasoning_field] = plan.reasoning
            if plan.tool_calls:
                message["tool_calls"] = plan.tool_calls
            completion = {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": plan.finish_reason, "logprobs": None}],
                "usage": plan.usage,
            }
            if reply.openai_framing:
                completion |= OPENAI_FRAMING
            if reply.cut_after is None and reply.stall_after is None and reply.malformed_after is None:
                progress["done"] = True
                self.completed += 1
                await _send_json(send, 200, completion, reply.headers)
                return
            await self._broken_completion(reply, _encode(completion), send, progress)
            return
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
            payload: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }
            if reply.openai_framing:
                payload |= OPENAI_FRAMING | {"usage": usage}
            elif usage is not None:
                payload["usage"] = usage
            return b"data: " + _encode(payload) + b"\n\n"

        if reply.openai_framing:
            await send({"type": "http.response.body", "body": chunk({"role": "assistant", "content": "", "refusal": None}), "more_body": True})
        events = [chunk(d) for d in plan.deltas] + [chunk({}, plan.finish_reason)]
        paced = len(events)  # what follows the finish reason is not paced: a model's last step is its stop token
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(chunk(None, usage=plan.usage))
        events.append(b"data: [DONE]\n\n")
        due = anyio.current_time()  # the pacing is a schedule: time spent sending does not add up
        for n, event in enumerate(events):
            if reply.stall_s and reply.stall_after == n:
                await anyio.sleep(reply.stall_s)
            if reply.malformed_after == n:
                await send({"type": "http.response.body", "body": b'data: {"id": "broken", "choices": [\n\n', "more_body": True})
            if reply.cut_after == n:
                # Not "done": a cut response never counts as completed.
                progress["cut"] = True
                if reply.cut_mode == "eof":
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                # "drop": return without finishing the body; hypercorn closes the
                # connection without the terminating chunk.
                return
            if plan.delay_s and n < paced:
                due += plan.delay_s
                await anyio.sleep(max(0.0, due - anyio.current_time()))
            await send({"type": "http.response.body", "body": event, "more_body": True})
            progress["events"] = n + 1
        progress["done"] = True
        self.completed += 1
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _broken_completion(self, reply: Reply, data: bytes, send: Any, progress: dict[str, Any]) -> None:
        """A JSON answer that fails part-way, as the stream faults fail a stream: half of it is
        sent, then the connection drops (or the body ends), the server stalls, or garbage follows."""
        headers = [(b"content-type", b"application/json")]
        headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data[: len(data) // 2], "more_body": True})
        if reply.stall_after is not None:
            await anyio.sleep(reply.stall_s)
        if reply.malformed_after is not None:
            await send({"type": "http.response.body", "body": b'"broken": [', "more_body": False})
            return
        progress["cut"] = True
        if reply.cut_mode == "eof":
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def cancel_active(self) -> None:
        for scope in list(self._active):
            scope.cancel()


def _error_body(status: int, message: str, *, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _STATUS_TYPES.get(status, "server_error"), "param": None, "code": code}}


async def _send_json(send: Any, status: int, payload: Any, extra_headers: dict[str, str] | None = None) -> None:
    data = _encode(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (extra_headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


class fake_openai_server:
    """Run a :class:`FakeOpenAIServer` on 127.0.0.1 (ephemeral port) for the ``async with`` block.

    ``fake_openai_server(script=None, *, api_key=None, models=("fake-model",))``
    yields the server (``.base_url``, ``.requests``, ``.disconnects``, ...). Works on
    asyncio and trio; exceptions from the block propagate unwrapped.
    """

    def __init__(self, script: Sequence[Reply] | None = None, *, api_key: str | None = None, models: Sequence[str] = ("fake-model",), graceful_timeout_s: float = 1.0) -> None:
        self.server = FakeOpenAIServer(script, api_key=api_key, models=models)
        self._graceful_timeout_s = graceful_timeout_s
        self._tg: Any = None
        self._shutdown: anyio.Event | None = None
        self._stopped: anyio.Event | None = None

    async def __aenter__(self) -> FakeOpenAIServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
            self.server.port = sock.getsockname()[1]
        except BaseException:
            sock.close()
            raise
        config = Config()
        config.bind = [f"fd://{sock.detach()}"]
        config.accesslog = None
        config.errorlog = logging.getLogger(f"{__name__}.hypercorn")
        config.graceful_timeout = self._graceful_timeout_s
        config.backlog = 128
        if sniffio.current_async_library() == "trio":
            from hypercorn.trio import serve
        else:
            from hypercorn.asyncio import serve  # type: ignore[assignment]
        self._shutdown = anyio.Event()
        self._stopped = anyio.Event()
        shutdown, stopped = self._shutdown, self._stopped

        async def run() -> None:
            try:
                await serve(self.server, config, shutdown_trigger=shutdown.wait)  # type: ignore[arg-type]
            finally:
                stopped.set()

        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(run)
        return self.server

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._tg is not None and self._shutdown is not None and self._stopped is not None
        self.server.cancel_active()
        self._shutdown.set()
        with anyio.move_on_after(self._graceful_timeout_s + 1.0, shield=True):
            await self._stopped.wait()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
