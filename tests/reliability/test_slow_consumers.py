"""Slow consumers: bounded memory, a clear cut-off, nobody else slowed down, resumption.

The bound, from the kernel outwards:
* kernel: a subscriber buffers at most ``session.subscriber_buffer`` events; adjacent
  text deltas merge while they wait, up to ``MAX_MERGED_CHARS`` characters each. A
  subscriber that stays full past ``session.lag_grace_s`` is cut off with one
  ``subscriber_lagged`` event and holds nothing more. The session keeps its last
  ``session.event_retention`` events for resumption.
* WebSocket transports: a frame the client does not take within ``session.lag_grace_s``
  closes the socket with 1008 ("client too slow"), so a stalled client holds at most
  the socket buffers plus one frame. On the trio worker, hypercorn cannot interrupt a
  blocked socket write; there the OS drops a peer that takes no data for
  ``lag_grace_s`` + the close handshake's 5 s + 1 s (TCP_USER_TIMEOUT); until then a
  client that reads again gets what was sent and the 1008 close (test_cut_off_reader).
* Resumption: OpenFang and Agent-CLI sockets have no way to resume from a ``seq``; a
  client reconnects and reads the history. stdio has none either (one process, one
  pipe): a stdio reader that falls behind and loses events gets a
  ``subscriber_lagged`` line and the stream goes on. The http transport resumes an SSE
  stream from ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import Any

import anyio
import httpx
import pytest
import websockets

from kernel import Follower
from kernel import model as m
from kernel.hub import MAX_MERGED_CHARS
from kernel.settings import Settings
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from tests.asyncio_clients import in_asyncio
from tests.reliability._support import (
    PipeReader,
    RawSSE,
    RawWebSocket,
    frames,
    live_gateway,
    serving,
)
from transports.stdio.server import StdioConfig, StdioTransport

pytestmark = pytest.mark.anyio


def lag_settings(*, buffer: int = 4, retention: int = 8, grace_s: float = 0.0) -> Settings:
    settings = Settings()
    settings.session.subscriber_buffer = buffer
    settings.session.event_retention = retention
    settings.session.lag_grace_s = grace_s
    return settings


async def publish_unmergeable(session: Any, count: int, run_id: str = "r") -> None:
    """Reasoning and text deltas in turn: nothing merges, so buffers really fill."""
    for _ in range(count):
        await session.emit(m.ReasoningDelta(session_id=session.id, run_id=run_id, request_id="q", text="r"))
        await session.emit(m.TextDelta(session_id=session.id, run_id=run_id, request_id="q", text="t"))


class CountingSubscribe:
    """Wraps ``kernel.subscribe``; fails after ``limit`` calls so a resubscribe loop ends."""

    def __init__(self, kernel: Any, limit: int = 20) -> None:
        self.kernel, self.limit, self.calls = kernel, limit, 0
        self.original = kernel.subscribe
        kernel.subscribe = self

    async def __call__(self, *args: object, **kw: object) -> object:
        self.calls += 1
        if self.calls > self.limit:
            raise AssertionError(f"resubscribed {self.calls} times: a follower is spinning")
        return await self.original(*args, **kw)


async def test_follower_reports_lost_events_once_and_follows_on() -> None:
    async with running_kernel(settings=lag_settings()) as kernel:
        session = await kernel.session("lossy")
        feed = await Follower.open(kernel, "lossy")
        counter = CountingSubscribe(kernel)
        await publish_unmergeable(session, 20)  # 40 events: far past the buffer and the retention
        with anyio.fail_after(2):
            batch = await feed.next_batch()
        assert [e.seq for e in batch[:-1]] == [1, 2, 3, 4]  # what was buffered before the cut-off
        lost = batch[-1]
        assert isinstance(lost, m.SubscriberLagged) and lost.last_seq == 4 and "no longer retained" in lost.error.message
        await session.emit(m.TextDelta(session_id="lossy", run_id="r2", request_id="q2", text="after"))
        with anyio.fail_after(2):
            after = await feed.next_batch()
        assert [getattr(e, "text", None) for e in after] == ["after"] and after[0].seq == 41
        assert counter.calls == 2
        feed.close()


async def test_a_stalled_subscriber_holds_a_bounded_buffer_and_is_cut_off() -> None:
    """A pure text stream: deltas merge while waiting, but only up to MAX_MERGED_CHARS,
    so the buffer fills, the grace period runs out and the laggard is cut off; a reader
    at the same time gets every delta; the run is never held up."""
    pieces = [f"{i:05d}" + "x" * 195 for i in range(400)]  # 80 000 characters
    provider = ScriptedProvider([text_turn(*pieces)], delay_s=0.001)
    async with running_kernel(provider, settings=lag_settings(buffer=8, retention=4096, grace_s=0.05)) as kernel:
        session = await kernel.session("s")
        stalled = await kernel.subscribe("s")
        reader = await kernel.subscribe("s")
        worst = 0
        received: list[m.Event] = []
        await kernel.execute(m.Prompt(session_id="s", text="go", request_id="p"))
        with anyio.fail_after(20):
            async for event in reader:
                worst = max(worst, stalled.pending)
                buffered = sum(len(e.text) for e in stalled._buffer if isinstance(e, m.TextDelta))
                assert buffered <= 8 * MAX_MERGED_CHARS
                received.append(event)
                if isinstance(event, m.RunFinished):
                    break
        assert "".join(e.text for e in received if isinstance(e, m.TextDelta)) == "".join(pieces)
        assert worst <= 8 + 1  # the buffer, plus the final subscriber_lagged
        left = stalled.receive_nowait()
        assert isinstance(left[-1], m.SubscriberLagged) and "fell behind" in left[-1].error.message
        assert session.hub.subscriber_count == 1  # the laggard holds nothing any more
        resumed = await kernel.subscribe("s", after_seq=left[-1].last_seq)  # and may resume
        rest = resumed.receive_nowait()
        text = "".join(e.text for e in [*left, *rest] if isinstance(e, m.TextDelta))
        assert text == "".join(pieces) and isinstance(rest[-1], m.RunFinished)


# ------------------------------------------------------------------ live WebSocket clients

PIECES = [f"<{i:04d}>" + "y" * 16378 for i in range(600)]  # 9.8 MB in 16 KB deltas: more than the OS buffers hold
FULL_TEXT = "".join(PIECES)


def ws_prompt(dialect: str, session: str) -> str:
    if dialect == "openfang":
        return json.dumps({"type": "message", "content": "go", "session_id": session})
    return json.dumps({"request_id": session, "input": {"Text": "go"}, "stream": True})


def streamed_text(dialect: str, texts: list[str]) -> str:
    out = []
    for frame in frames(texts):
        if dialect == "openfang" and frame["type"] == "text_delta":
            out.append(frame["content"])
        elif dialect == "agent-cli" and "Stream" in frame.get("response", {}):
            out.append(frame["response"]["Stream"])
    return "".join(out)


async def healthy_stream(url: str, dialect: str) -> str:
    """A client that reads as fast as it can: it must get the whole answer."""
    async with websockets.connect(url, max_size=None, proxy=None, open_timeout=10) as ws:
        await ws.send(ws_prompt(dialect, "healthy"))
        texts: list[str] = []
        async with asyncio.timeout(30):
            async for text in ws:
                texts.append(str(text))
                frame = json.loads(text)
                if frame.get("type") == "response" or "Complete" in frame.get("response", {}):
                    return streamed_text(dialect, texts)
    raise AssertionError("the healthy stream ended early")


@pytest.mark.parametrize("dialect", ["openfang", "agent-cli"])
async def test_a_websocket_client_that_stops_reading_is_cut_off_alone(dialect: str) -> None:
    # A grace of a second: the healthy client must never look stalled, even on a busy machine.
    settings = lag_settings(buffer=16, retention=4096, grace_s=1.0)
    provider = ScriptedProvider([text_turn(*PIECES)], delay_s=0.001)
    async with live_gateway([dialect], provider, settings=settings) as live:
        kernel = live.kernel
        worst = {"pending": 0, "chars": 0}
        stop = anyio.Event()

        async def watch_buffers() -> None:
            while not stop.is_set():
                for session in list(kernel.sessions.values()):
                    for sub in list(session.hub._subscribers):
                        worst["pending"] = max(worst["pending"], sub.pending)
                        chars = sum(len(e.text) for e in sub._buffer if isinstance(e, m.TextDelta))
                        worst["chars"] = max(worst["chars"], chars)
                await anyio.sleep(0.005)

        healthy: list[str] = []

        async def stream_healthy() -> None:
            healthy.append(await in_asyncio(lambda: healthy_stream(live.ws(dialect), dialect)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_buffers)
            slow = await anyio.to_thread.run_sync(lambda: RawWebSocket(live.ws(dialect), rcvbuf=4096))
            assert slow.status == 101
            if dialect == "openfang":
                await anyio.to_thread.run_sync(lambda: slow.read_until(lambda t: len(t) >= 2))
            slow.send_text(ws_prompt(dialect, "stalled"))
            with anyio.fail_after(5):
                while not kernel.sessions:
                    await anyio.sleep(0.01)
            stalled = next(iter(kernel.sessions.values()))  # the first session opened
            # ... and it reads nothing more. Another client streams meanwhile.
            tg.start_soon(stream_healthy)
            with anyio.fail_after(10):  # the server lets go of the stalled client's subscription
                while stalled.hub.subscriber_count:
                    await anyio.sleep(0.01)
            await anyio.to_thread.run_sync(slow.read_to_end)  # the client reads again
            with anyio.fail_after(30):
                while not healthy:
                    await anyio.sleep(0.02)
            stop.set()
        assert healthy == [FULL_TEXT]
        slow.close()
        assert slow.close_code == 1008 and "too slow" in slow.close_reason, (slow.close_code, slow.close_reason)
        got = streamed_text(dialect, slow.texts)
        assert len(got) < len(FULL_TEXT) and FULL_TEXT.startswith(got)  # in order, nothing skipped
        assert worst["pending"] <= settings.session.subscriber_buffer + 1
        assert worst["chars"] <= settings.session.subscriber_buffer * max(MAX_MERGED_CHARS, len(PIECES[0]))


async def test_clients_that_never_read_again_do_not_hold_up_the_servers_stop() -> None:
    """Without a bound, one such client kept a trio server from stopping for ever: its
    worker shields socket writes. The OS now drops the peer after grace + 5 s + 1 s."""
    settings = lag_settings(buffer=16, retention=4096, grace_s=0.3)
    provider = ScriptedProvider([text_turn(*PIECES)], delay_s=0.001)
    async with running_kernel(provider, settings=settings, commands=()) as kernel:
        stalled: list[RawWebSocket] = []
        async with serving(kernel, ["openfang", "agent-cli"]) as live:
            for dialect in ("openfang", "agent-cli"):
                client = await anyio.to_thread.run_sync(lambda d=dialect: RawWebSocket(live.ws(d), rcvbuf=4096))
                client.send_text(ws_prompt(dialect, f"never-{dialect}"))
                stalled.append(client)
            with anyio.fail_after(10):  # both streams are under way and their clients have stopped reading
                while len(kernel.sessions) < 2 or any(s.hub.last_seq < 100 for s in kernel.sessions.values()):
                    await anyio.sleep(0.01)

            rescued = threading.Event()

            def last_resort() -> None:  # if the server never lets go, end the test anyway
                time.sleep(10)
                rescued.set()
                for client in stalled:
                    client.sock.close()

            threading.Thread(target=last_resort, daemon=True).start()
        for client in stalled:
            client.close()
    assert not rescued.is_set(), "the server stopped only because the test closed the stalled clients' sockets"


# ------------------------------------------------------------------ stdio


@pytest.mark.parametrize("retention", [4096, 16], ids=["resumed", "lost"])
async def test_a_stdio_reader_that_falls_behind_keeps_its_stream(retention: int) -> None:
    """The reader stops reading stdout for a while: the pipe fills, the kernel cuts the
    forwarder off. It must resume (nothing lost while retained; else one
    ``subscriber_lagged`` line) and keep forwarding: later prompts are answered."""
    pieces = [f"<{i:04d}>" + "s" * 16378 for i in range(150)]  # 2.4 MB: far over a pipe's 64 KiB
    settings = lag_settings(buffer=8, retention=retention, grace_s=0.1)
    settings.session.event_retention_bytes = 16 << 20  # the kernel bounds retention in bytes too: the whole answer fits
    provider = ScriptedProvider([text_turn(*pieces), text_turn("second answer")], delay_s=0.002)
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    try:
        async with running_kernel(provider, settings=settings) as kernel, anyio.create_task_group() as tg:
            await tg.start(StdioTransport(stdin_r, stdout_w).serve, kernel, StdioConfig(session_id="s"))
            os.write(stdin_w, b'{"type":"prompt","text":"go","request_id":"p1"}\n')
            await anyio.sleep(0.8)  # not reading: the forwarder blocks on the full pipe
            reader = PipeReader(stdout_r)
            # The whole run, or (its end being among the lost events) the notice of the loss.
            await reader.until(lambda x: (x.get("request_id") == "p1" and x["type"] == "run_finished") or x["type"] == "subscriber_lagged")
            os.write(stdin_w, b'{"type":"prompt","text":"again","request_id":"p2"}\n')
            lines = await reader.until(lambda x: x.get("type") == "run_finished" and x["request_id"] == "p2")
            tg.cancel_scope.cancel()
    finally:
        for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
            os.close(fd)
    first = [x for x in lines if x.get("request_id") == "p1" and x["type"] == "text_delta"]
    lagged = [x for x in lines if x["type"] == "subscriber_lagged"]
    seqs = [x["seq"] for x in lines if "seq" in x and x["type"] != "subscriber_lagged"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # in order, never twice
    if retention == 4096:
        assert not lagged and "".join(x["text"] for x in first) == "".join(pieces)
    else:
        assert len(lagged) == 1 and lagged[0]["error"]["code"] == "rate_limited"
        assert "".join(pieces).startswith("".join(x["text"] for x in first if x["seq"] <= lagged[0]["last_seq"]))
    assert lines[-1]["text"] == "second answer"


# ------------------------------------------------------------------ http SSE: resume by Last-Event-ID


async def test_an_http_sse_reader_that_stalls_resumes_from_its_last_event_id() -> None:
    # The grace must stay well above any pause of a reader that keeps reading: the healthy reader
    # below shares the gateway's loop, and with the 2-core VM at a third of its usual speed one
    # write to it once waited more than 0.3 s, and it was cut (CI, 2026-12-07).
    settings = lag_settings(buffer=16, retention=4096, grace_s=1.0)
    # The kernel bounds retention in bytes too: the whole answer fits, twice (the deltas and the end's text).
    settings.session.event_retention_bytes = 64 << 20
    provider = ScriptedProvider([text_turn(*PIECES)], delay_s=0.001)
    async with live_gateway(["http"], provider, settings=settings) as live:
        kernel, url = live.kernel, live.urls["http"]
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for session in ("stalled", "healthy"):
                await client.post("/v1/sessions", json={"session_id": session})
        worst = {"pending": 0}
        body = json.dumps({"text": "go"}).encode()
        stalled = await anyio.to_thread.run_sync(lambda: RawSSE(url, "POST", "/v1/sessions/stalled/prompt", body, rcvbuf=4096))
        await anyio.to_thread.run_sync(lambda: stalled.read_until(lambda e: len(e) >= 4))  # reads a little, then stops
        run_id = stalled.headers["x-run-id"]

        async def healthy() -> str:
            text = []
            async with (
                httpx.AsyncClient(base_url=url, timeout=30) as client,
                client.stream("POST", "/v1/sessions/healthy/prompt", json={"text": "go"}) as response,
            ):
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        event = json.loads(line[6:])
                        text.append(event.get("text", "") if event["type"] == "text_delta" else "")
            return "".join(text)

        async def watch() -> None:
            while True:
                for sub in list(kernel.sessions["stalled"].hub._subscribers):
                    worst["pending"] = max(worst["pending"], sub.pending)
                await anyio.sleep(0.005)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            assert await healthy() == FULL_TEXT  # another session streams in full meanwhile
            with anyio.fail_after(30):  # the stalled run goes on to its end all the same
                while kernel.sessions["stalled"].busy:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        stalled.close()  # the reader gives up and reconnects from the last event it has
        before = [(int(i), json.loads(d)) for i, _, d in stalled.events if i is not None]
        last_id = before[-1][0]
        after: list[tuple[int, dict[str, Any]]] = []
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            headers = {"last-event-id": str(last_id)}
            async with client.stream("GET", f"/v1/sessions/stalled/events?run_id={run_id}", headers=headers) as response:
                event_id = None
                async for line in response.aiter_lines():
                    if line.startswith("id: "):
                        event_id = int(line[4:])
                    elif line.startswith("data: "):
                        after.append((event_id or 0, json.loads(line[6:])))
    seqs = [i for i, _ in before + after]
    assert seqs == sorted(set(seqs)) and after[0][0] > last_id  # in order, nothing twice
    text = "".join(e["text"] for _, e in before + after if e["type"] == "text_delta")
    assert text == FULL_TEXT and after[-1][1]["type"] == "run_finished"  # nothing lost
    assert worst["pending"] <= settings.session.subscriber_buffer + 1


async def test_an_openfang_sse_reader_that_stops_reading_is_let_go() -> None:
    """OpenFang's SSE has no resumption: a reader that stops reading for longer than the
    grace period gets its stream ended (no ``done`` event: it knows it was cut short)."""
    settings = lag_settings(buffer=16, retention=4096, grace_s=0.4)
    provider = ScriptedProvider([text_turn(*PIECES)], delay_s=0.001)
    async with live_gateway(["openfang"], provider, settings=settings) as live:
        body = json.dumps({"message": "go", "session_id": "sse-stalled"}).encode()
        target = f"/api/agents/{live.agent_id}/message/stream"
        stalled = await anyio.to_thread.run_sync(lambda: RawSSE(live.urls["openfang"], "POST", target, body, rcvbuf=4096))
        await anyio.to_thread.run_sync(lambda: stalled.read_until(lambda e: len(e) >= 2))  # then it stops reading
        with anyio.fail_after(10):  # the server lets go of it
            while "sse-stalled" not in live.kernel.sessions or live.kernel.sessions["sse-stalled"].hub.subscriber_count:
                await anyio.sleep(0.01)
        await anyio.to_thread.run_sync(lambda: stalled.read_until(lambda e: False))  # reads again, to the end
        stalled.close()
    assert stalled.ended and stalled.status == 200
    names = [name for _, name, _ in stalled.events]
    assert "done" not in names and "chunk" in names
    text = "".join(json.loads(data)["content"] for _, name, data in stalled.events if name == "chunk")
    assert 0 < len(text) < len(FULL_TEXT) and FULL_TEXT.startswith(text)
