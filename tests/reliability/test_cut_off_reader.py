"""A WebSocket reader that was cut off learns why (issue 23, point 5).

A client that stops reading during a long answer is closed after ``session.lag_grace_s``
with 1008 ("client too slow"). Its send buffer is full, so the close frame waits behind
the data already sent: the server keeps the connection for the close handshake's timeout,
and a client that reads again gets that data, in order, and then the close frame with its
code and reason — not an aborted connection (1006). Both WebSocket dialects, both backends.
"""

from __future__ import annotations

import json

import anyio
import anyio.to_thread
import pytest

from kernel.settings import Settings
from kernel.testing import ScriptedProvider, text_turn
from tests.reliability._support import RawWebSocket, frames, live_gateway

pytestmark = pytest.mark.anyio

PIECES = [f"<{i:04d}>" + "z" * 16378 for i in range(400)]  # 6.5 MB in 16 KB deltas: more than the OS buffers hold
FULL_TEXT = "".join(PIECES)


def _prompt(dialect: str) -> str:
    if dialect == "openfang":
        return json.dumps({"type": "message", "content": "go"})
    return json.dumps({"request_id": "cut", "input": {"Text": "go"}, "stream": True})


def _text(dialect: str, texts: list[str]) -> str:
    out = []
    for frame in frames(texts):
        if dialect == "openfang" and frame.get("type") == "text_delta":
            out.append(frame["content"])
        elif dialect == "agent-cli" and "Stream" in frame.get("response", {}):
            out.append(frame["response"]["Stream"])
    return "".join(out)


@pytest.mark.parametrize("dialect", ["openfang", "agent-cli"])
async def test_a_reader_cut_off_then_reading_again_gets_the_data_and_1008(dialect: str) -> None:
    settings = Settings()
    settings.session.subscriber_buffer = 16
    settings.session.event_retention = 4096
    settings.session.lag_grace_s = 0.3
    provider = ScriptedProvider([text_turn(*PIECES)], delay_s=0.0005)
    async with live_gateway([dialect], provider, settings=settings) as live:
        kernel = live.kernel
        client = await anyio.to_thread.run_sync(lambda: RawWebSocket(live.ws(dialect), rcvbuf=4096))
        assert client.status == 101
        if dialect == "openfang":  # its greeting frames first
            await anyio.to_thread.run_sync(lambda: client.read_until(lambda t: len(t) >= 2))
        client.send_text(_prompt(dialect))
        with anyio.fail_after(10):
            while not kernel.sessions:
                await anyio.sleep(0.01)
        session = next(iter(kernel.sessions.values()))
        with anyio.fail_after(15):  # the server cut the reader off: it follows the run no more
            while session.hub.subscriber_count or not session.hub.last_seq:
                await anyio.sleep(0.01)
        # Longer than the server used to wait for its close frame before dropping the socket
        # (1 s for the send, 1.5 s for the handler): the reader is away past all of that.
        await anyio.sleep(3.0)
        await anyio.to_thread.run_sync(client.read_to_end)  # it reads again
        client.close()
    assert client.close_code == 1008, (client.close_code, client.close_reason)
    assert "too slow" in client.close_reason
    got = _text(dialect, client.texts)
    assert got and len(got) < len(FULL_TEXT) and FULL_TEXT.startswith(got)  # what was sent, in order
