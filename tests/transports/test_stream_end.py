"""A streamed run's answer ends with its last event, in every SSE dialect: the ASGI message
that carries the run's end (OpenAI's ``[DONE]``, Responses' ``response.completed``,
Anthropic's ``message_stop``, the native ``run_finished``, AG-UI's ``RUN_FINISHED``,
OpenFang's ``done``, A2A's final status) also ends the response, so the client's stream is
over as soon as it has read the last event, not once the stream's keep-alive and client watch
have been stopped. An answer the upstream cut ends the same way, in its failure form.

The apps are called as ASGI applications, no socket: what is asserted is the message
sequence each one sends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from kernel import Kernel, ProviderError
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from transports.a2a.config import A2AConfig
from transports.a2a.server import A2AApp
from transports.agui import AguiApp, AguiConfig
from transports.http import HttpConfig
from transports.http.server import HttpApp
from transports.openfang.config import OpenFangConfig
from transports.openfang.server import build_app

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "hi"}]
A2A_MESSAGE = {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}


class Case(msgspec.Struct, frozen=True):
    path: str
    body: dict[str, Any]
    #: What the last message of a whole answer holds; and of one the upstream cut.
    whole_end: bytes
    cut_end: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    #: What only a whole answer says (a dialect may end a failure with its usual last event).
    whole_only: bytes = b""

    @property
    def completed(self) -> bytes:
        return self.whole_only or self.whole_end


def cases(agent_id: str) -> dict[str, Case]:
    return {
        "openai": Case("/v1/chat/completions", {"model": "default", "stream": True, "messages": USER}, b"data: [DONE]", b'data: {"error"'),
        "responses": Case("/v1/responses", {"model": "default", "stream": True, "input": "hi"}, b"event: response.completed", b"event: response.failed"),
        "anthropic": Case(
            "/v1/messages", {"model": "default", "stream": True, "max_tokens": 64, "messages": USER},
            b"event: message_stop", b"event: error", ((b"anthropic-version", b"2023-06-01"),),
        ),
        "native": Case("/v1/sessions/s/prompt", {"text": "hi"}, b"event: run_finished", b"event: run_failed", ((b"accept", b"text/event-stream"),)),
        "agui": Case(
            "/agui", {"threadId": "t", "runId": "r", "state": {}, "messages": [{"id": "m1", **USER[0]}], "tools": [], "context": [], "forwardedProps": {}},
            b'"type":"RUN_FINISHED"', b'"type":"RUN_ERROR"',
        ),
        # OpenFang ends a failure with its "done" too; A2A's final status is the failed one.
        "openfang": Case(f"/api/agents/{agent_id}/message/stream", {"message": "hi"}, b"event: done", b"event: error", whole_only=b'"phase":"done"'),
        "a2a": Case(
            "/", {"jsonrpc": "2.0", "id": "c", "method": "message/stream", "params": {"message": A2A_MESSAGE}},
            b'"final":true', b'"state":"failed"', whole_only=b'"state":"completed"',
        ),
    }


@asynccontextmanager
async def dialect_app(kernel: Kernel, dialect: str) -> AsyncIterator[Any]:
    if dialect in ("openai", "responses", "anthropic", "native"):
        if dialect == "native":
            await kernel.execute(m.OpenSession(session_id="s"))
        yield HttpApp(kernel, HttpConfig(requests_per_minute_per_ip=0, sse_keepalive_s=0.0))
    elif dialect == "agui":
        yield AguiApp(kernel, AguiConfig(sse_keepalive_s=0.0)).router
    elif dialect == "openfang":
        yield build_app(kernel, OpenFangConfig(sse_keepalive_s=0.0))
    else:
        a2a = A2AApp(kernel, A2AConfig(sse_keepalive_s=0.0))
        async with anyio.create_task_group() as tasks:
            await tasks.start(a2a.api.run)
            yield a2a.router
            tasks.cancel_scope.cancel()


async def response_bodies(app: Any, case: Case) -> list[dict[str, Any]]:
    """The body messages the app sends for one request (after a 200 start)."""
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": msgspec.json.encode(case.body), "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": case.path, "raw_path": case.path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *case.headers],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
    }
    with anyio.fail_after(10):
        await app(scope, receive, send)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200, sent[:2]
    return [message for message in sent[1:] if message["type"] == "http.response.body"]


DIALECTS = sorted(cases("x"))


async def answer(dialect: str, provider: ScriptedProvider) -> tuple[list[dict[str, Any]], Case]:
    async with running_kernel(provider) as kernel, dialect_app(kernel, dialect) as app:
        case = cases(kernel.settings.agents[0].agent_id())[dialect]
        return await response_bodies(app, case), case


def ends_the_response_last(messages: list[dict[str, Any]]) -> bool:
    return [message.get("more_body", False) for message in messages] == [True] * (len(messages) - 1) + [False]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("delay_s", [0.01, 0.0], ids=["streamed", "ready-at-once"])
async def test_the_message_with_the_runs_end_ends_the_response(dialect: str, delay_s: float) -> None:
    # Paced, the end comes in a batch of its own; at once, the first batch may hold the whole answer.
    messages, case = await answer(dialect, ScriptedProvider([text_turn("Hello", " there", " again")], delay_s=delay_s))
    assert ends_the_response_last(messages)
    assert case.whole_end in messages[-1]["body"] and case.completed in b"".join(message["body"] for message in messages)
    assert b"".join(message["body"] for message in messages).count(case.whole_end) == 1  # once


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_cut_answer_ends_the_response_with_its_failure(dialect: str) -> None:
    cut = ProviderError("the upstream dropped the connection", code="provider_error")
    messages, case = await answer(dialect, ScriptedProvider([[*text_turn("Hello")[:1], cut]], delay_s=0.01))
    assert ends_the_response_last(messages)
    assert case.cut_end in messages[-1]["body"] and case.completed not in b"".join(message["body"] for message in messages)

