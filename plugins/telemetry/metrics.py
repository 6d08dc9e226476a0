"""Prometheus metrics from the kernel's facts, served as ``GET /metrics`` by every HTTP port.

One registry per kernel (not prometheus_client's global default), so two kernels in one
process — tests — never share counts. What is counted per event is one ``labels()`` lookup
and an increment or an observation (about a microsecond each); the gauges of sessions and
active runs are read from the kernel when scraped, so they cost nothing between scrapes.

Label values are bounded: no session, run, request or user id ever; an agent, tool or model
that is not configured or installed is counted as ``other`` (a model a client names, a tool
a model invents), so a client cannot grow the series without bound.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from kernel import ModelCall, Observer, RunFacts, RunOutcome

if TYPE_CHECKING:
    from kernel import Kernel

OTHER = "other"
#: Always reported (0 when none): the states a dashboard graphs.
SESSION_STATES = ("idle", "running")
#: A transport name as transports register them; anything else is not a label value.
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
#: OpenTelemetry GenAI buckets: tokens 1, 4, 16 … 67108864; seconds 0.01, 0.02 … 81.92.
TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))
OPERATION_BUCKETS = tuple(round(0.01 * 2**i, 2) for i in range(14))
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)

# ``_created`` series double every counter and histogram for a value nobody graphs.
prometheus_client.disable_created_metrics()


class _KernelGauges:
    """``gateway_sessions{state}`` and ``gateway_active_runs``, read at scrape time."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def collect(self) -> Iterator[Metric]:
        by_state = self.kernel.session_states()
        family = GaugeMetricFamily("gateway_sessions", "Live (loaded) sessions by state.", labels=["state"])
        for state in sorted({*SESSION_STATES, *by_state}):
            family.add_metric([state], by_state[state])
        yield family
        # A session has a run in progress in every state but idle (and closed, on its way out).
        active = sum(count for state, count in by_state.items() if state not in ("idle", "closed"))
        yield GaugeMetricFamily("gateway_active_runs", "Runs in progress.", value=active)


class PrometheusMetrics(Observer):
    """The gateway's metrics (docs/operations.md "Metrics" lists them)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.registry = CollectorRegistry()
        r = self.registry
        prometheus_client.ProcessCollector(registry=r)
        prometheus_client.PlatformCollector(registry=r)
        prometheus_client.GCCollector(registry=r)
        r.register(_KernelGauges(kernel))
        self.runs = Counter("gateway_runs", "Runs by how they ended.", ["transport", "agent", "outcome"], registry=r)
        self.run_duration = Histogram("gateway_run_duration_seconds", "Run wall time.", ["transport", "agent"], buckets=RUN_BUCKETS, registry=r)
        self.ttft = Histogram(
            "gateway_time_to_first_token_seconds", "From the run's start to its first delta.", ["transport", "agent"], buckets=TTFT_BUCKETS, registry=r
        )
        self.connections = Gauge("gateway_connections", "Open long-lived connections (WebSockets, event streams).", ["transport"], registry=r)
        self.tool_calls = Counter("gateway_tool_calls", "Tool calls by outcome.", ["tool", "outcome"], registry=r)
        self.tool_duration = Histogram("gateway_tool_duration_seconds", "Tool execution time.", ["tool"], buckets=TOOL_BUCKETS, registry=r)
        self.approvals = Counter("gateway_approvals", "Questions to the client (tool approval, turn limit) by answer.", ["outcome"], registry=r)
        self.followers_cut = Counter("gateway_followers_cut", "Followers cut off for lagging.", ["transport"], registry=r)
        self.forwarded = Counter("gateway_cluster_forwarded", "Commands forwarded to another instance.", registry=r)
        self.provider_errors = Counter("gateway_provider_errors", "Failed model calls by provider and error code.", ["provider", "code"], registry=r)
        genai = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]
        self.token_usage = Histogram(
            "gen_ai_client_token_usage", "Tokens per model call (OpenTelemetry GenAI).", [*genai, "gen_ai_token_type"], buckets=TOKEN_BUCKETS, registry=r
        )
        self.operation_duration = Histogram(
            "gen_ai_client_operation_duration_seconds", "Model call duration (OpenTelemetry GenAI).", [*genai, "error_type"],
            buckets=OPERATION_BUCKETS, registry=r,
        )
        self._models: tuple[object, frozenset[str]] = (None, frozenset())
        self._agents: tuple[object, frozenset[str]] = (None, frozenset())
        # Each labelled child once: ``labels()`` costs as much again as the increment (bounded: so are the labels).
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _child(self, metric: Counter | Gauge | Histogram, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # ---------------------------------------------------------- bounded labels

    def _agent(self, agent: str) -> str:
        settings = self.kernel.settings
        if self._agents[0] is not settings:
            self._agents = (settings, frozenset(a.agent_id() for a in settings.agents))
        return agent if agent in self._agents[1] else OTHER

    def _model(self, model: str) -> str:
        """A configured model (the provider's, or an agent's) as itself; any other as ``other``."""
        settings = self.kernel.settings
        if self._models[0] is not settings:
            configured = {settings.provider.openai.model, *(a.model for a in settings.agents if a.model)}
            for agent in settings.agents:
                configured.add(self.kernel.agent_info(agent).model)
            self._models = (settings, frozenset(configured))
        return model if model in self._models[1] else OTHER

    def _tool(self, tool: str) -> str:
        return tool if tool in self.kernel.all_tools() else OTHER

    @staticmethod
    def _transport(transport: str | None) -> str:
        return transport if transport is not None and _NAME.match(transport) else OTHER

    # ---------------------------------------------------------- facts

    def first_delta(self, run: RunFacts) -> None:
        if run.first_delta is not None:
            self._child(self.ttft, self._transport(run.transport), self._agent(run.agent)).observe(run.first_delta - run.started)

    def model_call_ended(self, run: RunFacts, call: ModelCall) -> None:
        labels = ("chat", call.provider, self._model(call.model))
        self._child(self.operation_duration, *labels, call.error_type or "").observe(call.duration_s)
        if call.error_type is None or call.usage.total_tokens:
            self._child(self.token_usage, *labels, "input").observe(call.usage.input_tokens)
            self._child(self.token_usage, *labels, "output").observe(call.usage.output_tokens)

    def tool_call_ended(self, run: RunFacts, tool: str, call_id: str, outcome: str, duration_s: float) -> None:
        name = self._tool(tool)
        self._child(self.tool_calls, name, outcome).inc()
        if duration_s > 0:
            self._child(self.tool_duration, name).observe(duration_s)

    def question_answered(self, run: RunFacts, kind: str, outcome: str) -> None:
        self.approvals.labels(outcome).inc()

    def run_ended(self, run: RunFacts, outcome: RunOutcome, error_code: str | None) -> None:
        transport, agent = self._transport(run.transport), self._agent(run.agent)
        self._child(self.runs, transport, agent, outcome).inc()
        self._child(self.run_duration, transport, agent).observe(time.perf_counter() - run.started)

    def provider_error(self, provider: str, code: str) -> None:
        self.provider_errors.labels(provider, code).inc()

    def follower_cut(self, transport: str | None) -> None:
        self.followers_cut.labels(self._transport(transport)).inc()

    def command_forwarded(self) -> None:
        self.forwarded.inc()

    def connection_opened(self, transport: str) -> None:
        self._child(self.connections, self._transport(transport)).inc()

    def connection_closed(self, transport: str) -> None:
        self._child(self.connections, self._transport(transport)).dec()

    # ---------------------------------------------------------- the scrape

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The registry as Prometheus text, or OpenMetrics when the scraper asks for it."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
