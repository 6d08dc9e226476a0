"""``/livez`` and ``/readyz`` on every HTTP-serving transport's port, open like ``/health``."""

from __future__ import annotations

import httpx
import pytest

from kernel import Kernel, Settings, SQLiteStore
from kernel.testing import ScriptedProvider, running_kernel
from plugins.cluster.redis import RedisCluster
from tests.reliability._support import serving
from tests.services import free_port

pytestmark = pytest.mark.anyio

PORTS = ["http", "openfang", "agui", "agent-cli"]


class FlakyStore(SQLiteStore):
    """A real SQLite store whose reads can be made to fail (a store that stopped answering)."""

    broken = False

    async def get_value(self, key: str) -> bytes | None:
        if self.broken:
            raise OSError("disk I/O error")
        return await super().get_value(key)


async def test_every_port_answers_livez_and_readyz_without_a_token_and_readyz_names_what_is_not_ready(tmp_path: object, anyio_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_TOKEN", "secret-token")  # the probes carry none: still answered
    store = FlakyStore(f"{tmp_path}/g.db")
    async with running_kernel(store=store) as kernel, serving(kernel, PORTS) as live:
        async with httpx.AsyncClient(timeout=10) as client:
            for name in PORTS:
                base = live.urls[name]
                live_ = await client.get(f"{base}/livez")
                ready = await client.get(f"{base}/readyz")
                assert (live_.status_code, live_.json()) == (200, {"status": "ok"}), name
                assert (ready.status_code, ready.json()) == (200, {"status": "ready"}), name
            store.broken = True
            for name in PORTS:
                ready = await client.get(f"{live.urls[name]}/readyz")
                assert ready.status_code == 503 and "disk I/O error" in ready.json()["not_ready"]["store"], name
                assert (await client.get(f"{live.urls[name]}/livez")).status_code == 200  # alive, just not ready
            store.broken = False
            live.kernel.start_draining()
            for name in PORTS:
                ready = await client.get(f"{live.urls[name]}/readyz")
                assert ready.status_code == 503 and list(ready.json()["not_ready"]) == ["draining"], name
            # Other routes still want the token.
            assert (await client.get(f"{live.urls['http']}/v1/sessions")).status_code == 401


async def test_readyz_names_the_cluster_when_its_redis_does_not_answer(tmp_path: object, anyio_backend: str) -> None:
    settings = Settings()
    settings.provider.default = "scripted"
    provider = ScriptedProvider()
    cluster = RedisCluster(f"redis://127.0.0.1:{free_port()}/0", lease_s=1.0)  # nothing listens there
    kernel = Kernel(settings, providers={"scripted": lambda _s: provider}, store=SQLiteStore(f"{tmp_path}/c.db"), cluster=cluster)
    async with kernel, serving(kernel, ["http"]) as live, httpx.AsyncClient(timeout=10) as client:
        ready = await client.get(f"{live.urls['http']}/readyz")
        assert ready.status_code == 503 and list(ready.json()["not_ready"]) == ["cluster"], ready.text
        assert "Redis is unreachable" in ready.json()["not_ready"]["cluster"]
        assert (await client.get(f"{live.urls['http']}/livez")).status_code == 200
