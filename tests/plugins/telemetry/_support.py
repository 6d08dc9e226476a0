"""Helpers for the telemetry tests: parse a scrape, find one sample."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from plugins.telemetry.plugin import _metrics

#: The metrics observer's factory, as the plugin registers it.
METRICS = _metrics


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text scrape: (name, labels, value)."""
    return [(s.name, dict(s.labels), s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels`` (0 if none)."""
    return sum(v for n, got, v in samples(text) if n == name and all(got.get(k) == want for k, want in labels.items()))


def label_values(text: str, prefix: str = "gateway_") -> set[str]:
    """Every label value of the series whose names start with ``prefix``."""
    return {v for n, labels, _ in samples(text) if n.startswith(prefix) for v in labels.values()}
