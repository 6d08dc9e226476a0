"""Real Node clients for the tests (``@ag-ui/client``, Claude Code, Codex CLI, the AI SDK):
npm-installed once, at a pinned version, into a cache folder of their own.

The cache is ``$GATEWAY_TEST_CACHE`` (default ``~/.cache/gateway-tests``), one folder per
client, so a fresh clone installs what it needs and a second run reuses it. Node and npm come
from the machine (installed with apt when missing and possible); without them the test is
skipped with one line, or fails under ``GATEWAY_REQUIRE_SERVICES``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.services import unavailable

CACHE_ROOT = Path(os.environ.get("GATEWAY_TEST_CACHE", Path.home() / ".cache" / "gateway-tests"))
_install_lock = threading.Lock()


def node_tools() -> tuple[str, str]:
    """``node`` and ``npm``, installed with apt when missing and possible."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if (node is None or npm is None) and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "nodejs", "npm"], env=env, capture_output=True, timeout=600, check=False)
        node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node and npm are needed to run the real Node clients (apt-get install nodejs npm)")
    assert node is not None and npm is not None
    return node, npm


def _installed_version(modules: Path, name: str) -> str | None:
    package = modules / name / "package.json"
    if not package.exists():
        return None
    version = json.loads(package.read_text()).get("version")
    return version if isinstance(version, str) else None


def npm_install(folder: str, specs: Sequence[str]) -> tuple[str, Path]:
    """Node and the ``node_modules`` folder of cache folder ``folder`` holding every pinned
    ``name@version`` of ``specs`` (installed once; reinstalled when a pin changes)."""
    node, npm = node_tools()
    prefix = CACHE_ROOT / folder
    modules = prefix / "node_modules"
    with _install_lock:
        missing = [spec for spec in specs if _installed_version(modules, spec.rpartition("@")[0]) != spec.rpartition("@")[2]]
        if missing:
            prefix.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error", *specs],
                capture_output=True, text=True, timeout=900, check=False,
            )
            if done.returncode != 0:
                pytest.fail(f"npm could not install {' '.join(missing)}: {done.stderr.strip()[-2000:]}", pytrace=False)
    return node, modules
