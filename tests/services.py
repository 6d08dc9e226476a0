"""What a test needs from outside Python: a browser, Node, PostgreSQL, Redis.

A test that cannot get what it needs is skipped with one clear line, naming what is
missing — unless ``GATEWAY_REQUIRE_SERVICES`` is set (``.ci/run`` sets it), when the
same line fails it instead: in CI a missing service is a broken setup, not a pass.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "GATEWAY_REQUIRE_SERVICES"


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0", "false", "no")


def unavailable(what: str) -> None:
    """Skip (or, with ``GATEWAY_REQUIRE_SERVICES``, fail) the test: ``what`` is missing."""
    if required():
        pytest.fail(f"{what} ({REQUIRE_ENV} is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(what)
