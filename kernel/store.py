"""Persistence: a small Store protocol and its SQLite default.

SQLite (stdlib) in WAL mode with the schema version in ``PRAGMA user_version``.
All calls go through one connection serialized by a capacity limiter of one, on a
worker thread, so the event loop never waits on disk. The kernel writes at
prompt acceptance and at run end, never per token.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import msgspec

from .keys import KeyRecord
from .model import KernelError, Message, ToolOutcome

T = TypeVar("T")

SCHEMA_VERSION = 5

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    label      TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    title      TEXT,
    owner      TEXT NOT NULL DEFAULT 'admin',
    fence      INTEGER NOT NULL DEFAULT 0
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
CREATE TABLE IF NOT EXISTS api_keys (
    name           TEXT PRIMARY KEY,
    secret_hash    TEXT NOT NULL UNIQUE,
    body           BLOB NOT NULL,
    revoked_at     REAL,
    last_used_at   REAL,
    usage_day      TEXT NOT NULL DEFAULT '',
    requests_today INTEGER NOT NULL DEFAULT 0,
    tokens_today   INTEGER NOT NULL DEFAULT 0,
    requests_total INTEGER NOT NULL DEFAULT 0,
    tokens_total   INTEGER NOT NULL DEFAULT 0
);
"""

#: Keys: ``body`` holds what does not change (a :class:`~kernel.keys.KeyRecord` as JSON: name,
#: the secret's hash, scopes, agents, limits, dates); the columns what does.
KEY_USAGE_SQL = (
    "UPDATE api_keys SET requests_today = CASE WHEN usage_day=%s THEN requests_today ELSE 0 END + %s,"
    " tokens_today = CASE WHEN usage_day=%s THEN tokens_today ELSE 0 END + %s, usage_day=%s,"
    " requests_total = requests_total + %s, tokens_total = tokens_total + %s WHERE name=%s"
)
KEY_COLUMNS = "body, revoked_at, last_used_at, usage_day, requests_today, tokens_today, requests_total, tokens_total"


class SessionRecord(msgspec.Struct, kw_only=True):
    session_id: str
    agent_id: str
    label: str | None = None
    title: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    message_count: int = 0
    # The principal (key name) that created it; ``admin`` for sessions from before keys.
    owner: str = "admin"


def fenced_out(session_id: str) -> KernelError:
    """A write of an instance that no longer runs the session (another took it over: the
    store's fence for it moved on): refused, so two instances never both write its history."""
    return KernelError(
        "owner_lost", f"session {session_id} is run by another gateway instance now (this one lost it): this write was not recorded; retry"
    )


