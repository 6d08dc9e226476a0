"""A request's head and body in one write (``plugins/providers/one_write.py``): the rule
without I/O, then the provider's real requests against the fake upstream, recorded at the
connection under the rule."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore2
import openai
import pytest

from kernel.model import Message
from kernel.provider import ProviderRequest, TextChunk
from kernel.settings import OpenAISettings
from plugins.providers.one_write import HOLD_LIMIT, HeadHold, OneWriteBackend
from plugins.providers.openai import OpenAIProvider
from tests.fakes.openai_server import Reply, fake_openai_server

from .test_openai import KEY, collect, stream_of

POST = b"POST /v1/chat/completions HTTP/1.1\r\nhost: upstream\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"


def fed(hold: HeadHold, *writes: bytes) -> list[bytes | None]:
    return [hold.feed(data) for data in writes]


# ---------------------------------------------------------------- the rule


def test_a_head_announcing_a_body_waits_for_it() -> None:
    assert fed(HeadHold(), POST, b'{"a": "bc"}') == [None, POST + b'{"a": "bc"}']


def test_a_body_in_pieces_is_waited_for_whole() -> None:
    assert fed(HeadHold(), POST, b'{"a"', b': "bc"}') == [None, None, POST + b'{"a": "bc"}']


def test_keep_alive_requests_each_leave_whole() -> None:
    hold = HeadHold()
    assert fed(hold, POST, b"x" * 11, POST, b"y" * 11) == [None, POST + b"x" * 11, None, POST + b"y" * 11]


def test_the_header_name_is_matched_in_any_case() -> None:
    head = POST.replace(b"content-length", b"Content-Length")
    assert fed(HeadHold(), head, b"0123456789A") == [None, head + b"0123456789A"]


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"GET /v1/models HTTP/1.1\r\nhost: upstream\r\n\r\n", id="no body"),
        pytest.param(POST.replace(b"content-length: 11", b"content-length: 0"), id="an empty body"),
        pytest.param(POST.replace(b"content-length: 11", b"transfer-encoding: chunked"), id="a chunked body"),
        pytest.param(POST.replace(b"content-length: 11", b"content-length: %d" % (HOLD_LIMIT + 1)), id="a body past the limit"),
        pytest.param(POST[:-2], id="not a whole head"),
    ],
)
def test_anything_else_is_written_at_once(head: bytes) -> None:
    assert fed(HeadHold(), head, b"next") == [head, b"next"]


def test_bytes_that_only_look_like_a_head_are_not_held() -> None:
    # A chunk of a chunked body whose payload is a head: it starts with its length in hex.
    chunk = b"%x\r\n" % len(POST) + POST + b"\r\n\r\n"
    assert fed(HeadHold(), chunk) == [chunk]
    # And a body that is a head, sent under a head that announced it, is that request's body.
    body = b"GET / HTTP/1.1\r\ncontent-length: 5\r\n\r\n"
    head = POST.replace(b"content-length: 11", b"content-length: %d" % len(body))
    assert fed(HeadHold(), head, body, b"after") == [None, head + body, b"after"]


# ---------------------------------------------------------------- real requests


class RecordingBackend(httpcore2.AsyncNetworkBackend):
    """The real backend, with every write its connections get; ``stall`` set: the next write
    waits (for ever) once ``stalled`` is set, before anything of it is sent."""

    def __init__(self) -> None:
        self.backend = httpcore2.AnyIOBackend()
        self.writes: list[bytes] = []
        self.connections = 0
        self.stall = False
        self.stalled = anyio.Event()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        self.connections += 1
        return RecordingStream(await self.backend.connect_tcp(host, port, timeout, local_address, socket_options), self)

    async def sleep(self, seconds: float) -> None:
        await self.backend.sleep(seconds)


class RecordingStream(httpcore2.AsyncNetworkStream):
    def __init__(self, stream: httpcore2.AsyncNetworkStream, backend: RecordingBackend) -> None:
        self._stream = stream
        self._backend = backend

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer and self._backend.stall:
            self._backend.stall = False
            self._backend.stalled.set()
            await anyio.sleep_forever()
        if buffer:
            self._backend.writes.append(buffer)
        await self._stream.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


def recorded_client(server_url: str, recorder: RecordingBackend) -> tuple[openai.AsyncOpenAI, OpenAIProvider]:
    """The SDK's client on ``recorder`` (under the provider's one-write backend), and its provider."""
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server_url, max_retries=0, timeout=5.0)
    client._client._transport._pool._network_backend = recorder  # type: ignore[attr-defined]
    return client, OpenAIProvider(OpenAISettings(api_key=KEY, base_url=server_url), client=client)


@pytest.mark.anyio
async def test_each_request_reaches_the_connection_in_one_write() -> None:
    recorder = RecordingBackend()
    streamed = ProviderRequest(model="fake-model", messages=(Message(role="user", content="hi " * 2000),))
    whole = ProviderRequest(model="fake-model", messages=(Message(role="user", content="once"),), stream=False)
    async with fake_openai_server([Reply(text="one two", chunks=2), Reply(text="whole")]) as server:
        client, provider = recorded_client(server.base_url, recorder)
        try:
            assert isinstance(client._client._transport._pool._network_backend, OneWriteBackend)  # type: ignore[attr-defined]
            first = await collect(provider, streamed)
            second = await collect(provider, whole)
        finally:
            await provider.aclose()
    assert "".join(c.text for c in first if isinstance(c, TextChunk)) == "one two"
    assert "".join(c.text for c in second if isinstance(c, TextChunk)) == "whole"
    assert len(recorder.writes) == 2, [w[:60] for w in recorder.writes]  # two requests, one write each
    for write, sent in zip(recorder.writes, server.requests, strict=True):
        head, _, body = write.partition(b"\r\n\r\n")
        assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert json.loads(body) == sent  # the whole body, in the same write as its head
        assert b"content-length: %d" % len(body) in head.lower()


@pytest.mark.anyio
async def test_a_request_cancelled_at_its_write_leaves_nothing_behind() -> None:
    # Cancelled while its one write waits: nothing of it was sent, its connection is dropped,
    # and the next request goes whole on a new connection (no held head from the first).
    recorder = RecordingBackend()
    async with fake_openai_server([Reply(text="after", chunks=1)]) as server:
        _, provider = recorded_client(server.base_url, recorder)
        try:
            recorder.stall = True
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(stream_of, provider)
                    with anyio.fail_after(5):
                        await recorder.stalled.wait()
                    scope.cancel()
            assert scope.cancelled_caught
            after = await collect(provider)
        finally:
            await provider.aclose()
    assert "".join(c.text for c in after if isinstance(c, TextChunk)) == "after"
    assert recorder.connections == 2  # the cancelled request's connection was not reused
    assert len(recorder.writes) == 1 and len(server.requests) == 1
    head, _, body = recorder.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and json.loads(body) == server.requests[0]
