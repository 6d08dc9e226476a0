"""The rolling-restart soak as a benchmark: ``python -m tests.bench soak --minutes N``
(or ``--only soak`` in the suite of benchmarks: one short round).

The same soak as the test suite's short run (tests/cluster/soak.py: three ``gateway serve``
instances on one PostgreSQL and one Redis, OpenFang WS, HTTP SSE and Agent-CLI clients,
each instance drained and restarted in turn, one SIGKILL, a Redis restart), repeated for
about N minutes: each further round drains and restarts all three instances again. Reported:
the takeover after the SIGKILL against ``lease_s``, the p99 of whole answers while instances
restart against the calm start (the added p99), and the counts that must stay 0 —
acknowledged prompts lost or stored twice, runs ended without a terminal event, drained runs
cut. Needs the machine's PostgreSQL (``GATEWAY_TEST_POSTGRES_URL``) and ``redis-server``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from tests.bench import _harness as h
from tests.cluster.soak import LEASE_S, Report, run_soak

#: About how long one round (three restarts) takes on a 2-core machine.
ROUND_S = 25.0


def _soak(rounds: int) -> Report:
    with tempfile.TemporaryDirectory(prefix="gateway-soak-") as tmp:
        return anyio.run(lambda: run_soak(Path(tmp), rounds=rounds))


def results(report: Report, rounds: int, duration_s: float) -> list[h.Result]:
    summary = report.summary()
    details: dict[str, Any] = {"rounds": rounds, "duration_s": round(duration_s, 1), **summary}
    takeover = summary["takeover_s"] or 0.0
    rows = [
        h.Result(
            bench="soak", variant="takeover after SIGKILL", backend="mixed", metric="s", baseline=LEASE_S, gateway=takeover,
            ratio=None, shown=f"{takeover:.2f} s", target=f"< lease_s + 1 s ({LEASE_S + 1:g} s)", met=takeover < LEASE_S + 1, details=details,
        ),
        h.Result(
            bench="soak", variant="p99 of a whole answer, calm -> rolling restarts", backend="mixed", metric="ms",
            baseline=summary["p99_calm_ms"], gateway=summary["p99_rolling_ms"], ratio=None,
            shown=f"+{summary['added_p99_ms'] or 0:.0f} ms", details={"p50_calm_ms": summary["p50_calm_ms"], "p50_rolling_ms": summary["p50_rolling_ms"]},
        ),
    ]
    for name, value in (
        ("acknowledged prompts lost or stored twice", summary["lost"] + summary["duplicated"]),
        ("runs ended without a terminal event", summary["without_terminal"]),
        ("drained runs cut", summary["drained_cut"]),
    ):
        rows.append(h.Result(
            bench="soak", variant=name, backend="mixed", metric="count", baseline=0, gateway=value, ratio=None,
            shown=str(value), target="0", met=value == 0, details={"acknowledged": summary["acknowledged"]},
        ))
    return rows


async def run(settings: h.Settings) -> list[h.Result]:
    """One round (``--quick``: the same): the suite of benchmarks' figure."""
    started = time.perf_counter()
    report = await anyio.to_thread.run_sync(_soak, 1)
    return results(report, 1, time.perf_counter() - started)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench soak", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=1.0, help="about how long to soak (each round drains and restarts every instance)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures and counts to this file")
    args = parser.parse_args(argv)
    rounds = max(1, round(args.minutes * 60 / ROUND_S))
    started = time.perf_counter()
    report = _soak(rounds)
    duration = time.perf_counter() - started
    rows = results(report, rounds, duration)
    print(h.table(rows))
    print("\n".join(report.events))
    print(json.dumps(report.summary(), indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": [h.result_dict(r) for r in rows], "events": report.events}, indent=2) + "\n")
    failed = [r for r in rows if r.met is False]
    for row in failed:
        print(f"NOT MET: {row.variant}: {row.shown} (target {row.target})", file=sys.stderr)
    return 1 if failed else 0
