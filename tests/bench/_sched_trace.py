"""What the CPUs did during given time windows, from a ``perf sched record`` trace (no I/O here).

``diag_sched`` records the scheduler's switches and wake-ups with ``perf sched record -a -k
monotonic`` (the clock of ``time.perf_counter``, so the client's stamps fall on the same
timeline) and hands the text of ``perf script`` to ``analyse``. For each window it returns how
long each process ran, and how long a thread of the watched processes was runnable but not
running, split in three by what its CPU and the other CPUs did meanwhile:

  queued, a core idle    its CPU ran another thread while some other CPU sat idle: the
                         scheduler's placement (a wake-up put on a busy CPU, a preempted
                         thread not pulled to the idle one before the next balancing tick)
  queued, cores busy     its CPU ran another thread and every other CPU was busy too
  waking                 its CPU was idle: the time an idle CPU takes to run a thread woken
                         onto it (on a VM, the host waking the virtual CPU)
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

#: One line of ``perf script -F comm,pid,tid,cpu,time,event,trace``.
LINE = re.compile(r"^\s*(?P<comm>.*?)\s+(?P<pid>\d+)/(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<time>[\d.]+):\s+(?P<event>\S+):\s+(?P<trace>.*)$")
FIELD = re.compile(r"(\w+)=(\S+)")
IDLE = 0
WAIT_KINDS = ("queued, a core idle", "queued, cores busy", "waking")


@dataclass(frozen=True)
class Slice:
    """``tid`` ran on ``cpu`` from ``start`` to ``end`` (tid 0: the CPU was idle)."""

    cpu: int
    tid: int
    start: float
    end: float


@dataclass
class Trace:
    slices: list[Slice] = field(default_factory=list)
    #: (tid, start, end): runnable and not running (woken, or preempted, until switched in).
    waits: list[tuple[int, float, float]] = field(default_factory=list)
    #: tid -> pid, for every thread seen.
    process_of: dict[int, int] = field(default_factory=dict)


def parse(lines: Iterable[str]) -> Trace:
    """Run slices per CPU and runnable intervals per thread, from sched_switch and sched_waking."""
    trace = Trace()
    on_cpu: dict[int, tuple[int, float]] = {}
    runnable_since: dict[int, float] = {}
    for line in lines:
        match = LINE.match(line)
        if match is None:
            continue
        cpu, at, event = int(match["cpu"]), float(match["time"]), match["event"]
        trace.process_of[int(match["tid"])] = int(match["pid"])
        if event == "sched:sched_switch":
            fields = dict(FIELD.findall(match["trace"]))
            previous, following = int(fields["prev_pid"]), int(fields["next_pid"])
            if cpu in on_cpu:
                tid, since = on_cpu[cpu]
                trace.slices.append(Slice(cpu, tid, since, at))
            on_cpu[cpu] = (following, at)
            if previous != IDLE and fields["prev_state"].startswith("R"):
                runnable_since.setdefault(previous, at)
            if following in runnable_since:
                trace.waits.append((following, runnable_since.pop(following), at))
        elif event == "sched:sched_waking":
            woken = int(dict(FIELD.findall(match["trace"]))["pid"])
            runnable_since.setdefault(woken, at)
    return trace


def overlap(intervals: Iterable[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    return [(max(a, start), min(b, end)) for a, b in intervals if min(b, end) > max(a, start)]


def measure(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def intersect(first: list[tuple[float, float]], second: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(max(a, c), min(b, d)) for a, b in first for c, d in second if min(b, d) > max(a, c)]


@dataclass
class Window:
    """What one window held: CPU time by process role and waiting time by kind (seconds)."""

    ran: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    waited: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))


def analyse(trace: Trace, roles: dict[int, str], windows: Sequence[tuple[float, float]]) -> Iterator[Window]:
    """For each (start, end) window: CPU time per role (``roles`` maps a pid to its name; other
    processes count as ``other``, idle CPUs as ``idle``), and the watched processes' waits."""
    cpus = sorted({s.cpu for s in trace.slices})
    slices = sorted(trace.slices, key=lambda s: s.start)
    switched_in = {(s.tid, s.start): s.cpu for s in slices}  # where each wait ended
    for start, end in windows:
        window = Window()
        inside = [s for s in slices if s.end > start and s.start < end]
        idle = {cpu: [(s.start, s.end) for s in inside if s.cpu == cpu and s.tid == IDLE] for cpu in cpus}
        for s in inside:
            role = "idle" if s.tid == IDLE else roles.get(trace.process_of.get(s.tid, s.tid), "other")
            window.ran[role] += min(s.end, end) - max(s.start, start)
        for tid, since, until in trace.waits:
            if roles.get(trace.process_of.get(tid, tid)) is None:
                continue
            a, b = max(since, start), min(until, end)  # the wait, clipped to the window
            if b <= a:
                continue
            cpu = switched_in.get((tid, until))
            own_idle = measure(overlap(idle.get(cpu, []), a, b)) if cpu is not None else 0.0
            others_idle = [span for other in cpus if other != cpu for span in overlap(idle[other], a, b)]
            queued_spans = [(a, b)] if cpu is None else _busy_spans(idle.get(cpu, []), a, b)
            placement = measure(intersect(queued_spans, others_idle))
            window.waited["waking"] += own_idle
            window.waited["queued, a core idle"] += placement
            window.waited["queued, cores busy"] += (b - a) - own_idle - placement
        yield window


def _busy_spans(idle: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The parts of [start, end) where the CPU with these idle spans was not idle."""
    spans, cursor = [], start
    for a, b in sorted(overlap(idle, start, end)):
        if a > cursor:
            spans.append((cursor, a))
        cursor = max(cursor, b)
    if cursor < end:
        spans.append((cursor, end))
    return spans
