"""Local transports with a configured key (ACP over real pipes), and the store's migration.

An editor whose ACP section names Alice's key sees only Alice's sessions (``session/list``),
cannot load Bob's (the same error as a missing session), and prompts as Alice; an unknown key is
a start-up error; without a key the process is the admin. A SQLite store from before keys
(schema v3) keeps its sessions, owned by the admin.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kernel import KernelError
from kernel import model as m
from kernel.store import SCHEMA_VERSION, SQLiteStore
from kernel.testing import running_kernel
from tests.transports.acp._pipes import editor, prompt
from transports.acp import AcpConfig, AcpTransport

pytestmark = pytest.mark.anyio


async def test_an_editor_with_a_configured_key_is_that_key() -> None:
    async with running_kernel() as kernel:
        _, alice = await kernel.keys.create("alice")
        bob_record, _ = await kernel.keys.create("bob")
        bob = m.Caller(principal=bob_record.principal(), transport="test")
        await kernel.execute(m.OpenSession(session_id="bobs"), bob)
        await kernel.execute(m.OpenSession(session_id="admins"))
        async with editor(kernel, AcpConfig(api_key=alice)) as (pipe, session):
            answered, _ = await pipe.call(2, "session/prompt", prompt(session, "hello"))
            assert answered["result"]["stopReason"] == "end_turn"
            listed, _ = await pipe.call(3, "session/list", {})
            assert [s["sessionId"] for s in listed["result"]["sessions"]] == [session]
            others, _ = await pipe.call(4, "session/load", {"sessionId": "bobs", "cwd": "/project", "mcpServers": []})
            missing, _ = await pipe.call(5, "session/load", {"sessionId": "nobody", "cwd": "/project", "mcpServers": []})
            assert others["error"]["code"] == missing["error"]["code"]
            assert others["error"]["message"].replace("bobs", "X") == missing["error"]["message"].replace("nobody", "X")
        info = await kernel.execute(m.GetSession(session_id=session))
        assert info.session.owner == "alice"
        # Without a key the editor is the admin: it lists everyone's sessions.
        async with editor(kernel, AcpConfig()) as (pipe, own):
            listed, _ = await pipe.call(3, "session/list", {})
            assert {s["sessionId"] for s in listed["result"]["sessions"]} >= {"bobs", "admins", session, own}


async def test_an_unknown_or_revoked_key_is_a_start_up_error() -> None:
    async with running_kernel() as kernel:
        _, secret = await kernel.keys.create("gone")
        await kernel.keys.revoke("gone")
        for key in (secret, "gw-never-issued"):
            with pytest.raises(ValueError, match="unknown, revoked or expired"):
                await AcpTransport(stdin_fd=0, stdout_fd=1).serve(kernel, AcpConfig(api_key=key))


async def test_a_store_from_before_keys_keeps_its_sessions_as_the_admins(tmp_path: Path) -> None:
    db = tmp_path / "v3.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, label TEXT, created_at REAL NOT NULL,"
        " updated_at REAL NOT NULL, title TEXT);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, body BLOB NOT NULL, created_at REAL NOT NULL);"
        "CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL);"
        "INSERT INTO sessions VALUES ('old', 'a', NULL, 1.0, 1.0, 'hello');"
        "PRAGMA user_version=3;"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(db)
    await store.open()
    try:
        record = await store.get_session("old")
        assert record is not None and record.owner == "admin" and record.title == "hello"
        assert await store.count_keys() == 0
    finally:
        await store.close()
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    async with running_kernel(db_path=db) as kernel:
        record, _ = await kernel.keys.create("alice")
        alice = m.Caller(principal=record.principal())
        with pytest.raises(KernelError) as refused:
            await kernel.execute(m.GetSession(session_id="old"), alice)
        assert refused.value.code == "not_found"
        listed = await kernel.execute(m.ListSessions())
        assert [(s.session_id, s.owner) for s in listed.sessions] == [("old", "admin")]
