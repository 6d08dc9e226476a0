"""Shared fixtures: every async test runs on asyncio and on trio — and a core of them on
asyncio with uvloop, the loop ``gateway serve --loop auto`` picks when it is installed.

The uvloop runs cover the kernel, the shared plumbing, the provider and one WebSocket and
one HTTP dialect end to end (``UVLOOP_SUITES``); ``GATEWAY_TEST_UVLOOP=all`` runs every
async test on it too, ``=0`` none. A test that asks for ``anyio_backend`` as a name (to
start a ``gateway serve --backend``) uses ``anyio_backend_name``.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

UVLOOP = "asyncio+uvloop"
#: Test paths (relative to the repository) whose async tests also run on uvloop.
UVLOOP_SUITES = (
    "tests/kernel/",
    "tests/transports/shared/",
    "tests/plugins/providers/test_openai.py",
    "tests/plugins/providers/test_upstream_http.py",
    "tests/transports/openfang/test_ws.py",
    "tests/transports/http/test_native.py",
    "tests/transports/http/test_openai.py",
)
_HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None
_BACKENDS: list[Any] = ["asyncio", "trio"]
if _HAVE_UVLOOP and os.environ.get("GATEWAY_TEST_UVLOOP", "") not in ("0", "no", "false"):
    _BACKENDS.insert(1, pytest.param(("asyncio", {"use_uvloop": True}), id=UVLOOP))


@pytest.fixture(params=_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the uvloop variant only in ``UVLOOP_SUITES`` (unless ``GATEWAY_TEST_UVLOOP=all``)."""
    if os.environ.get("GATEWAY_TEST_UVLOOP") == "all":
        return
    root = str(config.rootpath) + os.sep
    keep, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_uvloop = callspec is not None and callspec.id is not None and UVLOOP in callspec.id.split("-")
        where = str(item.path).removeprefix(root)
        (dropped if on_uvloop and not where.startswith(UVLOOP_SUITES) else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
