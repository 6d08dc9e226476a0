"""The ``program_loop`` fixture, for programs written for the reference ``core`` package.

Such a program runs with :func:`._support.run_program`; this fixture gives it an empty
working and home directory (TrulyMEM's settings file defaults to
``~/.trulymem/config.json``), chooses the backend thread's event loop, and shuts down
every ``BackendServer`` the program left running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.settings import ENV_OVERRIDES

from . import example_core


@pytest.fixture(params=["asyncio", "trio"])
def program_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    for var in ENV_OVERRIDES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(example_core, "EVENT_LOOP", request.param)
    monkeypatch.setattr(example_core, "servers", [])
    monkeypatch.setattr(example_core, "UPSTREAM", None)
    yield request.param
    for server in example_core.servers:
        server.shutdown()
        assert not server.running
