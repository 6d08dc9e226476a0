"""OpenTelemetry traces of runs, in the GenAI conventions, when the OTEL_* variables ask.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_TRACES_EXPORTER`` (``otlp`` | ``console``) is set, and always off with
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``; the SDK (``gateway[otel]``) is
imported only then. The exporter reads its own variables (endpoint, headers, timeout);
``OTEL_SERVICE_NAME`` defaults to ``gateway``.

Spans: ``invoke_agent {agent}`` per run — continuing the caller's ``traceparent`` when it
sent one — with children ``chat {model}`` per model call (whose context the upstream request
carries on as its ``traceparent``) and ``execute_tool {tool}`` per tool call. A span is
never made current: each is started and ended explicitly with an explicit parent, since a
run's hooks come from one task while a context entered there and left elsewhere would break
contextvars under anyio. Message content is recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` asks (the conventions' opt-in): then
the ``chat`` spans carry ``gen_ai.input.messages`` and ``gen_ai.output.messages``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from kernel import ModelCall, Observer, RunFacts, RunOutcome
from kernel.model import Message

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from kernel import Kernel

log = logging.getLogger("gateway.telemetry")

SLOT = "otel"
TRUE = ("1", "true", "yes", "on")

_encode = msgspec.json.Encoder().encode


def _message_json(message: Message) -> dict[str, Any]:
    """A message as the GenAI conventions' ``gen_ai.input.messages`` items have it."""
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append({"type": "tool_call_response", "id": message.tool_call_id, "response": message.content})
    elif message.content:
        parts.append({"type": "text", "content": message.content})
    parts += [{"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments} for call in message.tool_calls]
    return {"role": message.role, "parts": parts}


def tracing_wanted(env: Mapping[str, str]) -> str | None:
    """Which exporter the environment asks for (``otlp`` or ``console``), or None: off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in TRUE:
        return None
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        first = exporter.split(",")[0].strip()
        return first if first in ("otlp", "console") else None
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return "otlp"
    return None


def tracing_observer(kernel: Kernel, env: Mapping[str, str] = os.environ) -> TracingObserver | None:
    """The observer the environment configures, or None (tracing off, or the SDK missing)."""
    exporter = tracing_wanted(env)
    if exporter is None:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        log.warning("OTEL_* variables ask for traces but the OpenTelemetry SDK is not installed: pip install 'gateway[otel]'")
        return None
    span_exporter: SpanExporter
    if exporter == "console":
        span_exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout may carry a protocol (stdio, ACP)
    else:
        protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
        if protocol != "http/protobuf":
            log.warning("OTLP protocol %s is not supported by the gateway's exporter: using http/protobuf", protocol)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter()
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES itself.
    service = {"service.name": "gateway"} if not env.get("OTEL_SERVICE_NAME") else {}
    provider = TracerProvider(resource=Resource.create({**service, "service.version": kernel.version}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    log.info("tracing: exporting spans (%s)", exporter)
    capture = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() in TRUE
    return TracingObserver(provider, capture_content=capture)


class _RunSpans:
    __slots__ = ("chat", "run", "tools")

    def __init__(self, run: Span) -> None:
        self.run = run
        self.chat: Span | None = None
        self.tools: dict[str, Span] = {}


class TracingObserver(Observer):
    """Spans of runs, model calls and tool calls (docs/operations.md "Traces")."""

    def __init__(self, provider: TracerProvider, *, capture_content: bool = False) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.capture_content = capture_content
        self.tracer: Tracer = provider.get_tracer("gateway")
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()

    def _spans(self, run: RunFacts) -> _RunSpans | None:
        spans = run.slots.get(SLOT)
        return spans if isinstance(spans, _RunSpans) else None

    def run_started(self, run: RunFacts) -> None:
        parent = self._propagator.extract({"traceparent": run.traceparent}) if run.traceparent else None
        span = self.tracer.start_span(
            f"invoke_agent {run.agent}",
            context=parent,
            kind=self._trace.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": run.agent,
                "gen_ai.agent.name": run.agent,
                "gen_ai.conversation.id": run.session_id,
                "gateway.transport": run.transport,
                "gateway.run.id": run.run_id,
            },
        )
        run.slots[SLOT] = _RunSpans(span)
        run.trace_id = self._trace.format_trace_id(span.get_span_context().trace_id)

    def model_call_started(self, run: RunFacts, call: ModelCall) -> None:
        spans = self._spans(run)
        if spans is None:
            return
        span = self.tracer.start_span(
            f"chat {call.model}",
            context=self._trace.set_span_in_context(spans.run),
            kind=self._trace.SpanKind.CLIENT,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": call.provider, "gen_ai.request.model": call.model},
        )
        spans.chat = span
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        call.traceparent = carrier.get("traceparent", call.traceparent)

    def model_call_ended(self, run: RunFacts, call: ModelCall) -> None:
        spans = self._spans(run)
        if spans is None or spans.chat is None:
            return
        span, spans.chat = spans.chat, None
        attributes: dict[str, Any] = {"gen_ai.usage.input_tokens": call.usage.input_tokens, "gen_ai.usage.output_tokens": call.usage.output_tokens}
        if call.finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = (call.finish_reason,)
        if self.capture_content:
            attributes["gen_ai.input.messages"] = _encode([_message_json(m) for m in call.messages]).decode()
            output = {"role": "assistant", "parts": [{"type": "text", "content": "".join(call.output)}], "finish_reason": call.finish_reason or ""}
            attributes["gen_ai.output.messages"] = _encode([output]).decode()
        span.set_attributes(attributes)
        self._fail(span, call.error_type)
        span.end()

    def tool_call_started(self, run: RunFacts, tool: str, call_id: str) -> None:
        spans = self._spans(run)
        if spans is None:
            return
        spans.tools[call_id] = self.tracer.start_span(
            f"execute_tool {tool}",
            context=self._trace.set_span_in_context(spans.run),
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id},
        )

    def tool_call_ended(self, run: RunFacts, tool: str, call_id: str, outcome: str, duration_s: float) -> None:
        spans = self._spans(run)
        span = spans.tools.pop(call_id, None) if spans is not None else None
        if span is None:
            return
        span.set_attribute("gateway.tool.outcome", outcome)
        self._fail(span, None if outcome == "ok" else outcome)
        span.end()

    def question_asked(self, run: RunFacts, kind: str) -> None:
        spans = self._spans(run)
        if spans is not None:
            spans.run.add_event("gateway.question", {"gateway.question.kind": kind})

    def question_answered(self, run: RunFacts, kind: str, outcome: str) -> None:
        spans = self._spans(run)
        if spans is not None:
            spans.run.add_event("gateway.answer", {"gateway.question.kind": kind, "gateway.answer": outcome})

    def run_ended(self, run: RunFacts, outcome: RunOutcome, error_code: str | None) -> None:
        spans = run.slots.pop(SLOT, None)
        if not isinstance(spans, _RunSpans):
            return
        for span in (*([spans.chat] if spans.chat is not None else []), *spans.tools.values()):
            span.end()  # never left open, whatever ended the run
        spans.run.set_attribute("gateway.run.outcome", outcome)
        self._fail(spans.run, error_code)
        spans.run.end()

    def _fail(self, span: Span, error_type: str | None) -> None:
        if error_type is None:
            return
        span.set_attribute("error.type", error_type)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error_type))
