"""``GET /metrics`` after real runs: counts, labels without ids, token gating, negotiation,
bounded cardinality — over the http transport and OpenFang's port, on both backends."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets

from kernel import model as m
from kernel.testing import ScriptedProvider, failing_turn, running_kernel, text_turn, tool_turn
from kernel.tools import Tool
from plugins.tools.builtin import BUILTIN_TOOLS
from tests.asyncio_clients import in_asyncio
from tests.transports.http._helpers import client, http_server
from tests.transports.openfang._helpers import serving

from ._support import METRICS, label_values, samples, value

pytestmark = pytest.mark.anyio


async def test_runs_tools_and_model_calls_are_counted_over_http() -> None:
    provider = ScriptedProvider([tool_turn("current_time", "{}"), text_turn("It is", " now."), failing_turn("upstream exploded")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS, observers=[METRICS]) as kernel, http_server(kernel) as url, client(url) as http:
        agent = kernel.settings.agents[0].agent_id()
        assert (await http.post("/v1/sessions", json={"session_id": "s-metrics-1"})).status_code in (200, 201)
        done = await http.post("/v1/sessions/s-metrics-1/prompt", json={"text": "what time is it?"}, headers={"accept": "application/json"})
        assert done.status_code == 200, done.text
        failed = await http.post("/v1/sessions/s-metrics-1/prompt", json={"text": "again"}, headers={"accept": "application/json"})
        assert failed.status_code == 502 and failed.json()["error"]["code"] == "provider_error", failed.text
        scrape = await http.get("/metrics")
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("text/plain; version=")
        text = scrape.text
        assert value(text, "gateway_runs_total", transport="http", agent=agent, outcome="completed") == 1
        assert value(text, "gateway_runs_total", transport="http", agent=agent, outcome="failed") == 1
        assert value(text, "gateway_run_duration_seconds_count", transport="http", agent=agent) == 2
        assert value(text, "gateway_time_to_first_token_seconds_count", transport="http", agent=agent) == 1
        assert value(text, "gateway_tool_calls_total", tool="current_time", outcome="ok") == 1
        assert value(text, "gateway_tool_duration_seconds_count", tool="current_time") == 1
        assert value(text, "gateway_provider_errors_total", provider="scripted", code="provider_error") == 1
        # The upstream side, in GenAI names: three model calls, one of them failed.
        genai = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "scripted", "gen_ai_request_model": "scripted-1"}
        assert value(text, "gen_ai_client_operation_duration_seconds_count", **genai) == 3
        assert value(text, "gen_ai_client_operation_duration_seconds_count", **genai, error_type="provider_error") == 1
        assert value(text, "gen_ai_client_token_usage_sum", **genai, gen_ai_token_type="input") == 4 + 3
        assert value(text, "gen_ai_client_token_usage_sum", **genai, gen_ai_token_type="output") == 2 + 5
        token_buckets = {float(labels["le"]) for name, labels, _ in samples(text) if name == "gen_ai_client_token_usage_bucket"}
        assert token_buckets == {*(4.0**i for i in range(14)), float("inf")}  # 1, 4, 16 … 67108864
        seconds = {float(labels["le"]) for name, labels, _ in samples(text) if name == "gen_ai_client_operation_duration_seconds_bucket"}
        assert min(seconds) == 0.01 and max(seconds - {float("inf")}) == 81.92 and len(seconds) == 15
        assert value(text, "gateway_active_runs") == 0
        assert value(text, "gateway_sessions", state="idle") == 1
        assert value(text, "process_cpu_seconds_total") > 0
        # No id of any kind in a label.
        ids = {"s-metrics-1", done.json()["run_id"], failed.json()["error"]["details"]["run_id"]}
        assert not label_values(text) & ids
        assert not label_values(text, "gen_ai_") & ids


async def test_openmetrics_is_negotiated_and_a_token_guards_the_scrape() -> None:
    async with running_kernel(observers=[METRICS]) as kernel, http_server(kernel, token="s3cret-token") as url:
        async with client(url) as anonymous:
            refused = await anonymous.get("/metrics")
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == "Bearer"
        async with client(url, token="s3cret-token") as prometheus:
            plain = await prometheus.get("/metrics")
            assert plain.status_code == 200 and "# TYPE gateway_active_runs gauge" in plain.text
            open_metrics = await prometheus.get("/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"})
            assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
            assert open_metrics.text.rstrip().endswith("# EOF")


async def test_labels_stay_bounded_for_unknown_models_tools_and_agents() -> None:
    provider = ScriptedProvider([tool_turn("invented_tool", "{}"), text_turn("ok")])
    async with running_kernel(provider, tools=BUILTIN_TOOLS, observers=[METRICS]) as kernel:
        metrics = kernel.observers.metrics
        assert metrics is not None
        for n in range(3):
            options = m.PromptOptions(model=f"made-up-model-{n}")
            caller = m.Caller(transport="http", traceparent=None)
            reply = await kernel.execute(m.Prompt(session_id=f"s-bound-{n}", text="hi", options=options), caller=caller)
            assert isinstance(reply, m.Accepted)
            await kernel.wait_idle(5.0)
        text = metrics.exposition(None)[0].decode()
        models = {labels["gen_ai_request_model"] for name, labels, _ in samples(text) if "gen_ai_request_model" in labels}
        assert models == {"other"}
        assert value(text, "gateway_tool_calls_total", tool="other", outcome="rejected") == 1
        assert {labels["tool"] for name, labels, _ in samples(text) if name.startswith("gateway_tool_calls")} == {"other"}
        assert not label_values(text) & {f"s-bound-{n}" for n in range(3)}
        # A transport name that is not one is not a label either.
        await kernel.execute(m.Prompt(session_id="s-bound-x", text="hi"), caller=m.Caller(transport="Not A Transport!"))
        await kernel.wait_idle(5.0)
        text = metrics.exposition(None)[0].decode()
        assert {labels["transport"] for name, labels, _ in samples(text) if name == "gateway_runs_total"} == {"http", "other"}


async def test_openfang_port_serves_metrics_and_counts_its_connections() -> None:
    async with serving(ScriptedProvider([text_turn("Hi", " there")]), observers=[METRICS]) as server, httpx.AsyncClient(base_url=server.url) as http:
        ok = await http.post(f"/api/agents/{server.agent_id}/message", json={"message": "hello"})
        assert ok.status_code == 200
        text = (await http.get("/metrics")).text
        assert value(text, "gateway_runs_total", transport="openfang", outcome="completed") == 1

        async def open_socket_and_scrape() -> tuple[float, float]:
            async with websockets.connect(server.ws_url) as ws:
                await ws.recv()
                async with httpx.AsyncClient(base_url=server.url) as scraper:
                    while_open = value((await scraper.get("/metrics")).text, "gateway_connections", transport="openfang")
            async with httpx.AsyncClient(base_url=server.url) as scraper:
                for _ in range(200):  # until the server has seen the close (bounded)
                    after = value((await scraper.get("/metrics")).text, "gateway_connections", transport="openfang")
                    if after == 0:
                        break
                    await asyncio.sleep(0.01)
            return while_open, after

        while_open, after = await in_asyncio(open_socket_and_scrape)
        assert (while_open, after) == (1, 0)


async def test_no_metrics_route_without_the_metrics_observer() -> None:
    async with running_kernel() as kernel, http_server(kernel) as url, client(url) as http:
        assert (await http.get("/metrics")).status_code == 404



async def test_every_http_serving_transport_answers_metrics() -> None:
    from tests.transports.a2a._helpers import a2a_server
    from tests.transports.agui._helpers import agui_server

    def origin(url: str) -> str:
        parsed = httpx.URL(url)
        return f"{parsed.scheme}://{parsed.host}:{parsed.port}"

    async with running_kernel(observers=[METRICS]) as kernel:
        async with a2a_server(kernel) as a2a_url, httpx.AsyncClient(base_url=origin(a2a_url)) as http:
            scrape = await http.get("/metrics")
            assert scrape.status_code == 200 and "gateway_active_runs" in scrape.text
        async with agui_server(kernel) as agui_url, httpx.AsyncClient(base_url=origin(agui_url)) as http:
            scrape = await http.get("/metrics")
            assert scrape.status_code == 200 and "gateway_active_runs" in scrape.text


async def _done(args: object, ctx: object) -> str:
    return "done"


GUARDED = Tool(name="guarded", description="asks first", parameters={"type": "object"}, handler=_done, requires_approval=True)


async def test_approvals_interrupts_limits_and_cut_followers_are_counted() -> None:
    from kernel import Follower
    from kernel.settings import Settings
    from tests.kernel.helpers import next_of, run_events

    provider = ScriptedProvider([tool_turn("guarded", call_id="g1"), text_turn("after")], delay_s=0.01)
    settings = Settings()
    settings.session.subscriber_buffer = 2
    settings.session.lag_grace_s = 0.0
    async with running_kernel(provider, settings=settings, tools=[GUARDED], observers=[METRICS]) as kernel:
        metrics = kernel.observers.metrics
        assert metrics is not None
        session = await kernel.session("s")
        sub = session.hub.subscribe(buffer_size=10_000)
        # A tool approval asked and answered yes.
        await kernel.execute(m.Prompt(session_id="s", text="do it"), caller=m.Caller(transport="http"))
        asked = await next_of(sub, m.ToolApprovalRequested)
        await kernel.execute(m.ResolveToolApproval(session_id="s", call_id=asked.call_id, approved=True))
        await run_events(sub)
        # An interrupt mid-stream.
        provider.turns = [text_turn(*("word " for _ in range(50)))]
        provider.requests.clear()
        await kernel.execute(m.Prompt(session_id="s", text="long"), caller=m.Caller(transport="http"))
        await next_of(sub, m.TextDelta)
        await kernel.execute(m.Interrupt(session_id="s"))
        await run_events(sub)
        # The turn limit, answered "stop" by the policy: the run ends as a limit.
        await kernel.execute(m.ConfigureSession(session_id="s", max_turns=1))
        stop = m.PromptOptions(approval=m.ApprovalPolicy(mode="approve", turn_limit="stop"))
        await kernel.execute(m.Prompt(session_id="s", text="again", options=stop), caller=m.Caller(transport="http"))
        await run_events(sub)
        # A follower that does not read is cut off (buffer 2, no grace) while a run streams.
        lagging = await Follower.open(kernel, "s", client="openfang")
        await kernel.execute(m.ConfigureSession(session_id="s", max_turns=0))
        await kernel.execute(m.Prompt(session_id="s", text="stream"), caller=m.Caller(transport="http"))
        await run_events(sub)
        text = metrics.exposition(None)[0].decode()
        assert value(text, "gateway_approvals_total", outcome="approved") == 1
        assert value(text, "gateway_tool_calls_total", tool="guarded", outcome="ok") == 1
        assert value(text, "gateway_runs_total", transport="http", outcome="completed") == 2
        assert value(text, "gateway_runs_total", transport="http", outcome="interrupted") == 1
        assert value(text, "gateway_runs_total", transport="http", outcome="limit") == 1
        assert value(text, "gen_ai_client_operation_duration_seconds_count", error_type="interrupted") == 1
        assert value(text, "gateway_followers_cut_total", transport="openfang") == 1
        lagging.close()
