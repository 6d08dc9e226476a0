"""OpenTelemetry traces of real runs: the span tree and its GenAI attributes, the caller's
traceparent continued, the upstream receiving the chat span's traceparent, and export to a
real OTLP/HTTP receiver on 127.0.0.1 — on both backends."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kernel import Kernel, OpenAISettings, Settings
from kernel import model as m
from kernel.testing import running_kernel
from plugins.providers.openai import OpenAIProvider
from plugins.telemetry.otel import TracingObserver, tracing_observer, tracing_wanted
from plugins.tools.builtin import BUILTIN_TOOLS
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCallScript, fake_openai_server
from tests.transports.http._helpers import client, http_server
from transports.shared import ServerConfig, serve_asgi

pytestmark = pytest.mark.anyio

TRACE_ID = secrets.token_hex(16)
PARENT_ID = secrets.token_hex(8)
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@asynccontextmanager
async def traced_kernel(observer: Callable[[Kernel], Any]) -> AsyncIterator[tuple[Kernel, FakeOpenAIServer]]:
    """A kernel over the openai provider and the scripted upstream: one tool round, then text."""
    script = [Reply(tool_calls=[ToolCallScript("current_time")], usage=(11, 3)), Reply(text="It is now.", usage=(20, 4))]
    async with fake_openai_server(script) as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-upstream", base_url=upstream.base_url, model="fake-model", timeout_s=10.0, max_retries=0))
        async with running_kernel(provider, tools=BUILTIN_TOOLS, observers=[observer]) as kernel:
            yield kernel, upstream
        await provider.aclose()


def memory_tracing(*, capture_content: bool = False) -> tuple[TracingObserver, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TracingObserver(provider, capture_content=capture_content), exporter


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def run_one(kernel: Kernel, caller: m.Caller, session_id: str = "s-trace") -> None:
    reply = await kernel.execute(m.Prompt(session_id=session_id, text="what time is it?"), caller=caller)
    assert isinstance(reply, m.Accepted)
    assert await kernel.wait_idle(10.0)


async def test_a_run_is_one_trace_continuing_the_callers_and_the_upstream_carries_it_on() -> None:
    observer, exporter = memory_tracing()
    async with traced_kernel(lambda _k: observer) as (kernel, upstream):
        await run_one(kernel, m.Caller(transport="http", traceparent=TRACEPARENT))
        spans = exporter.get_finished_spans()
        agent = kernel.settings.agents[0].agent_id()
        [run] = by_name(spans, "invoke_agent ")
        assert run.name == f"invoke_agent {agent}"
        assert run.context is not None and run.parent is not None
        assert f"{run.context.trace_id:032x}" == TRACE_ID and f"{run.parent.span_id:016x}" == PARENT_ID
        assert run.attributes is not None
        assert {k: run.attributes[k] for k in ("gen_ai.operation.name", "gen_ai.agent.id", "gen_ai.conversation.id", "gateway.transport")} == {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": agent, "gen_ai.conversation.id": "s-trace", "gateway.transport": "http",
        }
        assert run.attributes["gateway.run.outcome"] == "completed"
        chats = by_name(spans, "chat ")
        assert [c.name for c in chats] == ["chat fake-model", "chat fake-model"]
        assert all(c.parent is not None and c.parent.span_id == run.context.span_id for c in chats)
        first, second = (dict(c.attributes or {}) for c in chats)
        assert first["gen_ai.provider.name"] == "openai" and first["gen_ai.request.model"] == "fake-model"
        assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (11, 3)
        assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
        assert (second["gen_ai.usage.input_tokens"], second["gen_ai.usage.output_tokens"], second["gen_ai.response.finish_reasons"]) == (20, 4, ("stop",))
        assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & {*first, *second}  # content is opt-in
        [tool] = by_name(spans, "execute_tool ")
        assert tool.name == "execute_tool current_time" and tool.parent is not None and tool.parent.span_id == run.context.span_id
        assert tool.attributes is not None and tool.attributes["gen_ai.tool.name"] == "current_time"
        assert tool.attributes["gateway.tool.outcome"] == "ok" and tool.attributes["gen_ai.tool.call.id"]
        # Each upstream request carried its own chat span's context, in the caller's trace.
        sent = [headers.get("traceparent") for headers in upstream.headers]
        assert sent == [f"00-{TRACE_ID}-{c.context.span_id:016x}-01" for c in chats if c.context is not None]
        # Nothing was left open: every span ended, all in one trace.
        assert {s.context.trace_id for s in spans if s.context is not None} == {int(TRACE_ID, 16)}


async def test_a_failed_model_call_marks_the_spans_and_a_missing_traceparent_starts_a_trace() -> None:
    observer, exporter = memory_tracing()
    async with fake_openai_server([Reply.error(500, "upstream exploded")]) as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-upstream", base_url=upstream.base_url, model="fake-model", timeout_s=10.0, max_retries=0))
        async with running_kernel(provider, observers=[lambda _k: observer]) as kernel:
            await run_one(kernel, m.Caller(transport="http", traceparent="not-a-traceparent"))
        await provider.aclose()
    spans = exporter.get_finished_spans()
    [run] = by_name(spans, "invoke_agent ")
    [chat] = by_name(spans, "chat ")
    assert run.parent is None  # an invalid traceparent is not continued
    assert run.attributes is not None and run.attributes["gateway.run.outcome"] == "failed"
    assert chat.attributes is not None and chat.attributes["error.type"] == "provider_error"
    assert chat.status.status_code.name == "ERROR" and run.status.status_code.name == "ERROR"
    assert upstream.headers[0]["traceparent"].split("-")[1] == f"{run.context.trace_id:032x}"  # type: ignore[union-attr]


async def test_the_traceparent_header_of_an_http_request_is_continued() -> None:
    observer, exporter = memory_tracing()
    async with traced_kernel(lambda _k: observer) as (kernel, _upstream), http_server(kernel) as url, client(url) as http:
        assert (await http.post("/v1/sessions", json={"session_id": "s-http-trace"})).status_code in (200, 201)
        done = await http.post(
            "/v1/sessions/s-http-trace/prompt", json={"text": "what time is it?"}, headers={"accept": "application/json", "traceparent": TRACEPARENT}
        )
        assert done.status_code == 200, done.text
    [run] = by_name(exporter.get_finished_spans(), "invoke_agent ")
    assert run.context is not None and run.parent is not None
    assert (f"{run.context.trace_id:032x}", f"{run.parent.span_id:016x}") == (TRACE_ID, PARENT_ID)
    assert run.attributes is not None and run.attributes["gateway.transport"] == "http"


class OtlpReceiver:
    """A tiny OTLP/HTTP trace receiver: decodes each ``POST /v1/traces`` protobuf body."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.content_types: list[str] = []
        self.arrived = anyio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status = 404
        if scope["method"] == "POST" and scope["path"] == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            self.requests.append(request)
            self.content_types.append(dict(scope["headers"]).get(b"content-type", b"").decode())
            self.arrived.set()
            status = 200
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/x-protobuf")]})
        await send({"type": "http.response.body", "body": b""})

    def spans(self) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """(span name, span attributes, resource attributes) of everything received."""
        out = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attrs = {a.key: _any_value(a.value) for a in span.attributes}
                        out.append((span.name, attrs, resource))
        return out


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


