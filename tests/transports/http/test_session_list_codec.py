"""The live session list's bookkeeping (native codec): polls in, the fewest events out,
and a client applying them always holds the latest list."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from kernel import model as m
from transports.http.native import codec

STATES = ("idle", "running", "awaiting_tool_approval", "awaiting_turn_confirmation")


def status(**changes: Any) -> m.StatusReport:
    values: dict[str, Any] = {"version": "1", "uptime_s": 1.0, "provider": "echo", "model": "echo", "sessions": 1, "active_runs": 0, "agents": 1}
    values.update(changes)
    return m.StatusReport(**values)


def info(session_id: str, **changes: Any) -> m.SessionInfo:
    return m.SessionInfo(session_id=session_id, agent_id="a", **changes)


def to_json(value: m.SessionInfo) -> Any:
    return json.loads(msgspec.json.encode(value))


def test_the_first_poll_is_the_whole_list_then_only_changes() -> None:
    watch = codec.SessionListWatch()
    first = watch.feed([info("s1"), info("s2")], status())
    assert [name for name, _ in first] == ["sessions", "status"]
    assert [s["session_id"] for s in json.loads(first[0][1])["sessions"]] == ["s1", "s2"]
    assert watch.feed([info("s1"), info("s2")], status(uptime_s=9.0)) == []  # uptime alone is no change
    assert watch.feed([info("s1", last_seq=40), info("s2")], status()) == []  # streamed deltas are the session stream's
    changed = watch.feed([info("s1", state="running", clients=("openfang",)), info("s2"), info("s3")], status(active_runs=1))
    assert [name for name, _ in changed] == ["session", "session", "status"]
    assert json.loads(changed[0][1]) == {"type": "session", "session": to_json(info("s1", state="running", clients=("openfang",)))}
    assert json.loads(changed[1][1])["session"]["session_id"] == "s3"
    removed = watch.feed([info("s3")], status(active_runs=1))
    assert sorted(json.loads(data)["session_id"] for name, data in removed if name == "session_removed") == ["s1", "s2"]
    assert all(name == "session_removed" for name, _ in removed)


def test_a_listing_asks_for_a_stream_only_with_event_stream() -> None:
    assert codec.wants_stream("text/event-stream") and codec.wants_stream("application/json, text/event-stream;q=0.5")
    assert not codec.wants_stream(None) and not codec.wants_stream("application/json") and not codec.wants_stream("*/*")


sessions = st.lists(
    st.builds(
        info,
        st.sampled_from(["a", "b", "c", "d", "e"]),
        state=st.sampled_from(STATES),
        message_count=st.integers(0, 3),
        last_seq=st.integers(0, 5),
        clients=st.sampled_from([(), ("http",), ("openfang", "stdio")]),
    ),
    max_size=5,
    unique_by=lambda s: s.session_id,
)


@given(st.lists(st.tuples(sessions, st.integers(0, 2)), min_size=1, max_size=8))
def test_applying_the_events_always_gives_the_latest_poll(polls: list[tuple[list[m.SessionInfo], int]]) -> None:
    watch = codec.SessionListWatch()
    held: dict[str, dict[str, Any]] = {}
    runs = -1
    for listing, active in polls:
        for name, data in watch.feed(listing, status(active_runs=active)):
            body = json.loads(data)
            if name == "sessions":
                held = {s["session_id"]: s for s in body["sessions"]}
            elif name == "session":
                held[body["session"]["session_id"]] = body["session"]
            elif name == "session_removed":
                del held[body["session_id"]]
            elif name == "status":
                runs = body["active_runs"]
        # What the client holds is the latest poll, but for last_seq (not worth an event).
        latest = {s.session_id: to_json(s) for s in listing}
        assert {k: {**v, "last_seq": 0} for k, v in held.items()} == {k: {**v, "last_seq": 0} for k, v in latest.items()}
        assert runs == active
