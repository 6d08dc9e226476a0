"""Issue 29 item 4: instances started together on a fresh PostgreSQL schema all start.

Without a lock, concurrent ``CREATE SCHEMA IF NOT EXISTS`` / ``CREATE TABLE IF NOT EXISTS``
race in PostgreSQL's catalogs (``UniqueViolation`` on ``pg_namespace_nspname_index`` or
``pg_type_typname_nsp_index``, 3 of 8 tries by hand). Each store opens on its own thread, as
separate instances would, all released at once by a barrier.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from kernel import SessionRecord
from plugins.stores.postgres import PostgresStore
from tests.services import postgres_schema

pytestmark = pytest.mark.anyio

INSTANCES = 8


@pytest.mark.parametrize("round_", range(3))
def test_many_stores_open_one_fresh_schema_at_once(round_: int) -> None:
    with postgres_schema() as url:
        barrier = threading.Barrier(INSTANCES)
        failures: list[BaseException] = []

        def one(index: int) -> None:
            async def start() -> None:
                store = PostgresStore(url)
                barrier.wait(timeout=30)
                await store.open()
                try:
                    await store.save_session(SessionRecord(session_id=f"s{index}", agent_id="a", created_at=1.0))
                finally:
                    await store.close()

            try:
                anyio.run(start, backend="trio" if index % 2 else "asyncio")
            except BaseException as exc:  # reported below, with every other thread's
                failures.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(INSTANCES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not failures, failures

        async def count() -> int:
            store = PostgresStore(url)
            await store.open()
            try:
                return len(await store.list_sessions(None))
            finally:
                await store.close()

        assert anyio.run(count) == INSTANCES