async def test_spans_are_exported_over_otlp_http_as_the_otel_variables_say(monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = OtlpReceiver()
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_asgi, receiver, ServerConfig(port=0))
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{host}:{port}", "OTEL_BSP_SCHEDULE_DELAY": "50"}
        for key, val in env.items():
            monkeypatch.setenv(key, val)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        made: list[TracingObserver] = []

        def factory(kernel: Kernel) -> TracingObserver | None:
            observer = tracing_observer(kernel)
            if observer is not None:
                made.append(observer)
            return observer

        async with traced_kernel(factory) as (kernel, _upstream):
            await run_one(kernel, m.Caller(transport="openfang", traceparent=TRACEPARENT))
        [observer] = made
        assert await anyio.to_thread.run_sync(observer.provider.force_flush, 10_000)
        with anyio.fail_after(10):
            await receiver.arrived.wait()
        names = sorted(name for name, _, _ in receiver.spans())
        assert names == ["chat fake-model", "chat fake-model", "execute_tool current_time", f"invoke_agent {kernel.settings.agents[0].agent_id()}"]
        assert {resource["service.name"] for _, _, resource in receiver.spans()} == {"gateway"}
        assert all(ct == "application/x-protobuf" for ct in receiver.content_types)
        [run_attrs] = [attrs for name, attrs, _ in receiver.spans() if name.startswith("invoke_agent")]
        assert run_attrs["gateway.transport"] == "openfang" and run_attrs["gen_ai.conversation.id"] == "s-trace"
        await anyio.to_thread.run_sync(observer.provider.shutdown)
        tg.cancel_scope.cancel()


