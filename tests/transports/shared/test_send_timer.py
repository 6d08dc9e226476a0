"""The one rule both watched writers (SSE, WebSocket) keep their send timeout by: sans-IO."""

from __future__ import annotations

import math

from transports.shared._stall import SendTimer


def test_without_a_limit_only_the_idle_due_time_counts() -> None:
    timer = SendTimer()
    assert timer.next_look(100.0) == math.inf
    assert timer.next_look(100.0, idle_due=115.0) == 115.0
    timer.since = 50.0
    assert not timer.stalled(1e9)  # no limit: a send waits as long as it takes


def test_a_send_under_way_is_looked_at_when_it_outlives_the_limit() -> None:
    timer = SendTimer()
    timer.limit = 30.0
    timer.since = 100.0
    assert timer.next_look(101.0, idle_due=105.0) == 130.0  # the send's deadline, not the idle business
    assert not timer.stalled(129.9)
    assert timer.stalled(130.0)


def test_while_idle_the_next_look_is_within_one_limit() -> None:
    """A send that starts right after an idle look is seen by the next look at most one limit
    after it started, whatever the idle due time."""
    timer = SendTimer()
    timer.limit = 30.0
    assert timer.next_look(100.0, idle_due=3600.0) == 130.0
    assert timer.next_look(100.0, idle_due=110.0) == 110.0
    assert not timer.stalled(1e9)  # nothing under way
