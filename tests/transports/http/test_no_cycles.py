"""A proxied request leaves nothing for the garbage collector (:mod:`tests.cycles`): a
cancelled watch task and the router's send wrapper left 67 objects a request in cycles."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import msgspec
import pytest

from kernel.testing import ScriptedProvider, running_kernel, text_turn
from tests.cycles import garbage_of
from transports.http import HttpConfig
from transports.http.server import HttpApp

from ._helpers import http_scope

pytestmark = pytest.mark.anyio

ROUTES = [
    ("/v1/chat/completions", {"model": "default", "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"model": "default", "input": "hi", "store": False}),
    ("/v1/messages", {"model": "default", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}),
]


async def call(app: HttpApp, path: str, body: dict[str, Any], *, leave_after_first_body: bool = False) -> tuple[int, bytes]:
    """One request through the ASGI app; its status and body. ``leave_after_first_body``:
    the client goes once it has the first piece of the body."""
    delivered = False
    status = 0
    received: list[bytes] = []
    gone = anyio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": msgspec.json.encode(body), "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message.get("body"):
            received.append(message["body"])
            if leave_after_first_body:
                gone.set()

    with anyio.fail_after(10):
        await app(http_scope(path), receive, send)
    return status, b"".join(received)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("path", "body"), ROUTES, ids=["chat", "responses", "messages"])
async def test_an_answer_leaves_no_reference_cycles(path: str, body: dict[str, Any], stream: bool) -> None:
    async with running_kernel(ScriptedProvider([text_turn("Hello", " world")])) as kernel:
        app = HttpApp(kernel, HttpConfig())

        async def requests() -> None:
            for _ in range(3):
                status, answer = await call(app, path, {**body, "stream": stream})
                assert status == 200 and b"world" in answer, (status, answer[:300])

        assert await garbage_of(requests) == Counter()


async def test_refusals_and_a_client_that_leaves_leave_no_reference_cycles() -> None:
    """An invalid request (400), an unknown route (404), and a stream whose client goes after
    its first piece: the error paths and the disconnect free their objects too."""
    provider = ScriptedProvider([text_turn(*["word "] * 50)], delay_s=0.001)
    async with running_kernel(provider) as kernel:
        app = HttpApp(kernel, HttpConfig())
        chat_path, chat = ROUTES[0]

        async def requests() -> None:
            for _ in range(3):
                assert (await call(app, chat_path, {**chat, "messages": 5}))[0] == 400
                assert (await call(app, "/v1/nothing-here", {}))[0] == 404
                status, answer = await call(app, chat_path, {**chat, "stream": True}, leave_after_first_body=True)
                assert status == 200 and answer.count(b"word") < 50
                with anyio.fail_after(5):
                    while kernel.sessions:  # the interrupted run's throw-away session is gone
                        await anyio.sleep(0.001)

        assert await garbage_of(requests) == Counter()
