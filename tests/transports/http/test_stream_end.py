"""A streamed answer ends with its last event: the ASGI message that carries the run's end
(OpenAI's ``[DONE]``, Responses' ``response.completed``, Anthropic's ``message_stop``) also
ends the response, so the client's stream is over as soon as it has read the last event —
not once the stream's keep-alive and client watch have been stopped. A cut answer keeps its
failure form in that last message."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from kernel import ProviderError
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from transports.http import HttpConfig
from transports.http.server import HttpApp

pytestmark = pytest.mark.anyio

ROUTES = {
    "openai": ("/v1/chat/completions", {"model": "default", "stream": True, "messages": [{"role": "user", "content": "hi"}]}, []),
    "responses": ("/v1/responses", {"model": "default", "stream": True, "input": "hi"}, []),
    "anthropic": (
        "/v1/messages",
        {"model": "default", "stream": True, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
        [(b"anthropic-version", b"2023-06-01")],
    ),
}
#: What the last event of a whole answer says, per dialect.
WHOLE_END = {"openai": b"data: [DONE]", "responses": b"event: response.completed", "anthropic": b"event: message_stop"}
#: And of an answer the upstream cut after its first token.
CUT_END = {"openai": b'data: {"error"', "responses": b"event: response.failed", "anthropic": b"event: error"}


async def stream_messages(app: HttpApp, route: str) -> list[dict[str, Any]]:
    """The ASGI messages the app sends for one streamed request of ``route``'s dialect."""
    path, body, extra = ROUTES[route]
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": msgspec.json.encode(body), "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *extra],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
    }
    with anyio.fail_after(10):
        await app(scope, receive, send)
    return sent


def bodies(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    return [message for message in sent[1:] if message["type"] == "http.response.body"]


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("ready_at_once", [False, True], ids=["streamed", "whole-at-once"])
async def test_the_message_with_the_runs_end_ends_the_response(route: str, ready_at_once: bool) -> None:
    # Paced: the end comes in a batch of its own; at once: the first batch holds the whole answer.
    provider = ScriptedProvider([text_turn("Hello", " there", " again")], delay_s=0.0 if ready_at_once else 0.01)
    async with running_kernel(provider) as kernel:
        sent = await stream_messages(HttpApp(kernel, HttpConfig(requests_per_minute_per_ip=0, sse_keepalive_s=0.0)), route)
    messages = bodies(sent)
    assert [message.get("more_body", False) for message in messages] == [True] * (len(messages) - 1) + [False]
    last = messages[-1]["body"]
    assert WHOLE_END[route] in last  # the end event rides with the response's end, no empty message after it
    everything = b"".join(message["body"] for message in messages)
    assert everything.count(WHOLE_END[route]) == 1


@pytest.mark.parametrize("route", sorted(ROUTES))
async def test_a_cut_answer_ends_the_response_with_its_failure(route: str) -> None:
    cut = ProviderError("the upstream dropped the connection", code="provider_error")
    provider = ScriptedProvider([[*text_turn("Hello")[:1], cut]], delay_s=0.01)
    async with running_kernel(provider) as kernel:
        sent = await stream_messages(HttpApp(kernel, HttpConfig(requests_per_minute_per_ip=0, sse_keepalive_s=0.0)), route)
    messages = bodies(sent)
    assert messages[-1].get("more_body", False) is False
    assert CUT_END[route] in messages[-1]["body"] and WHOLE_END[route] not in b"".join(m["body"] for m in messages)
