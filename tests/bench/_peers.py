"""Peer proxies, run side by side with the gateway in the same benchmark run.

``--peer litellm``: the LiteLLM proxy (``litellm[proxy]``, pinned), installed by the
benchmark itself into its own virtual environment under the bench cache
(``$GATEWAY_BENCH_CACHE``, default ``~/.cache/gateway-bench``) the first time it is
asked for, then reused. It runs as its own process on 127.0.0.1 in front of the same
fake upstreams as the gateway, with no database, no master key and no callbacks: the
plainest proxy LiteLLM can be. Its process tree's CPU and RSS come from /proc, as the
gateway's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from . import _harness as h

PEERS = ("litellm",)
LITELLM_VERSION = "1.108.7"
#: LiteLLM's own switches that keep it offline and quiet (no cost-map download, no telemetry).
LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOG": "ERROR",
    "DISABLE_ADMIN_UI": "True",
    "NO_DOCS": "True",
}


def cache_dir() -> Path:
    return Path(os.environ.get("GATEWAY_BENCH_CACHE", Path.home() / ".cache" / "gateway-bench"))


@dataclass
class Peer:
    """A running peer proxy: where its OpenAI-compatible API is, its key, and its process."""

    name: str
    version: str
    base_url: str
    api_key: str
    pid: int

    def cpu_s(self) -> float:
        return sum(h.cpu_s(pid) for pid in process_tree(self.pid))

    def rss_kib(self) -> int:
        return sum(h.rss_kib(pid) for pid in process_tree(self.pid))


def process_tree(root: int) -> list[int]:
    """``root`` and its live descendants (a proxy CLI may run its server in a child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


async def run_command(*args: str, timeout_s: float) -> None:
    process = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError(f"{' '.join(args)} did not finish within {timeout_s:g} s") from None
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{output.decode(errors='replace')[-3000:]}")


async def ensure_litellm() -> Path:
    """The ``litellm`` command of the cached venv, installing it first when missing."""
    venv = cache_dir() / f"litellm-{LITELLM_VERSION}"
    command = venv / "bin" / "litellm"
    marker = venv / ".installed"
    if marker.exists() and command.exists():
        return command
    print(f"   installing litellm[proxy]=={LITELLM_VERSION} into {venv} (once; a few minutes)", file=sys.stderr, flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    await run_command(sys.executable, "-m", "venv", "--clear", str(venv), timeout_s=120)
    pip = str(venv / "bin" / "pip")
    await run_command(pip, "install", "--quiet", f"litellm[proxy]=={LITELLM_VERSION}", timeout_s=1200)
    marker.write_text(f"litellm[proxy]=={LITELLM_VERSION}\n")
    return command


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(host: str, port: int, path: str, process: asyncio.subprocess.Process, log: Path, timeout_s: float) -> None:
    """Poll ``GET path`` until it answers 200 (the proxy loaded its config)."""
    deadline = time.monotonic() + timeout_s
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
    while time.monotonic() < deadline:
        if process.returncode is not None:
            break
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            status = await asyncio.wait_for(reader.readline(), 5)
            writer.close()
            if b" 200 " in status:
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the peer proxy on port {port} did not become ready:\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.asynccontextmanager
async def litellm_proxy(upstreams: Mapping[str, str], api_key: str, settings: Mapping[str, object] | None = None) -> AsyncIterator[Peer]:
    """A LiteLLM proxy serving each ``model name -> upstream base URL`` as an OpenAI model.

    LiteLLM refuses to start without a master key; it gets a random one (clients send it
    as their API key), with no database behind it. ``settings``: more ``litellm_settings``.
    """
    command = await ensure_litellm()
    master_key = f"sk-{secrets.token_hex(24)}"
    config = h.scratch_dir() / "litellm.json"  # YAML is a superset of JSON
    config.write_text(json.dumps({
        "model_list": [
            {"model_name": name, "litellm_params": {"model": "openai/fake-model", "api_base": url, "api_key": api_key}}
            for name, url in upstreams.items()
        ],
        "litellm_settings": {"telemetry": False, "drop_params": True, **(settings or {})},
        "general_settings": {"master_key": master_key},
    }))
    port = free_port()
    log = h.scratch_dir() / f"litellm-{port}.log"
    env = h.child_env(**LITELLM_ENV)
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(command), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1",
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env, cwd=str(h.scratch_dir()),
        )
    try:
        await wait_ready("127.0.0.1", port, "/health/liveliness", process, log, timeout_s=120)
        yield Peer("litellm", LITELLM_VERSION, f"http://127.0.0.1:{port}/v1", master_key, process.pid)
    finally:
        for pid in reversed(process_tree(process.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 15)
        await h.stop_process(process, timeout_s=5)
