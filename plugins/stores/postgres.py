"""The kernel's store on PostgreSQL (psycopg 3), for gateway instances that share sessions.

``[store] path = "postgresql://…"`` (or ``GATEWAY_DB``) selects it. It keeps what the SQLite
store keeps — sessions, their history, settings and other small values — in tables of its
own schema (``?schema=NAME`` in the URL; ``gateway`` by default), so several gateway
processes on several machines see one conversation history.

psycopg's synchronous driver runs on worker threads (as the SQLite store does), which works
the same under asyncio and trio; a small pool of connections lets instances' requests run
side by side. A connection that broke (the server restarted) is replaced at the next call;
while the server is unreachable every call fails with the kernel's ``unavailable`` error,
and nothing acknowledged is lost: a write either committed or was reported as failed.
"""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import anyio.to_thread
import msgspec
import psycopg

from kernel import KEY_COLUMNS, KEY_USAGE_SQL, KeyRecord, SessionRecord, check_fence, key_body, key_of_row
from kernel import model as m

T = TypeVar("T")

SCHEMA_VERSION = 1
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_encode = msgspec.json.Encoder().encode
_decode_message = msgspec.json.Decoder(m.Message).decode


def split_url(url: str) -> tuple[str, str]:
    """``postgresql://…?schema=x`` -> (the URL libpq understands, the schema)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), "gateway")
    if not _IDENTIFIER.match(schema):
        raise ValueError(f"invalid schema name {schema!r} in the store URL (lower-case letters, digits, _)")
    rest = [(k, v) for k, v in query if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode(rest))), schema


class PostgresStore:
    def __init__(self, url: str, *, pool_size: int = 4, connect_timeout_s: float = 5.0) -> None:
        self.url, self.schema = split_url(url)
        self.pool_size = pool_size
        self.connect_timeout_s = connect_timeout_s
        self._idle: queue.SimpleQueue[psycopg.Connection[Any]] = queue.SimpleQueue()
        self._limiter = anyio.CapacityLimiter(pool_size)
        self._open = False

    def __repr__(self) -> str:
        parts = urlsplit(self.url)
        where = f"{parts.hostname}:{parts.port or 5432}{parts.path}"
        return f"PostgresStore({where!r}, schema={self.schema!r})"

    # -------------------------------------------------------------- connections

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout_s)))
        conn.execute(f'SET search_path TO "{self.schema}"')
        return conn

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = self._connect()
        try:
            result = fn(conn)
        except psycopg.OperationalError:
            conn.close()  # broken (the server went away): the next call connects anew
            raise
        except BaseException:
            if conn.closed or conn.broken:
                raise
            self._idle.put(conn)
            raise
        self._idle.put(conn)
        return result

    async def call(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn(connection)`` on a worker thread with a pooled connection."""
        if not self._open:
            raise RuntimeError("store is not open")
        try:
            return await anyio.to_thread.run_sync(self._run, fn, limiter=self._limiter)
        except psycopg.OperationalError as exc:
            raise m.KernelError("unavailable", f"the PostgreSQL store is unreachable: {_first_line(exc)}") from None

    async def open(self) -> None:
        def create() -> None:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout_s))) as conn, conn.transaction():
                # One instance at a time creates or migrates the schema: PostgreSQL's
                # ``IF NOT EXISTS`` is not safe against a concurrent create (two instances
                # started together failed with UniqueViolation on pg_namespace / pg_type).
                # The lock is the transaction's: it goes with the commit, or with a crash.
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"gateway store schema {self.schema}",))
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                conn.execute(f'SET LOCAL search_path TO "{self.schema}"')
                # Up to date (the script's last addition is there): no DDL, which would lock
                # the tables the running instances write (an instance restarted in a rolling
                # restart deadlocked with their history writes).
                current = conn.execute(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema=%s AND table_name='sessions' AND column_name='fence'",
                    (self.schema,),
                ).fetchone()
                if current is None:
                    conn.execute(_SCHEMA)
                row = conn.execute("SELECT version FROM schema_version").fetchone()
                if row is None:
                    conn.execute("INSERT INTO schema_version(version) VALUES (%s)", (SCHEMA_VERSION,))
                elif row[0] > SCHEMA_VERSION:
                    raise RuntimeError(f"store schema {self.schema} has version {row[0]}, newer than this gateway ({SCHEMA_VERSION})")

        try:
            await anyio.to_thread.run_sync(create)
        except psycopg.OperationalError as exc:
            raise m.KernelError("unavailable", f"the PostgreSQL store is unreachable: {_first_line(exc)}") from None
        self._open = True

    async def close(self) -> None:
        self._open = False

        def close_all() -> None:
            while True:
                try:
                    self._idle.get_nowait().close()
                except queue.Empty:
                    return

        await anyio.to_thread.run_sync(close_all)

    # -------------------------------------------------------------- sessions

    async def save_session(self, record: SessionRecord) -> None:
        await self.call(
            lambda c: c.execute(
                "INSERT INTO sessions(session_id, agent_id, label, created_at, updated_at, owner) VALUES (%s,%s,%s,%s,%s,%s)"
                " ON CONFLICT (session_id) DO UPDATE SET label=EXCLUDED.label, updated_at=EXCLUDED.updated_at",
                (record.session_id, record.agent_id, record.label, record.created_at or time.time(), time.time(), record.owner),
            )
        )

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self.call(lambda c: _select_sessions(c, "WHERE s.session_id=%s", (session_id,)))
        return rows[0] if rows else None

    async def list_sessions(self, agent_id: str | None = None) -> list[SessionRecord]:
        if agent_id is None:
            return await self.call(lambda c: _select_sessions(c, "", ()))
        return await self.call(lambda c: _select_sessions(c, "WHERE s.agent_id=%s", (agent_id,)))

    async def set_title(self, session_id: str, title: str) -> None:
        await self.call(lambda c: c.execute("UPDATE sessions SET title=%s WHERE session_id=%s", (title, session_id)))

    async def delete_session(self, session_id: str) -> None:
        def run(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM messages WHERE session_id=%s", (session_id,))
                conn.execute("DELETE FROM sessions WHERE session_id=%s", (session_id,))

        await self.call(run)

    # -------------------------------------------------------------- messages

    async def take_session(self, session_id: str) -> int:
        row = await self.call(lambda c: c.execute("UPDATE sessions SET fence=fence+1 WHERE session_id=%s RETURNING fence", (session_id,)).fetchone())
        return 0 if row is None else int(row[0])

    async def append_messages(self, session_id: str, messages: Sequence[m.Message], cap: int, fence: int | None = None) -> None:
        rows = [(session_id, _encode(msg), msg.created_at or time.time()) for msg in messages]

        def run(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("INSERT INTO messages(session_id, body, created_at) VALUES (%s,%s,%s)", rows)
                cur.execute(
                    "DELETE FROM messages WHERE session_id=%s AND id NOT IN"
                    " (SELECT id FROM messages WHERE session_id=%s ORDER BY id DESC LIMIT %s)",
                    (session_id, session_id, cap),
                )
                check_fence(cur, session_id, fence, "%s")

        await self.call(run)

    async def load_messages(self, session_id: str, limit: int | None = None) -> list[m.Message]:
        def run(conn: psycopg.Connection[Any]) -> list[m.Message]:
            rows = conn.execute(
                "SELECT body FROM (SELECT id, body FROM messages WHERE session_id=%s ORDER BY id DESC LIMIT %s) AS recent ORDER BY id",
                (session_id, limit),
            ).fetchall()
            return [_decode_message(bytes(r[0])) for r in rows]

        return await self.call(run)

    async def replace_messages(self, session_id: str, messages: Sequence[m.Message], fence: int | None = None) -> None:
        rows = [(session_id, _encode(msg), msg.created_at or time.time()) for msg in messages]

        def run(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("DELETE FROM messages WHERE session_id=%s", (session_id,))
                cur.executemany("INSERT INTO messages(session_id, body, created_at) VALUES (%s,%s,%s)", rows)
                check_fence(cur, session_id, fence, "%s")

        await self.call(run)

    # -------------------------------------------------------------- values

    async def get_value(self, key: str) -> bytes | None:
        row = await self.call(lambda c: c.execute("SELECT value FROM kv WHERE key=%s", (key,)).fetchone())
        return None if row is None else bytes(row[0])

    async def set_value(self, key: str, value: bytes) -> None:
        await self.call(
            lambda c: c.execute(
                "INSERT INTO kv(key, value) VALUES (%s,%s) ON CONFLICT (key) DO UPDATE SET value=EXCLUDED.value", (key, value)
            )
        )

    # -------------------------------------------------------------- keys (kernel/keys.py)

    async def insert_key(self, record: KeyRecord) -> bool:
        """A new key; a revoked key's name may be used again. False: the name is taken."""
        def run(conn: psycopg.Connection[Any]) -> bool:
            with conn.transaction():
                conn.execute("DELETE FROM api_keys WHERE name=%s AND revoked_at IS NOT NULL", (record.name,))
                cur = conn.execute(
                    "INSERT INTO api_keys(name, secret_hash, body) VALUES (%s,%s,%s) ON CONFLICT (name) DO NOTHING",
                    (record.name, record.secret_hash, key_body(record)),
                )
                return cur.rowcount == 1

        return await self.call(run)

    async def _one_key(self, where: str, arg: str) -> KeyRecord | None:
        row = await self.call(lambda c: c.execute(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE {where}=%s", (arg,)).fetchone())
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
        return int(row[0]) if row is not None else 0

    async def revoke_key(self, name: str, at: float) -> bool:
        cur = await self.call(lambda c: c.execute("UPDATE api_keys SET revoked_at=%s WHERE name=%s AND revoked_at IS NULL", (at, name)))
        return cur.rowcount == 1

    async def touch_key(self, name: str, at: float) -> None:
        await self.call(lambda c: c.execute("UPDATE api_keys SET last_used_at=%s WHERE name=%s", (at, name)))

    async def add_key_usage(self, name: str, day: str, requests: int, tokens: int) -> None:
        """One atomic update (concurrent instances all count): a new day restarts the day's counters."""
        await self.call(lambda c: c.execute(KEY_USAGE_SQL, (day, requests, day, tokens, day, requests, tokens, name)))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    label      TEXT,
    title      TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id         BIGSERIAL PRIMARY KEY,
    session_id TEXT NOT NULL,
    body       BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session_id, id);
CREATE TABLE IF NOT EXISTS kv (
    key   TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);
-- Sessions' owners (the key that created them; before keys: the admin) and the API keys.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT 'admin';
-- The fence of each session: bumped by each instance that takes it over; a history write that
-- carries an older one is refused (kernel/store.py). Older gateways ignore it: a rolling upgrade works.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS fence BIGINT NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS api_keys (
    name           TEXT PRIMARY KEY,
    secret_hash    TEXT NOT NULL UNIQUE,
    body           BYTEA NOT NULL,
    revoked_at     DOUBLE PRECISION,
    last_used_at   DOUBLE PRECISION,
    usage_day      TEXT NOT NULL DEFAULT '',
    requests_today BIGINT NOT NULL DEFAULT 0,
    tokens_today   BIGINT NOT NULL DEFAULT 0,
    requests_total BIGINT NOT NULL DEFAULT 0,
    tokens_total   BIGINT NOT NULL DEFAULT 0
);
"""


def _select_sessions(conn: psycopg.Connection[Any], where: str, args: tuple[Any, ...]) -> list[SessionRecord]:
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


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