class Store(Protocol):
    """What the kernel persists. Another store can be plugged in behind this.

    **Fencing** (several instances on one store): an instance that takes a session over calls
    :meth:`take_session` and passes the number it got as ``fence`` to the session's history
    writes; a write whose fence is no longer the session's current one is refused with
    :func:`fenced_out` and changes nothing. So an instance that lost a session without
    knowing it yet (its lease ran out while it was busy) cannot write beside the new owner.
    ``fence=None``: unfenced (one process, or a session that was never taken over).
    """

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def save_session(self, record: SessionRecord) -> None: ...
    async def get_session(self, session_id: str) -> SessionRecord | None: ...
    async def list_sessions(self, agent_id: str | None = None) -> list[SessionRecord]: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def set_title(self, session_id: str, title: str) -> None: ...
    async def take_session(self, session_id: str) -> int:
        """This instance runs the session from now on: its new fence, above every earlier one."""
        ...

    async def append_messages(self, session_id: str, messages: Sequence[Message], cap: int, fence: int | None = None) -> None: ...
    async def load_messages(self, session_id: str, limit: int | None = None) -> list[Message]: ...
    async def replace_messages(self, session_id: str, messages: Sequence[Message], fence: int | None = None) -> None: ...
    async def get_value(self, key: str) -> bytes | None: ...
    async def set_value(self, key: str, value: bytes) -> None: ...
    # API keys (kernel/keys.py): looked up per request, so a revocation holds at once.
    async def insert_key(self, record: KeyRecord) -> bool: ...
    async def find_key(self, secret_hash: str) -> KeyRecord | None: ...
    async def get_key(self, name: str) -> KeyRecord | None: ...
    async def list_keys(self) -> list[KeyRecord]: ...
    async def count_keys(self) -> int: ...
    async def revoke_key(self, name: str, at: float) -> bool: ...
    async def touch_key(self, name: str, at: float) -> None: ...
    async def add_key_usage(self, name: str, day: str, requests: int, tokens: int) -> None: ...


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
        if version < 5:  # v5: sessions have a fence (the writes of an instance that lost one are refused)
            conn.execute("ALTER TABLE sessions ADD COLUMN fence INTEGER NOT NULL DEFAULT 0")
        if version < 4:  # v4: sessions have an owner (the key that created them; before keys: the admin)
            conn.execute("ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT 'admin'")
        if version < 3:  # v3: sessions have a title (their first prompt, shortened)
            conn.execute("ALTER TABLE sessions ADD COLUMN title TEXT")
        if version < 2:  # v2: tool messages say how the call ended (``Message.outcome``)
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
            with _transaction(conn):
                self._migrate(conn, version)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        else:
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
                "INSERT INTO sessions(session_id, agent_id, label, created_at, updated_at, owner) VALUES (?,?,?,?,?,?)"
                " ON CONFLICT(session_id) DO UPDATE SET label=excluded.label, updated_at=excluded.updated_at",
                (record.session_id, record.agent_id, record.label, record.created_at or time.time(), time.time(), record.owner),
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
            with _transaction(conn):
                conn.execute("DELETE FROM messages WHERE session_id=?", (session_id,))
                conn.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))

        await self.call(run)

    async def take_session(self, session_id: str) -> int:
        row = await self.call(lambda c: c.execute("UPDATE sessions SET fence=fence+1 WHERE session_id=? RETURNING fence", (session_id,)).fetchone())
        return 0 if row is None else int(row[0])

    async def append_messages(self, session_id: str, messages: Sequence[Message], cap: int, fence: int | None = None) -> None:
        rows = [(session_id, _encode(m), m.created_at or time.time()) for m in messages]

        def run(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.executemany("INSERT INTO messages(session_id, body, created_at) VALUES (?,?,?)", rows)
                conn.execute(
                    "DELETE FROM messages WHERE session_id=? AND id NOT IN"
                    " (SELECT id FROM messages WHERE session_id=? ORDER BY id DESC LIMIT ?)",
                    (session_id, session_id, cap),
                )
                check_fence(conn, session_id, fence, "?")

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

    async def replace_messages(self, session_id: str, messages: Sequence[Message], fence: int | None = None) -> None:
        rows = [(session_id, _encode(m), m.created_at or time.time()) for m in messages]

        def run(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute("DELETE FROM messages WHERE session_id=?", (session_id,))
                conn.executemany("INSERT INTO messages(session_id, body, created_at) VALUES (?,?,?)", rows)
                check_fence(conn, session_id, fence, "?")

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


    # -------------------------------------------------------------- keys

    async def insert_key(self, record: KeyRecord) -> bool:
        """A new key; a revoked key's name may be used again. False: the name is taken."""
        def run(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                conn.execute("DELETE FROM api_keys WHERE name=? AND revoked_at IS NOT NULL", (record.name,))
                cur = conn.execute(
                    "INSERT INTO api_keys(name, secret_hash, body) VALUES (?,?,?) ON CONFLICT(name) DO NOTHING",
                    (record.name, record.secret_hash, key_body(record)),
                )
                return cur.rowcount == 1

        return await self.call(run)

    async def _one_key(self, where: str, arg: str) -> KeyRecord | None:
        row = await self.call(lambda c: c.execute(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE {where}=?", (arg,)).fetchone())
        return None if row is None else key_of_row(row)

    async def find_key(self, secret_hash: str) -> KeyRecord | None:
        return await self._one_key("secret_hash", secret_hash)

    async def get_key(self, name: str) -> KeyRecord | None:
        return await self._one_key("name", name)

    async def list_keys(self) -> list[KeyRecord]:
        rows = await self.call(lambda c: c.execute(f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY name").fetchall())
        return [key_of_row(r) for r in rows]

    async def count_keys(self) -> int:
        row = await self.call(lambda c: c.execute("SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL").fetchone())
        return int(row[0])

    async def revoke_key(self, name: str, at: float) -> bool:
        cur = await self.call(lambda c: c.execute("UPDATE api_keys SET revoked_at=? WHERE name=? AND revoked_at IS NULL", (at, name)))
        return cur.rowcount == 1

    async def touch_key(self, name: str, at: float) -> None:
        await self.call(lambda c: c.execute("UPDATE api_keys SET last_used_at=? WHERE name=?", (at, name)))

    async def add_key_usage(self, name: str, day: str, requests: int, tokens: int) -> None:
        """One atomic update: a new day restarts the day's counters."""
        await self.call(lambda c: c.execute(KEY_USAGE_SQL.replace("%s", "?"), (day, requests, day, tokens, day, requests, tokens, name)))


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One transaction. The connection is in autocommit mode (``isolation_level=None``), where
    ``with conn:`` starts none: each statement of a write that must be whole (a history
    replaced, a refused fenced write) would have been committed on its own."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def check_fence(conn: Any, session_id: str, fence: int | None, mark: str) -> None:
    """The last statement of a history write's transaction (both stores; ``mark`` is the
    driver's placeholder): the session is touched — when the write is fenced, only while
    ``fence`` is still the session's, else the transaction is rolled back. Its row lock orders
    it against a takeover's; last, so that every write locks messages before sessions (a
    schema check of an instance starting locks them in that order too: no deadlock)."""
    if fence is None:
        conn.execute(f"UPDATE sessions SET updated_at={mark} WHERE session_id={mark}", (time.time(), session_id))
        return
    touched = conn.execute(f"UPDATE sessions SET updated_at={mark} WHERE session_id={mark} AND fence={mark}", (time.time(), session_id, fence))
    if touched.rowcount != 1:
        raise fenced_out(session_id)


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
        " (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.session_id), s.title, s.owner"
        f" FROM sessions s {where} ORDER BY s.created_at",
        args,
    ).fetchall()
    return [
        SessionRecord(
            session_id=r[0], agent_id=r[1], label=r[2], created_at=r[3], updated_at=r[4], message_count=r[5], title=r[6], owner=r[7]
        )
        for r in rows
    ]


_decode_key = msgspec.json.Decoder(KeyRecord).decode


def key_body(record: KeyRecord) -> bytes:
    """The unchanging part of a key as stored (the changing counters have columns)."""
    fixed = msgspec.structs.replace(
        record, revoked_at=None, last_used_at=None, usage_day="", requests_today=0, tokens_today=0, requests_total=0, tokens_total=0
    )
    return _encode(fixed)


def key_of_row(row: Sequence[Any]) -> KeyRecord:
    """A key from ``SELECT KEY_COLUMNS`` (both stores)."""
    return msgspec.structs.replace(
        _decode_key(bytes(row[0])), revoked_at=row[1], last_used_at=row[2], usage_day=row[3],
        requests_today=row[4], tokens_today=row[5], requests_total=row[6], tokens_total=row[7],
    )
