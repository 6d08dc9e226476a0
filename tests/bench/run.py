"""Run the benchmark suite: ``python -m tests.bench`` or ``python tests/bench/run.py``.

Prints a table (benchmark, variant, backend, baseline, gateway, ratio, target, met)
and writes every figure, with its details and the machine, to a JSON file.
See tests/bench/README.md and docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable, not this directory
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(here.parents[1]))
    __package__ = "tests.bench"

from tests.bench import _harness as h

#: name -> module, in the order they run (openai-proxy last: it depends on the most moving parts).
BENCHMARKS = {
    "ws-stream": "tests.bench.bench_ws_stream",
    "stdio": "tests.bench.bench_stdio",
    "memory": "tests.bench.bench_memory",
    "latency": "tests.bench.bench_latency",
    "scale": "tests.bench.bench_scale",
    "long-answers": "tests.bench.bench_long_answers",
    "cluster": "tests.bench.bench_cluster",
    "soak": "tests.bench.bench_soak",
    "openai-proxy": "tests.bench.bench_openai_proxy",
    "anthropic-proxy": "tests.bench.bench_anthropic_proxy",
    "a2a": "tests.bench.bench_a2a",
    "telemetry": "tests.bench.bench_telemetry",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description="Gateway benchmarks against raw baselines.")
    parser.add_argument("--quick", action="store_true", help="a ~1 minute smoke run (smaller counts, fewer repetitions)")
    parser.add_argument("--only", metavar="NAMES", help="comma-separated subset of: " + ", ".join(BENCHMARKS))
    parser.add_argument("--backend", action="append", choices=h.BACKENDS, help="server backend(s) to measure (default: both)")
    parser.add_argument("--loop", choices=h.LOOPS, default="asyncio", help="asyncio's event loop for the servers under test: its own (default), uvloop, or both (asyncio+uvloop as a third backend)")
    parser.add_argument("--peer", action="append", choices=("litellm",), help="also measure this proxy where a benchmark can (openai-proxy, anthropic-proxy; installed into the bench cache on first use)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (for docs/performance.md)")
    parser.add_argument("--json", metavar="PATH", help="where to write the results (default tests/bench/results[-quick].json)")
    parser.add_argument("--render", metavar="PATH", help="print the Markdown table of an earlier results file and exit")
    return parser.parse_args(argv)


async def run_all(args: argparse.Namespace) -> tuple[list[h.Result], list[str]]:
    settings = h.Settings(quick=args.quick, backends=h.with_loop(args.backend or h.BACKENDS, args.loop), peers=tuple(args.peer or ()))
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(BENCHMARKS)})")
    results: list[h.Result] = []
    failures: list[str] = []
    for name in names:
        started = time.perf_counter()
        print(f"== {name} ...", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(BENCHMARKS[name])
            got = await module.run(settings)
        except Exception:  # noqa: BLE001 - one failed benchmark must not hide the others' figures
            failures.append(f"{name}: {traceback.format_exc()}")
            print(f"== {name} FAILED:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            continue
        results += got
        print(h.table(got), file=sys.stderr)
        print(f"== {name} done in {time.perf_counter() - started:.1f} s\n", file=sys.stderr, flush=True)
    return results, failures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        print(h.markdown([h.Result(**r) for r in saved["results"]]))
        return 0
    h.raise_nofile()
    load_before = os.getloadavg()
    speed_before = h.speed_probe_ms()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    started = time.perf_counter()
    results, failures = asyncio.run(run_all(args))
    duration = time.perf_counter() - started
    print(h.markdown(results) if args.markdown else h.table(results))
    speed_after = h.speed_probe_ms()
    print(f"\n{len(results)} figures in {duration:.0f} s; targets met: "
          f"{sum(r.met is True for r in results)}, not met: {sum(r.met is False for r in results)}; "
          f"speed probe {speed_before:.0f} ms before, {speed_after:.0f} ms after (lower is faster)")
    out = Path(args.json) if args.json else Path(__file__).resolve().parent / ("results-quick.json" if args.quick else "results.json")
    report = {
        "command": "python -m tests.bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "started": started_at,
        "duration_s": round(duration, 1),
        "machine": h.machine() | {
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "speed_probe_ms_before": speed_before, "speed_probe_ms_after": speed_after,
        },
        "results": [h.result_dict(r) for r in results],
        "failures": failures,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results written to {out}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
