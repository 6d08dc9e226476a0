"""Every async test runs twice: on asyncio and on trio (the gateway supports both)."""

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param
