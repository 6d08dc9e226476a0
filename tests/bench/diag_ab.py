"""Diagnostic: one change's effect on the proxied first token, two source trees side by side.

    git worktree add /tmp/before HEAD~1
    python -m tests.bench.diag_ab /tmp/before . [--backend asyncio|asyncio+uvloop|trio] [--rounds 100] [--paced] [--turns 0]

Runs the fake upstream (a burst of 200 chunks, or paced at 500 per second with ``--paced``)
and two gateway CLIs in front of it as OpenAI proxies, one from each tree, and alternates
requests between them (the order flipped every round), then does it all again with the
gateways started in the other order. Prints the median of the *paired* differences B - A
(time to first token of a streamed answer; the whole of a non-stream answer), per start order
and their mean. ``--turns``: each request carries that many earlier exchanges (a user message
and an answer) before its prompt, as a coding agent's does.

Why paired, and both orders: on this 2-core VM the same code's time to first token moves by
0.5-1 ms between whole runs, and a fixed order of processes favoured one of two identical
gateways by 0.1-0.4 ms. A difference of two medians cannot resolve a 0.2 ms change under that;
the median of per-round differences, with the start order cancelled out, can (identical trees
measure within ±0.1 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from . import _harness as h
from .bench_openai_proxy import API_KEY, GATEWAY_CONFIG, PACED_WORDS_PER_S, PROMPT, client, complete_once, stream_once


@contextlib.asynccontextmanager
async def gateway_from(tree: Path, backend: str, upstream: str, name: str) -> AsyncIterator[str]:
    """``python -m gateway serve`` run from ``tree`` as a proxy of ``upstream``; its base URL."""
    config = h.scratch_dir() / f"ab-{name}.toml"
    config.write_text(GATEWAY_CONFIG.format(provider="openai"))
    env = h.child_env(GATEWAY_DB=str(h.scratch_dir() / f"ab-{name}.db"), OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=upstream, PYTHONPATH=str(tree))
    args = ["serve", "--transport", "http", *h.backend_args(backend), "--port", "0", "--config", str(config)]
    async with h.gateway_cli(args, env, r"transport http ready on (http://\S+)", tree=tree) as (_, ready):
        yield ready.group(1) + "/v1"


def earlier_exchanges(turns: int) -> list[dict[str, str]]:
    """``turns`` exchanges of a user message and an answer, of a few hundred characters each."""
    return [
        {"role": role, "content": f"{role} message {turn}: {PROMPT[: 80 * (turn % 5 + 1)]}"}
        for turn in range(turns) for role in ("user", "assistant")
    ]


async def one_order(
    trees: tuple[Path, Path], backend: str, upstream: str, rounds: int, paced: bool, b_first: bool, turns: int
) -> tuple[float, float | None]:
    """The median paired differences B - A (streamed first token; non-stream answer, burst only)."""
    history = earlier_exchanges(turns)
    names = ("b", "a") if b_first else ("a", "b")
    async with contextlib.AsyncExitStack() as stack:
        tree = {"a": trees[0], "b": trees[1]}
        urls = {name: await stack.enter_async_context(gateway_from(tree[name], backend, upstream, name)) for name in names}
        clients = {name: client(url) for name, url in urls.items()}
        for each in clients.values():
            stack.push_async_callback(each.close)
            for _ in range(5):  # warm-up: connections, first runs
                await stream_once(each, "proxy")
        streamed: list[float] = []
        whole: list[float] = []
        for index in range(rounds):
            order = ["a", "b"] if index % 2 == 0 else ["b", "a"]
            first = {name: (await stream_once(clients[name], "proxy", history=history))[0] for name in order}
            streamed.append(first["b"] - first["a"])
            if not paced:
                took = {name: await complete_once(clients[name], "proxy", history) for name in order}
                whole.append(took["b"] - took["a"])
    return statistics.median(streamed), statistics.median(whole) if whole else None


async def measure(trees: tuple[Path, Path], backend: str, rounds: int, paced: bool, turns: int = 0) -> str:
    spec = ("upstream", "--backend", "asyncio", *(("--words-per-s", str(PACED_WORDS_PER_S)) if paced else ()))
    async with h.child(*spec) as upstream:
        orders = [await one_order(trees, backend, upstream.ready, rounds, paced, b_first, turns) for b_first in (False, True)]
    streamed = [s for s, _ in orders]
    lines = [f"{backend}, {'paced' if paced else 'burst'} upstream, {turns} earlier exchanges per request, {rounds} rounds per start order; "
             "B - A, medians of paired differences:",
             f"  time to first token  {statistics.mean(streamed):+.3f} ms  (A started first {streamed[0]:+.3f}, B first {streamed[1]:+.3f})"]
    whole = [w for _, w in orders if w is not None]
    if whole:
        lines.append(f"  non-stream answer    {statistics.mean(whole):+.3f} ms  (A started first {whole[0]:+.3f}, B first {whole[1]:+.3f})")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.diag_ab")
    parser.add_argument("tree_a", type=Path, help="a checkout of the gateway (the baseline)")
    parser.add_argument("tree_b", type=Path, help="another checkout (the change)")
    parser.add_argument("--backend", choices=(*h.BACKENDS, h.UVLOOP), default="asyncio")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--paced", action="store_true", help=f"the upstream paced at {PACED_WORDS_PER_S:g} chunks per second")
    parser.add_argument("--turns", type=int, default=0, help="earlier exchanges in each request (default: none)")
    args = parser.parse_args()
    trees = (args.tree_a.resolve(), args.tree_b.resolve())
    print(asyncio.run(measure(trees, args.backend, args.rounds, args.paced, args.turns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
