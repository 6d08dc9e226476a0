"""One HTTP meaning per kernel error code (kernel/errors.py), whatever the dialect.

Every code x every HTTP dialect's error shaper: the status is the table's and so are the
headers (``Retry-After`` exactly where the table gives one); a dialect shapes only the body.
A new dialect adds its shaper to ``SHAPERS`` — one line. A status a dialect's own clients read
differently (Anthropic's 529 for 503, OpenAI's 400 for a context too long) is declared in ``conventions``, so every deviation from
the table is written here, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, get_args

import anyio
import httpx
import pytest

from kernel import ERROR_SPECS, error_spec, http_headers, http_status
from kernel import model as m
from kernel.settings import OpenAISettings
from kernel.testing import running_kernel
from plugins.providers.openai import OpenAIProvider
from tests.fakes.openai_server import fake_openai_server
from tests.transports.http._helpers import http_server
from tests.transports.openfang._helpers import make_config
from transports.a2a import codec as a2a
from transports.agui import codec as agui
from transports.http.anthropic import codec as anthropic
from transports.http.native import codec as native
from transports.http.openai import codec as openai_chat
from transports.openfang import OpenFangTransport
from transports.openfang import rest as openfang_rest
from transports.openfang import rest_codec as openfang


@dataclass(frozen=True)
class Shaper:
    """An HTTP dialect's error shaper, seen as (status, headers) for a kernel error."""

    shape: Callable[[m.ErrorInfo], tuple[int, Mapping[str, str]]]
    #: Statuses the dialect's clients know by another number (table status -> dialect status).
    conventions: Mapping[int, int] = field(default_factory=dict)


SHAPERS: dict[str, Shaper] = {
    "native (command)": Shaper(lambda e: _of(native.kernel_error(m.KernelError(e.code, e.message, e.details)))),
    "native (run)": Shaper(lambda e: _of(native.run_failure(e))),
    # OpenAI chat's shaper is also the Responses API's (transports/http/responses/routes.py).
    "openai chat and responses": Shaper(lambda e: _of(openai_chat.from_error_info(e)), conventions={413: 400}),
    "ag-ui": Shaper(lambda e: _of(agui.from_kernel(e))),
    "openfang rest (run)": Shaper(lambda e: openfang.error_reply(e)[::2]),
    "openfang rest (command)": Shaper(lambda e: _of(openfang_rest.refused(m.KernelError(e.code, e.message, e.details)))),
    "anthropic": Shaper(lambda e: _of(anthropic.from_error_info(e)), conventions={503: 529}),
    "a2a (http+json)": Shaper(lambda e: (a2a.from_kernel(e).http_status, a2a.from_kernel(e).headers)),
}


class _Shaped(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


def _of(error: _Shaped) -> tuple[int, Mapping[str, str]]:
    return error.status, error.headers


CODES = sorted(get_args(m.ErrorCode))
#: A rate limit and an upstream outage that say when to come back, beside the bare errors.
DETAILS: list[dict[str, object] | None] = [None, {"retry_after_s": 2.4}]


def test_the_table_covers_every_code() -> None:
    assert set(CODES) == set(ERROR_SPECS)
    assert error_spec("from_a_newer_peer") == ERROR_SPECS["internal"]


@pytest.mark.parametrize("dialect", sorted(SHAPERS))
@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("details", DETAILS, ids=["bare", "retry-after-detail"])
def test_every_code_has_the_tables_status_and_headers_in_every_dialect(dialect: str, code: str, details: dict[str, object] | None) -> None:
    shaper = SHAPERS[dialect]
    error = m.ErrorInfo(code=code, message=f"why {code}", details=details)  # type: ignore[arg-type]
    status, headers = shaper.shape(error)
    expected = http_status(code)
    assert status == shaper.conventions.get(expected, expected), f"{dialect}: {code}"
    lower = {name.lower(): value for name, value in headers.items()}
    assert {k: v for k, v in lower.items() if k == "retry-after"} == http_headers(error), f"{dialect}: {code}"


def test_the_upstream_refusing_the_gateways_key_is_not_the_clients_401() -> None:
    """The same code everywhere: upstream_unauthorized is a 502 (the operator's to fix), the
    client's own refused credentials a 401 — OpenFang's POST /message answered 401 before."""
    assert http_status("upstream_unauthorized") == 502 and not error_spec("upstream_unauthorized").retryable
    for dialect, shaper in SHAPERS.items():
        assert shaper.shape(m.ErrorInfo(code="upstream_unauthorized", message="key refused"))[0] == 502, dialect
        assert shaper.shape(m.ErrorInfo(code="unauthorized", message="bad token"))[0] == 401, dialect


def test_retry_after_comes_from_the_details_else_the_codes_default() -> None:
    limited = m.ErrorInfo(code="rate_limited", message="slow", details={"retry_after_s": 2.4})
    assert http_headers(limited) == {"retry-after": "2"}
    assert http_headers(m.ErrorInfo(code="rate_limited", message="slow")) == {"retry-after": "1"}
    assert http_headers(m.ErrorInfo(code="provider_error", message="down")) == {}
    assert http_headers(m.ErrorInfo(code="provider_error", message="down", details={"retry_after_s": 7})) == {"retry-after": "7"}
    # A code a retry cannot help never says when to retry, whatever the details say.
    assert http_headers(m.ErrorInfo(code="invalid_request", message="no", details={"retry_after_s": 3})) == {}


@pytest.mark.anyio
async def test_an_upstream_refusing_the_gateways_key_is_a_502_over_every_http_dialect() -> None:
    """End to end: the fake upstream wants another key than the gateway's. OpenFang's POST
    /message answered 401 for it (as if the client's key were wrong); now it, the native API and
    OpenAI chat all say 502, with the code upstream_unauthorized."""
    async with fake_openai_server(api_key="sk-the-upstreams") as upstream:
        provider = OpenAIProvider(OpenAISettings(api_key="sk-the-gateways", base_url=upstream.base_url, model="fake-model", max_retries=0))
        async with running_kernel(provider) as kernel, http_server(kernel) as url, anyio.create_task_group() as tg:
            fang = await tg.start(OpenFangTransport().serve, kernel, make_config())
            agent = kernel.settings.agents[0].agent_id()
            async with httpx.AsyncClient(timeout=10) as http:
                assert (await http.post(f"{url}/v1/sessions", json={"session_id": "k"})).status_code == 201
                replies = {
                    "openfang": await http.post(f"{fang}/api/agents/{agent}/message", json={"message": "hi"}),
                    "native": await http.post(f"{url}/v1/sessions/k/prompt", json={"text": "hi"}, headers={"accept": "application/json"}),
                    "openai": await http.post(f"{url}/v1/chat/completions", json={"model": "default", "messages": [{"role": "user", "content": "hi"}]}),
                }
            tg.cancel_scope.cancel()
        await provider.aclose()
    assert {name: reply.status_code for name, reply in replies.items()} == {"openfang": 502, "native": 502, "openai": 502}
    assert replies["native"].json()["error"]["code"] == "upstream_unauthorized"
    assert replies["openai"].json()["error"]["code"] == "upstream_unauthorized"
