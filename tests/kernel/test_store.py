"""The stores: restart, caps, concurrency, every method of the protocol — on SQLite and on
PostgreSQL alike (a schema of each test's own) — then what is particular to each."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from kernel import Store
from kernel import model as m
from kernel.store import SCHEMA_VERSION, SessionRecord, SQLiteStore
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from tests.services import postgres_schema

from .helpers import run_events

pytestmark = pytest.mark.anyio

StoreFactory = Callable[[], Store]


@pytest.fixture(params=["sqlite", "postgresql"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A new store object on the same storage at each call (a restart reopens it)."""
    if request.param == "sqlite":
        yield lambda: SQLiteStore(tmp_path / "g.db")
        return
    from plugins.stores.postgres import PostgresStore

    with postgres_schema() as url:
        yield lambda: PostgresStore(url)


async def test_history_survives_a_restart(make_store: StoreFactory) -> None:
    async with running_kernel(ScriptedProvider([text_turn("remembered")]), store=make_store()) as kernel:
        sub = (await kernel.session("keep")).hub.subscribe()
        await kernel.execute(m.Prompt(session_id="keep", text="hello"))
        await run_events(sub)
    provider = ScriptedProvider([text_turn("again")])
    async with running_kernel(provider, store=make_store()) as kernel:
        history = await kernel.execute(m.GetHistory(session_id="keep"))
        assert [x.content for x in history.messages] == ["hello", "remembered"]  # type: ignore[union-attr]
        sub = await kernel.subscribe("keep")
        await kernel.execute(m.Prompt(session_id="keep", text="more"))
        await run_events(sub)
        assert [x.content for x in provider.requests[0].messages[1:]] == ["hello", "remembered", "more"]
        sessions = await kernel.execute(m.ListSessions())
        assert [s.session_id for s in sessions.sessions] == ["keep"]  # type: ignore[union-attr]


async def test_concurrent_sessions_do_not_mix(make_store: StoreFactory) -> None:
    async with running_kernel(ScriptedProvider([text_turn("ok")], delay_s=0.001), store=make_store()) as kernel:
        async def converse(name: str) -> None:
            sub = (await kernel.session(name)).hub.subscribe()
            for i in range(3):
                await kernel.execute(m.Prompt(session_id=name, text=f"{name}-{i}"))
                await run_events(sub)

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(converse, f"s{n}")
        for n in range(8):
            history = await kernel.execute(m.GetHistory(session_id=f"s{n}"))
            users = [x.content for x in history.messages if x.role == "user"]  # type: ignore[union-attr]
            assert users == [f"s{n}-{i}" for i in range(3)]


async def test_history_cap_drops_the_oldest(make_store: StoreFactory) -> None:
    store = make_store()
    await store.open()
    try:
        await store.save_session(SessionRecord(session_id="s", agent_id="a"))
        for i in range(12):
            await store.append_messages("s", [m.Message(role="user", content=str(i))], cap=5)
        assert [x.content for x in await store.load_messages("s")] == ["7", "8", "9", "10", "11"]
        assert [x.content for x in await store.load_messages("s", limit=2)] == ["10", "11"]
    finally:
        await store.close()


async def test_every_method_of_the_protocol(make_store: StoreFactory) -> None:
    store = make_store()
    await store.open()
    try:
        assert await store.get_session("s") is None and await store.list_sessions() == []
        await store.save_session(SessionRecord(session_id="s", agent_id="a", label="first", created_at=1.0))
        await store.save_session(SessionRecord(session_id="t", agent_id="b", created_at=2.0))
        await store.save_session(SessionRecord(session_id="s", agent_id="a", label="renamed", created_at=1.0))
        await store.set_title("s", "a title")
        message = m.Message(role="tool", content="x", tool_call_id="c", name="n", outcome="error", created_at=5.0)
        await store.append_messages("s", [m.Message(role="user", content="hi"), message], cap=10)
        record = await store.get_session("s")
        assert record is not None and (record.label, record.title, record.message_count, record.agent_id) == ("renamed", "a title", 2, "a")
        assert record.updated_at >= record.created_at
        assert [r.session_id for r in await store.list_sessions()] == ["s", "t"]
        assert [r.session_id for r in await store.list_sessions("b")] == ["t"]
        assert (await store.load_messages("s"))[1] == message
        await store.replace_messages("s", [m.Message(role="user", content="only")])
        assert [x.content for x in await store.load_messages("s")] == ["only"]
        await store.set_value("k", b"\x00binary")
        await store.set_value("k", b"v2")
        assert await store.get_value("k") == b"v2" and await store.get_value("missing") is None
        await store.delete_session("s")
        assert await store.get_session("s") is None and await store.load_messages("s") == []
    finally:
        await store.close()
    reopened = make_store()
    await reopened.open()
    try:
        assert [r.session_id for r in await reopened.list_sessions()] == ["t"] and await reopened.get_value("k") == b"v2"
    finally:
        await reopened.close()


