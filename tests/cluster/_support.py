"""Kernels — in-process, or real ``gateway serve`` processes — that share sessions through a
real PostgreSQL (a schema of the test's own) and a real Redis (a key prefix of the test's own)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from kernel import Kernel, Settings
from kernel.testing import ScriptedProvider
from plugins.cluster.redis import RedisCluster
from plugins.stores.postgres import PostgresStore
from tests.reliability._support import GatewayChild, gateway_child
from tests.services import postgres_schema, redis_url
from tests.subprocess_gateway import gateway_env


@asynccontextmanager
async def cluster_kernels(
    providers: Sequence[Any], *, lease_s: float = 2.0, settings: Settings | None = None, tools: Sequence[Any] = (), observers: Sequence[Any] = ()
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
                    observers=observers,
                )
                kernels.append(await stack.enter_async_context(kernel))
            yield kernels


def scripted(*args: Any, **kwargs: Any) -> ScriptedProvider:
    return ScriptedProvider(*args, **kwargs)


@asynccontextmanager
async def gateway_instances(
    tmp_path: Path,
    backends: Sequence[str],
    *,
    transports: Sequence[str] = ("openfang", "http"),
    redis: str | None = None,
    lease_s: float = 1.5,
    forward_timeout_s: float = 30.0,
    drain_s: float = 30.0,
    delay_s: str = "0.05",
    store_url: str | None = None,
    prefix: str | None = None,
) -> AsyncIterator[list[GatewayChild]]:
    """Real ``gateway serve`` processes (one per backend named) sharing one store schema and
    one Redis key prefix, each serving ``transports`` on ephemeral ports, the echo model
    streaming a word each ``delay_s``."""
    prefix = prefix or f"gwtest-{uuid.uuid4().hex[:10]}"
    with contextlib.ExitStack() as sync:
        url = store_url or sync.enter_context(postgres_schema())
        async with AsyncExitStack() as stack:
            children = []
            for i, backend in enumerate(backends):
                children.append(await stack.enter_async_context(
                    gateway_instance(tmp_path, i, backend, url, prefix, transports=transports, redis=redis, lease_s=lease_s,
                                     forward_timeout_s=forward_timeout_s, drain_s=drain_s, delay_s=delay_s)
                ))
            yield children


@asynccontextmanager
async def gateway_instance(
    tmp_path: Path, index: int, backend: str, store_url: str, prefix: str, *, transports: Sequence[str], redis: str | None,
    lease_s: float, forward_timeout_s: float, drain_s: float, delay_s: str,
) -> AsyncIterator[GatewayChild]:
    """Instance ``index`` of a cluster (the same instance id each time it is started again)."""
    config = tmp_path / f"gateway-{index}.toml"
    config.write_text(
        f'drain_s = {drain_s}\n[cluster]\ninstance_id = "{prefix}-{index}"\nkey_prefix = "{prefix}"\n'
        f"lease_s = {lease_s}\nforward_timeout_s = {forward_timeout_s}\n"
    )
    env = gateway_env(tmp_path / "unused.db", GATEWAY_DB=store_url, GATEWAY_REDIS_URL=redis or redis_url(), GATEWAY_ECHO_DELAY_S=delay_s)
    args = ["serve", "--config", str(config), "--backend", backend, "--quiet"]
    for name in transports:
        args += ["-t", name, "--set", f"{name.replace('-', '_')}.port=0"]
    async with gateway_child(args, env, cwd=tmp_path) as child:
        await child.wait_ready(transports)
        yield child


def stderr_of(child: GatewayChild) -> str:
    return bytes(child.stderr).decode(errors="replace")
