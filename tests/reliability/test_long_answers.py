"""Long answers: the cost of a stream is linear in its length, and no frame grows past
what clients accept, even when a writer fell behind and many deltas wait together."""

from __future__ import annotations

import json

import anyio
import pytest

from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from transports.agent_cli.codec import MAX_MERGED_STREAM_CHARS, AgentCliCodec
from transports.openfang.codec import TurnEncoder

pytestmark = pytest.mark.anyio

PIECES = ["z" * 4096] * 1500  # a 6 MB answer in 1500 deltas


async def test_a_long_answer_arrives_whole_through_the_kernel_and_the_openfang_encoder() -> None:
    """A 6 MB answer in 1500 deltas: every byte arrives, in order, in the deltas and the end.
    That its cost is linear in its length (``+=`` on an attribute made it quadratic once) is
    measured by tests/bench/bench_long_answers.py."""
    async with running_kernel(ScriptedProvider([text_turn(*PIECES)])) as kernel:
        await kernel.session("long")
        subscription = await kernel.subscribe("long")
        encoder = TurnEncoder({"p"})
        await kernel.execute(m.Prompt(session_id="long", text="go", request_id="p"))
        with anyio.fail_after(30):
            async for event in subscription:
                out = encoder.feed(event)
                if isinstance(event, m.RunFinished):
                    break
        assert event.text == "".join(PIECES) and out[-1].content == event.text  # type: ignore[union-attr]


def test_agent_cli_merges_a_backlog_into_frames_clients_accept() -> None:
    codec = AgentCliCodec("s")
    incoming = codec.decode(json.dumps({"request_id": "r", "input": {"Text": "x"}, "stream": True}))
    assert not isinstance(incoming, str)
    codec.on_reply(incoming, m.Accepted(session_id="s", run_id="run"))
    backlog = [m.TextDelta(session_id="s", seq=i, run_id="run", request_id="r", text="w" * 4096) for i in range(512)]
    frames = codec.on_events(backlog)
    chunks = [json.loads(f)["response"]["Stream"] for f in frames]
    assert "".join(chunks) == "w" * 4096 * 512
    assert max(len(f.encode()) for f in frames) < 1 << 20 and max(map(len, chunks)) <= MAX_MERGED_STREAM_CHARS
