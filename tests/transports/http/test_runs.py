"""Run edge cases over a real server: timeouts, a busy session, client disconnects,
subscriber lag, and shutdown with open streams."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import anyio
import httpx
import msgspec
import openai
import pytest

from kernel import Chunk, Follower, ProviderError, ProviderRequest, ResponseStarted
from kernel import model as m
from kernel.settings import SessionSettings, Settings
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from transports.http import HttpConfig, HttpTransport
from transports.shared import ConfigError

from ._helpers import client, http_scope, http_server, sse_events

pytestmark = pytest.mark.anyio


async def test_run_timeout_gives_504_and_interrupts() -> None:
    provider = ScriptedProvider([text_turn(*["slow "] * 200)], delay_s=0.02)
    async with running_kernel(provider) as kernel, http_server(kernel, run_timeout_s=0.3) as url, client(url) as http:
        session = (await http.post("/v1/sessions", json={})).json()["session"]["session_id"]
        response = await http.post(f"/v1/sessions/{session}/prompt", json={"text": "x"}, headers={"accept": "application/json"})
        assert response.status_code == 504 and response.json()["error"]["code"] == "timeout"
        with anyio.fail_after(5):
            await kernel.sessions[session].wait_idle()  # the run was interrupted, not left running
        history = (await http.get(f"/v1/sessions/{session}/history")).json()["messages"]
        assert history[-1]["role"] == "assistant" and 0 < len(history[-1]["content"]) < len("slow " * 200)

        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            await sdk.chat.completions.create(model="default", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 504 and info.value.code == "timeout"
        provider.turns = [[*text_turn("late")]]
        provider.delay_s = 0.5  # nothing comes out before the timeout: no headers were sent yet
        with pytest.raises(openai.APIStatusError) as streamed:
            await sdk.chat.completions.create(model="default", messages=[{"role": "user", "content": "x"}], stream=True)
        assert streamed.value.status_code == 504
        await sdk.close()


async def test_full_inbox_is_409_busy() -> None:
    settings = Settings(session=SessionSettings(inbox_size=1))
    provider = ScriptedProvider([text_turn(*["t "] * 100)], delay_s=0.02)
    async with running_kernel(provider, settings=settings) as kernel, http_server(kernel) as url, client(url) as http:
        session = (await http.post("/v1/sessions", json={})).json()["session"]["session_id"]
        statuses = []
        for _ in range(3):
            response = await http.post(f"/v1/sessions/{session}/prompt", params={"wait": "false"}, json={"text": "x"})
            statuses.append(response.status_code)
            await anyio.sleep(0.05)
        assert statuses == [202, 202, 409]
        assert response.json()["error"]["code"] == "busy"
        assert (await http.post(f"/v1/sessions/{session}/interrupt")).status_code == 200


async def test_non_streamed_chat_client_disconnect_interrupts() -> None:
    provider = ScriptedProvider([text_turn(*["w "] * 300)], delay_s=0.01)
    async with running_kernel(provider) as kernel, http_server(kernel) as url:
        async with httpx.AsyncClient(base_url=url, timeout=0.3) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.post("/v1/chat/completions", json={"model": "default", "messages": [{"role": "user", "content": "x"}]})
        started = anyio.current_time()
        with anyio.fail_after(5):
            while kernel.sessions:
                await anyio.sleep(0.01)
        assert anyio.current_time() - started < 2.5  # far sooner than the 3 s the run needs


async def test_streamed_chat_client_disconnect_before_output_interrupts() -> None:
    provider = ScriptedProvider([text_turn("never", "seen")], delay_s=60)
    async with running_kernel(provider) as kernel, http_server(kernel) as url:
        async with httpx.AsyncClient(base_url=url, timeout=0.3) as http:
            body = {"model": "default", "stream": True, "messages": [{"role": "user", "content": "x"}]}
            with pytest.raises(httpx.ReadTimeout):  # no output, so no headers yet
                await http.post("/v1/chat/completions", json=body)
        with anyio.fail_after(5):  # the run alone would take two minutes
            while kernel.sessions:
                await anyio.sleep(0.01)
        assert provider.closed_streams == 1 and provider.requests


async def test_follower_resubscribes_after_lag_without_loss() -> None:
    settings = Settings(session=SessionSettings(subscriber_buffer=2, lag_grace_s=0.0))
    pieces = [f"{i}," for i in range(40)]
    provider = ScriptedProvider([text_turn(*pieces)], delay_s=0.001)
    async with running_kernel(provider, settings=settings) as kernel:
        session = await kernel.session()
        follower = await Follower.open(kernel, session.id, stop_on_loss=True)
        await kernel.execute(m.Prompt(session_id=session.id, text="go"))
        with anyio.fail_after(5):
            await session.wait_idle()  # nobody read meanwhile: the subscriber was cut off
        events: list[m.Event] = []
        async with follower:
            while not events or not isinstance(events[-1], m.RunFinished):
                with anyio.fail_after(5):
                    events.extend(await follower.next_batch())
        assert not any(isinstance(e, m.SubscriberLagged) for e in events)
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), "resubscribed from the retained log: every seq once"
        assert "".join(e.text for e in events if isinstance(e, m.TextDelta)) == "".join(pieces)


async def test_follower_reports_lost_events() -> None:
    settings = Settings(session=SessionSettings(subscriber_buffer=2, lag_grace_s=0.0, event_retention=4))
    async with running_kernel(ScriptedProvider([text_turn(*["x"] * 30)], delay_s=0.001), settings=settings) as kernel:
        session = await kernel.session()
        follower = await Follower.open(kernel, session.id, stop_on_loss=True)
        await kernel.execute(m.Prompt(session_id=session.id, text="go"))
        with anyio.fail_after(5):
            await session.wait_idle()
        batches = []
        with anyio.fail_after(5):
            while batch := await follower.next_batch():
                batches.append(batch)
        assert isinstance(batches[-1][-1], m.SubscriberLagged)


async def test_shutdown_ends_open_event_streams() -> None:
    async with running_kernel(ScriptedProvider()) as kernel:
        session = await kernel.session()
        async with anyio.create_task_group() as tg:
            url = await tg.start(HttpTransport().serve, kernel, HttpConfig(port=0, sse_keepalive_s=0.05))
            async with client(url) as http, http.stream("GET", f"/v1/sessions/{session.id}/events") as response:
                assert response.status_code == 200
                tg.cancel_scope.cancel()
                with anyio.fail_after(5):
                    async for _ in sse_events(response):
                        pass  # ends when the server goes away


async def test_keepalive_comments_on_idle_streams() -> None:
    async with running_kernel(ScriptedProvider()) as kernel, http_server(kernel, sse_keepalive_s=0.05) as url, client(url) as http:
        session = (await http.post("/v1/sessions", json={})).json()["session"]["session_id"]
        async with http.stream("GET", f"/v1/sessions/{session}/events") as response:
            lines = []
            async for line in response.aiter_lines():
                lines.append(line)
                if len(lines) >= 2:
                    break
        assert lines[0] == ": keep-alive"


def test_config_defaults_and_validation() -> None:
    config = msgspec.convert({}, HttpConfig)
    assert (config.port, config.cors_origins, config.sse_keepalive_s, config.openai_tool_approval) == (8000, [], 15.0, "reject")
    assert (config.host, config.max_body_bytes, config.requests_per_minute_per_ip, config.run_timeout_s) == ("127.0.0.1", 4_194_304, 600, 600.0)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"surprise": 1}, HttpConfig)
    with pytest.raises(ConfigError):
        HttpConfig(run_timeout_s=0)
    with pytest.raises(ConfigError):
        HttpConfig(sse_keepalive_s=-1)


class AcceptsThenAnswers:
    """A model that accepts a request at once (``ResponseStarted``, as the openai provider
    does when the upstream's headers arrive) and answers — or fails — once ``release`` is set."""

    name = "accepting"
    model = "accepting-1"

    def __init__(self, failure: ProviderError | None = None) -> None:
        self.release = anyio.Event()
        self.failure = failure

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        yield ResponseStarted()
        await self.release.wait()
        if self.failure is not None:
            raise self.failure
        for chunk in text_turn("Hello", " there"):
            yield chunk

    async def aclose(self) -> None:
        return None


#: dialect -> (path, a streamed request, what a whole answer ends with, what a failed one carries)
STREAMED = {
    "openai": ("/v1/chat/completions", {"model": "default", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
               "data: [DONE]", '"error"'),
    "responses": ("/v1/responses", {"model": "default", "stream": True, "input": "hi"}, "event: response.completed", "event: response.failed"),
    "anthropic": ("/v1/messages", {"model": "default", "stream": True, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
                  "event: message_stop", "event: error"),
}


@pytest.mark.parametrize("dialect", STREAMED)
async def test_streamed_headers_arrive_while_the_model_works(dialect: str) -> None:
    """Once the model accepted the request (``model_responding``) the headers go out, before
    the first token: the client reads them while the model works, as from the upstream."""
    path, body, whole, _ = STREAMED[dialect]
    provider = AcceptsThenAnswers()
    async with running_kernel(provider) as kernel, http_server(kernel) as url, client(url) as http:
        with anyio.fail_after(10):
            async with http.stream("POST", path, json=body, headers={"x-api-key": "unused"}) as response:
                assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
                assert not provider.release.is_set()  # the headers came before any of the answer
                provider.release.set()
                text = (await response.aread()).decode()
        assert "Hello" in text and "there" in text and whole in text


@pytest.mark.parametrize("dialect", STREAMED)
async def test_a_failure_after_the_model_accepted_ends_the_stream_as_a_failure(dialect: str) -> None:
    """The headers are out: a failure before the first token is an in-stream error, never a
    whole answer (an upstream that accepts and then fails reports it in its stream too)."""
    path, body, whole, failed = STREAMED[dialect]
    provider = AcceptsThenAnswers(ProviderError("the upstream broke off", code="provider_error"))
    async with running_kernel(provider) as kernel, http_server(kernel) as url, client(url) as http:
        with anyio.fail_after(10):
            async with http.stream("POST", path, json=body, headers={"x-api-key": "unused"}) as response:
                assert response.status_code == 200
                provider.release.set()
                text = (await response.aread()).decode()
        assert failed in text and "the upstream broke off" in text and whole not in text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "default", "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/messages", {"model": "default", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"model": "default", "input": "hi", "store": False}),
    ],
)
async def test_a_whole_answer_is_sent_before_its_watch_stops_and_its_session_is_deleted(path: str, body: dict[str, object]) -> None:
    """A non-stream answer goes out first; stopping the client's watch (its task stopped and
    joined) and deleting the throw-away session come after it, not before the client has it."""
    from transports.http.server import HttpApp

    async with running_kernel(ScriptedProvider([text_turn("whole")])) as kernel:
        app = HttpApp(kernel, HttpConfig())
        order: list[str] = []
        sessions_at_body: list[int] = []
        delivered = False
        watch_waits = anyio.Event()

        async def receive() -> dict[str, object]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": msgspec.json.encode(body), "more_body": False}
            watch_waits.set()
            try:
                await anyio.sleep_forever()
            finally:
                order.append("watch stopped")
            raise AssertionError("unreachable")

        async def send(message: dict[str, object]) -> None:
            if message["type"] == "http.response.body":
                await watch_waits.wait()  # the watch is under way (a stopped one never waits)
                order.append("body")
                sessions_at_body.append(len(kernel.sessions))
            elif message["type"] == "http.response.start":
                assert message["status"] == 200, message

        with anyio.fail_after(10):
            await app(http_scope(path), receive, send)
        assert order == ["body", "watch stopped"], order
        assert sessions_at_body == [1] and not kernel.sessions  # deleted after the body, before the app returned
