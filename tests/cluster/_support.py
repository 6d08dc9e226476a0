"""Kernels that share sessions through a real PostgreSQL (a schema of the test's own) and
a real Redis (a key prefix of the test's own)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from kernel import Kernel, Settings
from kernel.testing import ScriptedProvider
from plugins.cluster.redis import RedisCluster
from plugins.stores.postgres import PostgresStore
from tests.services import postgres_schema, redis_url


@asynccontextmanager
async def cluster_kernels(
    providers: Sequence[Any], *, lease_s: float = 2.0, settings: Settings | None = None, tools: Sequence[Any] = ()
) -> AsyncIterator[list[Kernel]]:
    """One kernel per provider, all on one store schema and one key prefix."""
    prefix = f"gwtest-{uuid.uuid4().hex[:10]}"
    url = redis_url()
    with postgres_schema() as store_url:
        async with AsyncExitStack() as stack:
            kernels = []
            for i, provider in enumerate(providers):
                config = settings or Settings()
                config.provider.default = "scripted"
                cluster = RedisCluster(url, instance_id=f"{prefix}-{i}", key_prefix=prefix, lease_s=lease_s, forward_timeout_s=5.0)
                kernel = Kernel(
                    config,
                    providers={"scripted": lambda _s, p=provider: p},
                    tools=tools,
                    store=PostgresStore(store_url),
                    cluster=cluster,
                )
                kernels.append(await stack.enter_async_context(kernel))
            yield kernels


def scripted(*args: Any, **kwargs: Any) -> ScriptedProvider:
    return ScriptedProvider(*args, **kwargs)
