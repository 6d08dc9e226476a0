"""The provider alone, then inside a running kernel (kernel.testing), on both backends."""

import anyio
import pytest

from gateway_reverse import ReverseProvider
from kernel import FinishChunk, ProviderRequest, TextChunk, UsageChunk
from kernel import model as m
from kernel.testing import running_kernel

pytestmark = pytest.mark.anyio


async def test_streams_the_prompt_reversed_with_usage() -> None:
    request = ProviderRequest(model="reverse-1", messages=(m.Message(role="user", content="hello world"),))
    chunks = [chunk async for chunk in ReverseProvider().stream(request)]
    assert [c.text for c in chunks if isinstance(c, TextChunk)] == ["dlro", "w ol", "leh"]
    assert chunks[-2:] == [UsageChunk(m.Usage(input_tokens=3, output_tokens=3)), FinishChunk("stop")]


async def test_in_a_kernel_it_honours_max_tokens_and_interrupts() -> None:
    async with running_kernel(ReverseProvider(chunk_chars=1, delay_s=0.01)) as kernel:
        session = await kernel.session()
        async with await kernel.subscribe(session.id) as events:
            short = m.PromptOptions(max_tokens=4)
            await kernel.execute(m.Prompt(session_id=session.id, text="stressed", options=short))
            await kernel.execute(m.Prompt(session_id=session.id, text="a long prompt to stop"))
            ends = []
            with anyio.fail_after(5):
                async for event in events:
                    if isinstance(event, m.TextDelta) and len(ends) == 1:
                        await kernel.execute(m.Interrupt(session_id=session.id))
                    if isinstance(event, m.RunFinished):
                        ends.append(event)
                        if len(ends) == 2:
                            break
    assert (ends[0].text, ends[0].stop_reason, ends[0].usage.output_tokens) == ("dess", "max_tokens", 4)
    full = "a long prompt to stop"[::-1]
    assert ends[1].interrupted and ends[1].text and full.startswith(ends[1].text) and ends[1].text != full
