"""In a cluster, a command carried out by the session's owner is counted where it arrived
(``gateway_cluster_forwarded_total``), and the run's metrics where it ran — with a real
PostgreSQL and Redis (tests/services.py skips when they are absent)."""

from __future__ import annotations

import anyio
import pytest

from kernel import model as m
from kernel.testing import ScriptedProvider, text_turn
from tests.cluster._support import cluster_kernels

from ._support import METRICS, value

pytestmark = pytest.mark.anyio


async def test_forwarded_commands_are_counted_where_they_arrive() -> None:
    async with cluster_kernels([ScriptedProvider([text_turn("from a")]), ScriptedProvider()], observers=[METRICS]) as (a, b):
        await a.execute(m.OpenSession(session_id="s-forwarded"))
        await b.execute(m.GetSession(session_id="s-forwarded"))  # A owns it: carried out there
        accepted = await b.execute(m.Prompt(session_id="s-forwarded", text="go"), caller=m.Caller(transport="http"))
        assert isinstance(accepted, m.Accepted)
        metrics_a, metrics_b = a.observers.metrics, b.observers.metrics
        assert metrics_a is not None and metrics_b is not None
        with anyio.fail_after(20):  # until A's run has ended (it reports its end to B's caller through Redis)
            while value(metrics_a.exposition(None)[0].decode(), "gateway_runs_total", outcome="completed") < 1:
                await anyio.sleep(0.02)
        on_a, on_b = metrics_a.exposition(None)[0].decode(), metrics_b.exposition(None)[0].decode()
        assert value(on_b, "gateway_cluster_forwarded_total") == 2
        assert value(on_a, "gateway_cluster_forwarded_total") == 0
        assert value(on_b, "gateway_runs_total") == 0  # the run ran on A
        assert value(on_a, "gateway_runs_total", transport="http", outcome="completed") == 1  # the caller travelled with it