async def test_message_content_is_recorded_only_when_asked() -> None:
    observer, exporter = memory_tracing(capture_content=True)
    async with traced_kernel(lambda _k: observer) as (kernel, _upstream):
        await run_one(kernel, m.Caller(transport="http"))
    first, second = (dict(c.attributes or {}) for c in by_name(exporter.get_finished_spans(), "chat "))
    sent = json.loads(first["gen_ai.input.messages"])
    assert sent[-1] == {"role": "user", "parts": [{"type": "text", "content": "what time is it?"}]}
    asked = json.loads(second["gen_ai.input.messages"])
    assert [m["role"] for m in asked[-2:]] == ["assistant", "tool"]
    assert [p["name"] for p in asked[-2]["parts"] if p["type"] == "tool_call"] == ["current_time"]
    assert asked[-1]["parts"][0]["type"] == "tool_call_response"
    assert json.loads(second["gen_ai.output.messages"]) == [{"role": "assistant", "parts": [{"type": "text", "content": "It is now."}], "finish_reason": "stop"}]


def test_the_content_opt_in_is_the_conventions_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"OTEL_TRACES_EXPORTER": "console"}
    kernel = Kernel(Settings(), providers={})
    plain = tracing_observer(kernel, env)
    asked = tracing_observer(kernel, {**env, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert plain is not None and asked is not None
    assert (plain.capture_content, asked.capture_content) == (False, True)
    assert tracing_observer(kernel, {}) is None
    for observer in (plain, asked):
        observer.provider.shutdown()


def test_tracing_is_off_unless_the_standard_variables_ask() -> None:
    assert tracing_wanted({}) is None
    assert tracing_wanted({"OTEL_SERVICE_NAME": "gw"}) is None
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) == "otlp"
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}) == "otlp"
    assert tracing_wanted({"OTEL_TRACES_EXPORTER": "console"}) == "console"
    assert tracing_wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) is None
    assert tracing_wanted({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) is None


async def test_the_traceparent_of_a_websocket_upgrade_is_continued() -> None:
    from kernel.testing import ScriptedProvider
    from tests.asyncio_clients import in_asyncio
    from tests.transports.openfang._helpers import connect, recv_until, serving

    observer, exporter = memory_tracing()
    async with serving(ScriptedProvider(), observers=[lambda _k: observer]) as server:

        async def chat() -> None:
            ws = await connect(server.ws_url, additional_headers={"traceparent": TRACEPARENT})
            try:
                await ws.send(json.dumps({"type": "message", "content": "hi"}))
                await recv_until(ws, "response")
            finally:
                await ws.close()

        await in_asyncio(chat)
    [run] = by_name(exporter.get_finished_spans(), "invoke_agent ")
    assert run.context is not None and run.parent is not None
    assert (f"{run.context.trace_id:032x}", f"{run.parent.span_id:016x}") == (TRACE_ID, PARENT_ID)
    assert run.attributes is not None and run.attributes["gateway.transport"] == "openfang"
