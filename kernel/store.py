"""Persistence: a small Store protocol and its SQLite default.

SQLite (stdlib) in WAL mode with the schema version in ``PRAGMA user_version``.
All calls go through one connection serialized by a capacity limiter of one, on a
worker thread, so the event loop never waits on disk. The kernel writes at
prompt acceptance and at run end, never per token.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import msgspec

from .model import Message, ToolOutcome

T = TypeVar("T")

SCHEMA_VERSION = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    label      TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    title      TEXT
);
CREATE TABLE IF NOT EXISTS messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    body       BLOB NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session_id, id);
CREATE TABLE IF NOT EXISTS kv (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
"""


class SessionRecord(msgspec.Struct, kw_only=True):
    session_id: str
    agent_id: str
    label: str | None = None
    title: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    message_count: int = 0


class Store(Protocol):
    """What the kernel persists. Another store can be plugged in behind this."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def save_session(self, record: SessionRecord) -> None: ...
    async def get_session(self, session_id: str) -> SessionRecord | None: ...
    async def list_sessions(self, agent_id: str | None = None) -> list[SessionRecord]: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def set_title(self, session_id: str, title: str) -> None: ...
    async def append_messages(self, session_id: str, messages: Sequence[Message], cap: int) -> None: ...
    async def load_messages(self, session_id: str, limit: int | None = None) -> list[Message]: ...
    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None: ...
    async def get_value(self, key: str) -> bytes | None: ...
    async def set_value(self, key: str, value: bytes) -> None: ...


_encode = msgspec.json.Encoder().encode
_decode_message = msgspec.json.Decoder(Message).decode


class SQLiteStore:
    """The default store. ``path`` may be ``:memory:`` for throwaway kernels."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path) if str(path) == ":memory:" else str(Path(path).expanduser())
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)

    async def open(self) -> None:
        await anyio.to_thread.run_sync(self._open_sync, limiter=self._limiter)

    @staticmethod
    def _migrate(conn: sqlite3.Connection, version: int) -> None:
        """Bring an older store up to ``SCHEMA_VERSION``, in one transaction."""
        if version < 3:  # v3: sessions have a title (their first prompt, shortened)
            conn.execute("ALTER TABLE sessions ADD COLUMN title TEXT")
        if version < 2:  # v2: tool messages say how the call ended (``Message.outcome``)
            with conn:
                rows = conn.execute("SELECT id, body FROM messages").fetchall()
                for row_id, body in rows:
                    message = _decode_message(body)
                    if message.role == "tool" and message.outcome is None:
                        fixed = msgspec.structs.replace(message, outcome=outcome_of_v1_text(message.content))
                        conn.execute("UPDATE messages SET body=? WHERE id=?", (_encode(fixed), row_id))

    def _open_sync(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            conn.close()
            raise RuntimeError(f"store {self.path} has schema {version}, newer than this gateway ({SCHEMA_VERSION})")
        conn.executescript(_SCHEMA)
        if 0 < version < SCHEMA_VERSION:
            self._migrate(conn, version)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._conn = conn

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` on the store's thread. Plugins (memory tools) use it."""
        if self._conn is None:
            raise RuntimeError("store is not open")
        conn = self._conn
        return await anyio.to_thread.run_sync(fn, conn, limiter=self._limiter)

    async def save_session(self, record: SessionRecord) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO sessions(session_id, agent_id, label, created_at, updated_at) VALUES (?,?,?,?,?)"
                " ON CONFLICT(session_id) DO UPDATE SET label=excluded.label, updated_at=excluded.updated_at",
                (record.session_id, record.agent_id, record.label, record.created_at or time.time(), time.time()),
            )

        await self.call(run)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self.call(lambda c: _select_sessions(c, "WHERE s.session_id=?", (session_id,)))
        return rows[0] if rows else None

    async def list_sessions(self, agent_id: str | None = None) -> list[SessionRecord]:
        if agent_id is None:
            return await self.call(lambda c: _select_sessions(c, "", ()))
        return await self.call(lambda c: _select_sessions(c, "WHERE s.agent_id=?", (agent_id,)))

    async def set_title(self, session_id: str, title: str) -> None:
        await self.call(lambda c: c.execute("UPDATE sessions SET title=? WHERE session_id=?", (title, session_id)))

    async def delete_session(self, session_id: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("DELETE FROM messages WHERE session_id=?", (session_id,))
                conn.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))

        await self.call(run)

    async def append_messages(self, session_id: str, messages: Sequence[Message], cap: int) -> None:
        rows = [(session_id, _encode(m), m.created_at or time.time()) for m in messages]

        def run(conn: sqlite3.Connection) -> None:
            with conn:
                conn.executemany("INSERT INTO messages(session_id, body, created_at) VALUES (?,?,?)", rows)
                conn.execute(
                    "DELETE FROM messages WHERE session_id=? AND id NOT IN"
                    " (SELECT id FROM messages WHERE session_id=? ORDER BY id DESC LIMIT ?)",
                    (session_id, session_id, cap),
                )
                conn.execute("UPDATE sessions SET updated_at=? WHERE session_id=?", (time.time(), session_id))

        await self.call(run)

    async def load_messages(self, session_id: str, limit: int | None = None) -> list[Message]:
        def run(conn: sqlite3.Connection) -> list[Message]:
            rows = conn.execute(
                "SELECT body FROM (SELECT id, body FROM messages WHERE session_id=? ORDER BY id DESC LIMIT ?)"
                " ORDER BY id",
                (session_id, -1 if limit is None else limit),
            ).fetchall()
            return [_decode_message(r[0]) for r in rows]

        return await self.call(run)

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        rows = [(session_id, _encode(m), m.created_at or time.time()) for m in messages]

        def run(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("DELETE FROM messages WHERE session_id=?", (session_id,))
                conn.executemany("INSERT INTO messages(session_id, body, created_at) VALUES (?,?,?)", rows)

        await self.call(run)

    async def get_value(self, key: str) -> bytes | None:
        row = await self.call(lambda c: c.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone())
        return None if row is None else bytes(row[0])

    async def set_value(self, key: str, value: bytes) -> None:
        await self.call(
            lambda c: c.execute(
                "INSERT INTO kv(key, value) VALUES (?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, value),
            )
        )


def outcome_of_v1_text(content: str) -> ToolOutcome:
    """How a tool call stored by schema v1 ended, from the text the kernel then wrote."""
    for prefix, outcome in _V1_PREFIXES:
        if content.startswith(prefix):
            if outcome == "rejected" and " limit reached (" in content:
                return "limit_reached"
            if outcome == "error" and " timed out after " in content:
                return "timed_out"
            return outcome
    return "ok"


_V1_PREFIXES: tuple[tuple[str, ToolOutcome], ...] = (
    ("tool error: ", "error"),
    ("tool call rejected: ", "rejected"),
    ("invalid arguments for ", "invalid_arguments"),
    ("interrupted before the tool finished", "interrupted"),
)


def _select_sessions(conn: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> list[SessionRecord]:
    rows = conn.execute(
        "SELECT s.session_id, s.agent_id, s.label, s.created_at, s.updated_at,"
        " (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.session_id), s.title"
        f" FROM sessions s {where} ORDER BY s.created_at",
        args,
    ).fetchall()
    return [
        SessionRecord(session_id=r[0], agent_id=r[1], label=r[2], created_at=r[3], updated_at=r[4], message_count=r[5], title=r[6])
        for r in rows
    ]
