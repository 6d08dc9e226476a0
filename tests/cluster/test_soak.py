"""The clustered rolling-restart soak, short (issues 24 and 29): three ``gateway serve``
instances (asyncio, trio, asyncio) on one PostgreSQL and one Redis, conversations over
OpenFang's WebSocket, native HTTP SSE and Agent-CLI spread over them; meanwhile two are
drained (SIGTERM) and started again in turn, the third is SIGKILLed (the takeover probe) and
started again, and Redis restarts. ``-m 'not soak'`` leaves it out; the long run is
``python -m tests.bench soak --minutes N`` (tests/cluster/soak.py says what is counted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from tests.cluster.soak import LEASE_S, Report, run_soak

pytestmark = [pytest.mark.anyio, pytest.mark.soak]


async def test_rolling_restart_loses_no_acknowledged_prompt_and_ends_every_stream_honestly(tmp_path: Path, anyio_backend: str) -> None:
    report = Report()
    try:
        with anyio.fail_after(240):  # a hang fails here, with its traceback
            await run_soak(tmp_path, report=report)
    finally:
        for index, log in report.stderr.items():
            (tmp_path / f"instance-{index}.log").write_text(log)
    summary = report.summary()
    print(json.dumps(summary, indent=1), file=sys.stderr)
    print("\n".join(report.events), file=sys.stderr)
    for attempt in report.attempts:
        if attempt.ending in ("cut", "failed") or attempt.prompt in report.duplicated():
            print(vars(attempt), file=sys.stderr)
    for row in report.duplicate_rows:
        print("stored twice:", row, file=sys.stderr)
    for attempt in report.without_terminal():
        print(f"around {attempt.prompt[:12]}…:\n{report.log_excerpt(attempt)}", file=sys.stderr)
    assert summary["acknowledged"] >= 30, summary  # the clients kept talking throughout
    assert report.lost() == [] and report.duplicated() == [], summary  # each acknowledged prompt stored exactly once
    assert report.without_terminal() == [], [vars(a) for a in report.without_terminal()]
    assert report.drained_cut() == [], [vars(a) for a in report.drained_cut()]  # every drained run whole
    assert report.takeover_s is not None and report.takeover_s < LEASE_S + 1.0, summary
    for index, log in report.stderr.items():
        assert "Traceback" not in log, f"instance {index}:\n{log[-4000:]}"
