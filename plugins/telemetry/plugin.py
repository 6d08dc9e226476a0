"""The built-in telemetry observers, registered like any plugin's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.hookspecs import RegisterObserver, hookimpl

if TYPE_CHECKING:
    from kernel import Kernel, RunObserver


def _metrics(kernel: Kernel) -> RunObserver | None:
    """``metrics = false`` turns them off (and ``GET /metrics`` with them)."""
    if not kernel.settings.metrics:
        return None
    from .metrics import PrometheusMetrics

    return PrometheusMetrics(kernel)


def _traces(kernel: Kernel) -> RunObserver | None:
    """OpenTelemetry is imported only when the OTEL_* variables ask for traces."""
    from .otel import tracing_observer

    return tracing_observer(kernel)


def _run_log(kernel: Kernel) -> RunObserver:
    from .logs import RunLog

    return RunLog()


@hookimpl
def gateway_register_observers(register: RegisterObserver) -> None:
    register("metrics", _metrics)
    register("traces", _traces)
    register("run-log", _run_log)