async def test_a_write_with_a_fence_that_moved_on_is_refused_and_changes_nothing(make_store: StoreFactory) -> None:
    """Fencing: the instance that took the session over last writes; one that lost it (its
    fence is older) is refused with ``owner_lost`` — append and replace alike, nothing half done."""
    store = make_store()
    await store.open()
    try:
        await store.save_session(SessionRecord(session_id="f", agent_id="a", created_at=1.0))
        first = await store.take_session("f")
        await store.append_messages("f", [m.Message(role="user", content="by the first")], 100, fence=first)
        second = await store.take_session("f")  # another instance takes the session over
        assert second > first
        for write in (
            store.append_messages("f", [m.Message(role="user", content="late")], 100, fence=first),
            store.replace_messages("f", [m.Message(role="user", content="late")], fence=first),
        ):
            with pytest.raises(m.KernelError) as refused:
                await write
            assert refused.value.code == "owner_lost"
        await store.append_messages("f", [m.Message(role="assistant", content="by the second")], 100, fence=second)
        await store.append_messages("f", [m.Message(role="assistant", content="unfenced")], 100)  # one process: no fence
        assert [x.content for x in await store.load_messages("f")] == ["by the first", "by the second", "unfenced"]
        assert await store.take_session("missing") == 0
    finally:
        await store.close()


async def test_schema_version_and_wal(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    store = SQLiteStore(path)
    await store.open()
    await store.set_value("k", b"v")
    assert await store.get_value("k") == b"v"
    await store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer"):
        await SQLiteStore(path).open()


async def test_ephemeral_sessions_never_touch_the_store(make_store: StoreFactory) -> None:
    provider = ScriptedProvider([text_turn("answer")])
    async with running_kernel(provider, store=make_store()) as kernel:
        session = await kernel.session(None, ephemeral=True)
        sub = session.hub.subscribe()
        await kernel.execute(m.SaveHistory(session_id=session.id, messages=(m.Message(role="user", content="before"),)))
        await kernel.execute(m.Prompt(session_id=session.id, text="q"))
        await run_events(sub)
        history = await kernel.execute(m.GetHistory(session_id=session.id))
        assert [x.content for x in history.messages] == ["before", "q", "answer"]  # type: ignore[union-attr]
        assert await kernel.store.list_sessions() == [] and await kernel.store.load_messages(session.id) == []
        await kernel.execute(m.DeleteSession(session_id=session.id))
        assert session.id not in kernel.sessions


async def test_a_v1_store_gets_tool_outcomes_once(tmp_path: Path) -> None:
    """Schema v1 stored how a tool call ended only as text; v2 says it as data."""
    db = tmp_path / "v1.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, label TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, body BLOB NOT NULL, created_at REAL NOT NULL);"
        "CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL);"
        "PRAGMA user_version=1;"
    )
    conn.execute("INSERT INTO sessions VALUES ('old', 'a', NULL, 1.0, 1.0)")
    texts = {
        "12:00": "ok",
        "tool error: disk on fire": "error",
        "tool error: slow timed out after 60s": "timed_out",
        "tool call rejected: the user declined to run write_file": "rejected",
        "tool call rejected: memory update limit reached (10 per run)": "limit_reached",
        "invalid arguments for x: expected a JSON object": "invalid_arguments",
        "interrupted before the tool finished": "interrupted",
    }
    for i, text in enumerate(texts):
        body = f'{{"role":"tool","content":"{text}","tool_call_id":"c{i}","name":"t"}}'
        conn.execute("INSERT INTO messages(session_id, body, created_at) VALUES ('old', ?, 1.0)", (body.encode(),))
    conn.execute("""INSERT INTO messages(session_id, body, created_at) VALUES ('old', '{"role":"user","content":"tool error: not a tool"}', 1.0)""")
    conn.commit()
    conn.close()
    store = SQLiteStore(db)
    await store.open()
    try:
        messages = await store.load_messages("old")
    finally:
        await store.close()
    assert [(msg.content, msg.outcome) for msg in messages[:-1]] == list(texts.items())
    assert messages[-1].outcome is None  # only tool messages have one
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5


async def test_postgresql_stopped_and_started_again(tmp_path: Path) -> None:
    """Unreachable: every call fails with ``unavailable``, nothing half-written; back: it
    reconnects by itself and what was committed before is there."""
    from kernel import KernelError
    from plugins.stores.postgres import PostgresStore
    from tests.services import own_postgres

    with own_postgres() as server:
        store = PostgresStore(server.url + "?schema=outage", connect_timeout_s=2)
        await store.open()
        try:
            await store.save_session(SessionRecord(session_id="s", agent_id="a"))
            await store.append_messages("s", [m.Message(role="user", content="before")], cap=10)
            await anyio.to_thread.run_sync(server.stop)
            with pytest.raises(KernelError) as down:
                await store.append_messages("s", [m.Message(role="user", content="during")], cap=10)
            assert down.value.code == "unavailable" and "unreachable" in down.value.message
            await anyio.to_thread.run_sync(server.start)
            await store.append_messages("s", [m.Message(role="user", content="after")], cap=10)
            assert [x.content for x in await store.load_messages("s")] == ["before", "after"]
        finally:
            await store.close()
