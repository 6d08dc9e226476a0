"""Anthropic's Messages API on the http transport, driven by the official ``anthropic`` SDK
(and raw HTTP where the SDK would refuse to send what is tested) against a real server."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import anyio
import httpx
import pytest

from kernel import Kernel, ProviderError, ReasoningChunk, TextChunk
from kernel import model as m
from kernel.settings import AgentSettings, Settings
from kernel.testing import ScriptedProvider, failing_turn, running_kernel, text_turn, tool_turn
from tests.transports.http._helpers import ADD_TOOL, http_server, sse_events
from transports.http.anthropic import codec

pytestmark = pytest.mark.anyio

TOKEN = "test-token-anthropic"
AGENT = "Helper"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SAFE_ID = re.compile(r"^[A-Za-z0-9_-]+$")


@asynccontextmanager
async def gateway(provider: ScriptedProvider, **config: Any) -> AsyncIterator[tuple[Kernel, str, anthropic.AsyncAnthropic]]:
    settings = Settings(agents=[AgentSettings(name=AGENT, system_prompt="agent prompt")])
    async with running_kernel(provider, settings=settings, tools=[ADD_TOOL]) as kernel, http_server(kernel, token=TOKEN, **config) as url:
        sdk = anthropic.AsyncAnthropic(base_url=url, api_key=TOKEN, max_retries=0, timeout=20.0)
        try:
            yield kernel, url, sdk
        finally:
            await sdk.close()


def only_session(kernel: Kernel) -> str:
    (session_id,) = kernel.sessions
    return session_id


async def test_create_maps_system_turns_and_history() -> None:
    provider = ScriptedProvider([text_turn("Hello", " world", usage=(7, 2))])
    async with gateway(provider) as (kernel, _, sdk):
        raw = await sdk.messages.with_raw_response.create(
            model=AGENT,
            max_tokens=64,
            system=[{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1"}, {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            messages=[
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": [{"type": "text", "text": "first answer"}]},
                {"role": "user", "content": [{"type": "text", "text": "second question"}]},
                {"role": "system", "content": "Reminder: answer in English."},  # type: ignore[misc,list-item]
            ],
            metadata={"user_id": json.dumps({"device": "d1"})},
            extra_headers={"anthropic-beta": "claude-code-20250219,made-up-beta-2099-01-01"},
            # Gone from SDK 2.x's typed parameters, still sent by older clients.
            extra_body={"temperature": 0.5, "top_p": 0.8, "top_k": 5, "context_management": {"edits": []}, "some_future_field": 1},
            stop_sequences=["END", "\n\nHuman:"],
        )
        message = await raw.parse()
        assert raw.headers["request-id"].startswith("req_")
        assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
        assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", "Hello world")]
        assert message.stop_reason == "end_turn" and message.usage.input_tokens == 7 and message.usage.output_tokens == 2
        sent = provider.requests[0]
        assert sent.max_tokens == 64 and sent.temperature == 0.5 and sent.top_p == 0.8 and sent.stop == ("END", "\n\nHuman:")
        assert sent.messages[0].role == "system" and sent.messages[0].content == "Be brief.\n\nReminder: answer in English."
        assert [(x.role, x.content or m.parts_text(x.parts)) for x in sent.messages[1:]] == [
            ("user", "first question"), ("assistant", "first answer"), ("user", "second question"),
        ]
        with anyio.fail_after(5):  # the throw-away session is deleted once the answer is out
            while kernel.sessions:
                await anyio.sleep(0.01)


async def test_stream_text_and_final_message() -> None:
    provider = ScriptedProvider([text_turn("Streamed", " answer", " here", usage=(5, 3))])
    async with gateway(provider) as (_, _, sdk):
        async with sdk.messages.stream(model=AGENT, max_tokens=100, messages=[{"role": "user", "content": "hi"}]) as stream:
            texts = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
        assert "".join(texts) == "Streamed answer here"
        assert final.content[0].type == "text" and final.content[0].text == "Streamed answer here"
        assert final.stop_reason == "end_turn" and final.usage.output_tokens == 3 and final.usage.input_tokens == 5


async def test_every_stream_event_has_its_event_line() -> None:
    provider = ScriptedProvider([text_turn("a", "b")])
    async with gateway(provider) as (_, url, _), httpx.AsyncClient(base_url=url, timeout=20) as http:
        body = {"model": AGENT, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi" * 40}]}
        async with http.stream("POST", "/v1/messages?beta=true", json=body, headers={"x-api-key": TOKEN, "anthropic-version": "2023-06-01"}) as response:
            assert response.status_code == 200
            events = [event async for event in sse_events(response)]
        assert all(event.event == event.json()["type"] for event in events)
        names = [event.event for event in events]
        assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
        # The estimate of the prompt's size, until the upstream's count comes with the end.
        assert events[0].json()["message"]["usage"]["input_tokens"] == 20 + codec.MESSAGE_TOKENS
        assert names[1] == "content_block_start" and names[-3] == "content_block_stop"
        assert set(names[2:-3]) == {"content_block_delta"}  # adjacent deltas may merge
        assert "".join(event.json()["delta"]["text"] for event in events[2:-3]) == "ab"


async def test_client_tool_round_trip_with_unsafe_upstream_ids() -> None:
    provider = ScriptedProvider([tool_turn("get_weather", '{"city": "Oslo"}', call_id="call:1/x.y"), text_turn("It is sunny")])
    async with gateway(provider) as (_, _, sdk):
        messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
        async with sdk.messages.stream(model=AGENT, max_tokens=100, messages=messages, tools=[WEATHER]) as stream:  # type: ignore[list-item]
            first = await stream.get_final_message()
        assert first.stop_reason == "tool_use"
        (use,) = [b for b in first.content if b.type == "tool_use"]
        assert SAFE_ID.match(use.id) and use.name == "get_weather" and use.input == {"city": "Oslo"}
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "sunny, 21C"}]}]},
        ]
        second = await sdk.messages.create(model=AGENT, max_tokens=100, messages=messages, tools=[WEATHER])  # type: ignore[list-item]
        assert second.content[0].type == "text" and second.content[0].text == "It is sunny"
        sent = provider.requests[1].messages
        assistant = next(x for x in sent if x.role == "assistant")
        assert [(c.id, c.name, json.loads(c.arguments)) for c in assistant.tool_calls] == [("call:1/x.y", "get_weather", {"city": "Oslo"})]
        tool = next(x for x in sent if x.role == "tool")
        assert (tool.tool_call_id, tool.name, tool.content) == ("call:1/x.y", "get_weather", "sunny, 21C")
        assert "get_weather" in {t.name for t in provider.requests[0].tools}


async def test_non_stream_tool_use_and_error_result() -> None:
    provider = ScriptedProvider([tool_turn("get_weather", '{"city": "Rome"}', call_id="toolu_01"), text_turn("Sorry")])
    async with gateway(provider) as (_, _, sdk):
        first = await sdk.messages.create(model=AGENT, max_tokens=50, messages=[{"role": "user", "content": "Rome?"}], tools=[WEATHER])  # type: ignore[list-item]
        assert first.stop_reason == "tool_use"
        assert [(b.type, getattr(b, "id", None)) for b in first.content] == [("tool_use", "toolu_01")]
        await sdk.messages.create(
            model=AGENT, max_tokens=50, tools=[WEATHER],  # type: ignore[list-item]
            messages=[
                {"role": "user", "content": "Rome?"},
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},  # type: ignore[misc]
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "no network", "is_error": True}]},
            ],
        )
        tool = next(x for x in provider.requests[1].messages if x.role == "tool")
        assert tool.outcome == "error" and tool.content == "no network"


async def test_count_tokens_grows_with_the_prompt() -> None:
    async with gateway(ScriptedProvider()) as (_, _, sdk):
        short = await sdk.messages.count_tokens(model=AGENT, messages=[{"role": "user", "content": "hi"}])
        long = await sdk.messages.count_tokens(model=AGENT, messages=[{"role": "user", "content": "hi " * 400}], tools=[WEATHER])  # type: ignore[list-item]
        assert 0 < short.input_tokens < long.input_tokens
        assert long.input_tokens >= 300


async def test_models_in_both_shapes() -> None:
    async with gateway(ScriptedProvider()) as (_, url, sdk):
        page = await sdk.models.list()
        assert page.data[0].id == AGENT and page.data[0].type == "model"
        assert (await sdk.models.retrieve(AGENT)).display_name == AGENT
        with pytest.raises(anthropic.NotFoundError):
            await sdk.models.retrieve("no-such-model")
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            openai_shape = (await http.get("/v1/models", headers={"authorization": f"Bearer {TOKEN}"})).json()
        assert openai_shape["object"] == "list" and openai_shape["data"][0]["object"] == "model"


async def test_both_auth_headers_and_a_wrong_key() -> None:
    async with gateway(ScriptedProvider()) as (_, url, _):
        body = {"model": AGENT, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            by_key = await http.post("/v1/messages", json=body, headers={"x-api-key": TOKEN, "anthropic-version": "2023-06-01"})
            by_bearer = await http.post("/v1/messages", json=body, headers={"authorization": f"Bearer {TOKEN}"})
            wrong = await http.post("/v1/messages", json=body, headers={"x-api-key": "nope"})
        assert by_key.status_code == by_bearer.status_code == 200
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        bad_sdk = anthropic.AsyncAnthropic(base_url=url, auth_token="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            await bad_sdk.messages.create(model=AGENT, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        await bad_sdk.close()


async def test_errors_in_anthropic_shape() -> None:
    provider = ScriptedProvider([failing_turn("slow down", code="rate_limited", status=429)])
    async with gateway(provider) as (_, url, sdk):
        async with httpx.AsyncClient(base_url=url, timeout=20, headers={"x-api-key": TOKEN}) as http:
            missing = await http.post("/v1/messages", json={"model": AGENT, "messages": [{"role": "user", "content": "hi"}]})
            broken = await http.post("/v1/messages", content=b"{not json")
        assert missing.status_code == 400 and missing.json()["error"] == {"type": "invalid_request_error", "message": "max_tokens: Field required"}
        assert missing.headers["x-should-retry"] == "false"
        assert broken.status_code == 400 and broken.json()["type"] == "error"
        with pytest.raises(anthropic.RateLimitError) as limited:
            await sdk.messages.create(model=AGENT, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        assert limited.value.response.headers["x-should-retry"] == "true" and limited.value.response.headers["retry-after"]
        provider.turns = [failing_turn("boom")]
        with pytest.raises(anthropic.APIStatusError) as failed:  # before any output: the real status
            async with sdk.messages.stream(model=AGENT, max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as stream:
                await stream.get_final_message()
        assert failed.value.status_code == 502 and failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]


async def test_a_failing_upstream_mid_stream_ends_with_an_error_event() -> None:
    provider = ScriptedProvider([[TextChunk("partial "), TextChunk("answer"), ProviderError("upstream died", status=500)]])
    async with gateway(provider) as (_, _, sdk):
        seen: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as failed:
            async with sdk.messages.stream(model=AGENT, max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as stream:
                async for event in stream:
                    seen.append(event.type)
        assert "upstream died" in str(failed.value)
        assert "message_stop" not in seen and "content_block_delta" in seen


async def test_an_interrupt_mid_stream_is_an_error_never_end_turn() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(200)])], delay_s=0.01)
    async with gateway(provider) as (kernel, _, sdk):
        seen: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as cut:
            async with sdk.messages.stream(model=AGENT, max_tokens=500, messages=[{"role": "user", "content": "hi"}]) as stream:
                async for event in stream:
                    seen.append(event.type)
                    if event.type == "content_block_delta" and seen.count("content_block_delta") == 1:
                        await kernel.execute(m.Interrupt(session_id=only_session(kernel), target_request_id=stream.current_message_snapshot.id))
        assert "interrupted" in str(cut.value)
        assert "message_stop" not in seen and "message_delta" not in seen
        provider.turns = [text_turn(*[f"w{i} " for i in range(200)])]

        async def interrupt_soon() -> None:
            while not kernel.sessions or provider.closed_streams == len(provider.requests):
                await anyio.sleep(0.005)
            await kernel.execute(m.Interrupt(session_id=only_session(kernel)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupt_soon)
            with pytest.raises(anthropic.APIStatusError) as whole:
                await sdk.messages.create(model=AGENT, max_tokens=500, messages=[{"role": "user", "content": "hi"}])
        assert whole.value.status_code == 409 and whole.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


async def test_thinking_is_signed_and_replays() -> None:
    provider = ScriptedProvider([[ReasoningChunk("Let me think. "), ReasoningChunk("Yes."), *text_turn("Answer")], text_turn("Again")])
    async with gateway(provider) as (_, _, sdk):
        async with sdk.messages.stream(
            model=AGENT, max_tokens=100, thinking={"type": "enabled", "budget_tokens": 1024}, messages=[{"role": "user", "content": "q"}]
        ) as stream:
            first = await stream.get_final_message()
        thinking, text = first.content
        assert thinking.type == "thinking" and thinking.thinking == "Let me think. Yes." and thinking.signature.startswith("gw1.")
        assert text.type == "text" and text.text == "Answer"
        history: list[Any] = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "more"},
        ]
        again = await sdk.messages.create(model=AGENT, max_tokens=100, messages=history)
        assert again.content[0].type == "text" and again.content[0].text == "Again"
        assert [x.content for x in provider.requests[1].messages if x.role == "assistant"] == ["Answer"]
        foreign = {"type": "thinking", "thinking": "from elsewhere", "signature": "EqQBCkgIARABGAIiQ..."}
        history[1] = {"role": "assistant", "content": [foreign, {"type": "redacted_thinking", "data": "opaque=="}, {"type": "text", "text": "Answer"}]}
        await sdk.messages.create(model=AGENT, max_tokens=100, messages=history)
        history[1] = {"role": "assistant", "content": [{**thinking.model_dump(), "thinking": "edited"}, {"type": "text", "text": "Answer"}]}
        with pytest.raises(anthropic.BadRequestError, match="Invalid signature in thinking block"):
            await sdk.messages.create(model=AGENT, max_tokens=100, messages=history)


async def test_a_quiet_stream_gets_ping_events() -> None:
    provider = ScriptedProvider([text_turn("a", "b", "c")], delay_s=0.3)
    async with gateway(provider, sse_keepalive_s=0.1) as (_, url, _), httpx.AsyncClient(base_url=url, timeout=20) as http:
        body = {"model": AGENT, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi" * 40}]}
        async with http.stream("POST", "/v1/messages", json=body, headers={"x-api-key": TOKEN}) as response:
            events = [event async for event in sse_events(response)]
        assert any(event.event == "ping" and event.json() == {"type": "ping"} for event in events)
        assert events[-1].event == "message_stop"


async def test_structured_output_and_a_forced_tool_reach_the_model() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    provider = ScriptedProvider([text_turn('{"n": 1}'), tool_turn("get_weather", '{"city": "Oslo"}')])
    async with gateway(provider) as (_, _, sdk):
        answer = await sdk.messages.create(
            model=AGENT, max_tokens=50, messages=[{"role": "user", "content": "n?"}],
            extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
        )
        assert answer.content[0].type == "text" and json.loads(answer.content[0].text) == {"n": 1}
        assert provider.requests[0].output_format == m.OutputFormat(type="json_schema", schema=schema)
        forced = await sdk.messages.create(
            model=AGENT, max_tokens=50, messages=[{"role": "user", "content": "go"}], tools=[WEATHER],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        )
        assert forced.stop_reason == "tool_use"
        assert provider.requests[1].tool_choice == m.ToolChoice(mode="tool", name="get_weather")
        assert provider.requests[1].parallel_tool_calls is False
        with pytest.raises(anthropic.BadRequestError):  # forcing a tool nobody offers
            await sdk.messages.create(model=AGENT, max_tokens=50, messages=[{"role": "user", "content": "go"}], tool_choice={"type": "tool", "name": "nope"})


async def test_the_clients_own_cancel_interrupts_the_run() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(500)])], delay_s=0.01)
    async with gateway(provider) as (kernel, _, sdk):
        async with sdk.messages.stream(model=AGENT, max_tokens=1000, messages=[{"role": "user", "content": "hi"}]) as stream:
            async for event in stream:
                if event.type == "content_block_delta":
                    break  # the client leaves mid-answer
        with anyio.fail_after(10):  # the upstream stream is closed and the throw-away session deleted
            while provider.closed_streams < 1 or kernel.sessions:
                await anyio.sleep(0.01)
        assert len(provider.requests) == 1


async def test_an_api_key_as_x_api_key_is_its_principal() -> None:
    provider = ScriptedProvider([text_turn("keyed")])
    async with gateway(provider) as (kernel, url, _):
        _, prompter = await kernel.keys.create("claude-user")
        _, reader = await kernel.keys.create("reader", scopes=["read"])
        body = {"model": AGENT, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            allowed = await http.post("/v1/messages", json=body, headers={"x-api-key": prompter})
            refused = await http.post("/v1/messages", json=body, headers={"x-api-key": reader})
        assert allowed.status_code == 200 and allowed.json()["content"][0]["text"] == "keyed"
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
        assert refused.headers["x-should-retry"] == "false"


async def test_a_run_past_run_timeout_is_a_timeout_error() -> None:
    provider = ScriptedProvider([text_turn("late")], delay_s=30)
    async with gateway(provider, run_timeout_s=0.3) as (kernel, _, sdk):
        with pytest.raises(anthropic.APIStatusError) as whole:
            await sdk.messages.create(model=AGENT, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.APIStatusError) as streamed:  # no output yet: the real status
            async with sdk.messages.stream(model=AGENT, max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as stream:
                await stream.get_final_message()
        for caught in (whole, streamed):
            assert caught.value.status_code == 504 and caught.value.body["error"]["type"] == "timeout_error"  # type: ignore[index]
            assert caught.value.response.headers["x-should-retry"] == "true"
        with anyio.fail_after(10):  # both runs were interrupted and their sessions deleted
            while kernel.sessions or provider.closed_streams < 2:
                await anyio.sleep(0.01)


async def test_draining_refuses_new_runs_529_and_cuts_the_rest_with_an_error_event() -> None:
    provider = ScriptedProvider([text_turn(*[f"w{i} " for i in range(300)])], delay_s=0.01)
    async with gateway(provider) as (kernel, _, sdk):
        seen: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as cut:
            async with sdk.messages.stream(model=AGENT, max_tokens=500, messages=[{"role": "user", "content": "hi"}]) as stream:
                async for event in stream:
                    seen.append(event.type)
                    if seen.count("content_block_delta") == 1 and event.type == "content_block_delta":
                        await kernel.drain(0.0)  # SIGTERM's drain with no grace: the run in flight is interrupted
        assert "draining" in str(cut.value) and "message_stop" not in seen
        with pytest.raises(anthropic.APIStatusError) as refused:
            await sdk.messages.create(model=AGENT, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 529 and refused.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
        assert refused.value.response.headers["x-should-retry"] == "true" and refused.value.response.headers["retry-after"] == "1"
