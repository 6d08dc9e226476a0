"""The key table of both stores (SQLite and PostgreSQL): what kernel/keys.py relies on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from kernel import SessionRecord, Store
from kernel.keys import KeyRecord, hash_secret, new_secret
from kernel.store import SQLiteStore

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def opened(kind: str, tmp_path: Path) -> AsyncIterator[Store]:
    if kind == "sqlite":
        store: Store = SQLiteStore(tmp_path / "keys.db")
        await store.open()
        try:
            yield store
        finally:
            await store.close()
        return
    from plugins.stores.postgres import PostgresStore
    from tests.services import postgres_schema

    with postgres_schema() as url:
        store = PostgresStore(url)
        await store.open()
        try:
            yield store
        finally:
            await store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_keys_and_owners_in_the_store(kind: str, tmp_path: Path) -> None:
    async with opened(kind, tmp_path) as store:
        secret = new_secret()
        record = KeyRecord(name="alice", secret_hash=hash_secret(secret), scopes=("read",), agents=("coder",), rpm=5, created_at=1.0)
        assert await store.insert_key(record)
        assert not await store.insert_key(KeyRecord(name="alice", secret_hash=hash_secret(new_secret())))  # the name is taken
        found = await store.find_key(hash_secret(secret))
        assert found is not None and found.name == "alice" and found.scopes == ("read",) and found.agents == ("coder",) and found.rpm == 5
        assert await store.find_key(hash_secret(secret + "x")) is None
        assert await store.count_keys() == 1
        # Usage: one atomic update per run; a new day starts the day's counters again.
        await store.add_key_usage("alice", "2026-12-01", 1, 100)
        await store.add_key_usage("alice", "2026-12-01", 1, 50)
        day = await store.get_key("alice")
        assert day is not None and (day.usage_day, day.requests_today, day.tokens_today, day.tokens_total) == ("2026-12-01", 2, 150, 150)
        await store.add_key_usage("alice", "2026-12-02", 1, 7)
        await store.touch_key("alice", 42.0)
        later = await store.get_key("alice")
        assert later is not None and (later.requests_today, later.tokens_today, later.requests_total, later.tokens_total) == (1, 7, 3, 157)
        assert later.last_used_at == 42.0
        # Concurrent usage updates all count (the cluster's instances share the row).
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(store.add_key_usage, "alice", "2026-12-02", 1, 1)
        counted = await store.get_key("alice")
        assert counted is not None and counted.requests_today == 21 and counted.tokens_today == 27
        # Revocation, then the name again for a new key.
        assert await store.revoke_key("alice", 50.0)
        assert not await store.revoke_key("alice", 51.0)
        assert await store.count_keys() == 0
        gone = await store.find_key(hash_secret(secret))
        assert gone is not None and gone.revoked_at == 50.0
        again = new_secret()
        assert await store.insert_key(KeyRecord(name="alice", secret_hash=hash_secret(again)))
        assert await store.find_key(hash_secret(secret)) is None and await store.find_key(hash_secret(again)) is not None
        assert [k.name for k in await store.list_keys()] == ["alice"]
        # Sessions record their owner.
        await store.save_session(SessionRecord(session_id="s", agent_id="a", owner="alice"))
        await store.save_session(SessionRecord(session_id="t", agent_id="a"))
        owners = {r.session_id: r.owner for r in await store.list_sessions()}
        assert owners == {"s": "alice", "t": "admin"}
