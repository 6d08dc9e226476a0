"""The ``openai`` provider's upstream hop (``plugins/providers/upstream_http.py``): the SDK's
retry policy, one pooled connection, proxies from the environment and TLS, each against real
loopback servers — the fake upstream, and in this file a forward/CONNECT proxy and a TLS
front end of the fake, both written for the test.

The proxy maps every host to a loopback port, so a base URL naming ``upstream.test`` (which
resolves nowhere) is reached only if the request really went through the proxy.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import anyio
import anyio.abc
import openai
import pytest
import trustme
from anyio.streams.tls import TLSListener

from kernel.model import Message
from kernel.provider import ProviderRequest, TextChunk
from kernel.settings import OpenAISettings
from plugins.providers.openai import OpenAIProvider
from tests.fakes.openai_server import Reply, fake_openai_server

from .test_openai import HELLO, KEY, collect, fails, provider_for

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning"),
]

_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
#: One request head may be this large (the test's own requests are a few hundred bytes).
_MAX_HEAD = 64 * 1024


def _text(chunks: list[object]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextChunk))


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variables but the ones a test sets."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


# ---------------------------------------------------------------- loopback helpers


async def _pipe(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, done: anyio.CancelScope) -> None:
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        while True:
            await sink.send(await source.receive())
    done.cancel()  # one side is gone: so is the other (no half-close through TLS)


async def _join(a: anyio.abc.ByteStream, b: anyio.abc.ByteStream) -> None:
    """Copy both ways until one side ends, then close both."""
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pipe, a, b, tg.cancel_scope)
            tg.start_soon(_pipe, b, a, tg.cancel_scope)
    finally:
        with anyio.CancelScope(shield=True):
            await a.aclose()
            await b.aclose()


class Proxy:
    """A forward proxy: ``GET http://host/path`` is sent on in origin form to ``plain_port``,
    ``CONNECT host:port`` is tunnelled to ``tls_port``; ``seen`` is every request line's
    method and target. One request per forwarded connection (all the tests send)."""

    def __init__(self, plain_port: int, tls_port: int = 0) -> None:
        self.plain_port = plain_port
        self.tls_port = tls_port
        self.seen: list[tuple[str, str]] = []
        self.port = 0

    async def handle(self, client: anyio.abc.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            try:
                head += await client.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                await client.aclose()
                return
            if len(head) > _MAX_HEAD:
                await client.aclose()
                return
        head, _, rest = head.partition(b"\r\n\r\n")
        line, _, fields = head.partition(b"\r\n")
        method, target, version = line.decode("latin-1").split(" ", 2)
        self.seen.append((method, target))
        if method == "CONNECT":
            upstream = await anyio.connect_tcp("127.0.0.1", self.tls_port)
            await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            path = "/" + target.split("://", 1)[1].partition("/")[2]
            upstream = await anyio.connect_tcp("127.0.0.1", self.plain_port)
            await upstream.send(f"{method} {path} {version}\r\n".encode("latin-1") + fields + b"\r\n\r\n" + rest)
        await _join(client, upstream)


class TLSFront:
    """TLS on a loopback port in front of the fake upstream's plain one (a self-signed chain)."""

    def __init__(self, plain_port: int, context: ssl.SSLContext) -> None:
        self.plain_port = plain_port
        self.context = context
        self.accepted = 0
        self.port = 0

    async def handle(self, client: anyio.abc.ByteStream) -> None:
        self.accepted += 1
        upstream = await anyio.connect_tcp("127.0.0.1", self.plain_port)
        await _join(client, upstream)


@contextlib.asynccontextmanager
async def serving(handler: Proxy | TLSFront) -> AsyncIterator[None]:
    """Serve ``handler`` on an ephemeral 127.0.0.1 port (``handler.port``) for the block."""
    listener: anyio.abc.Listener[anyio.abc.ByteStream] | anyio.abc.SocketListener
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    handler.port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    if isinstance(handler, TLSFront):
        listener = TLSListener(tcp, handler.context, standard_compatible=False)
    else:
        listener = tcp
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handler.handle)  # type: ignore[arg-type]
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
    finally:
        await listener.aclose()


@pytest.fixture
def certificates(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A throw-away CA's server context for 127.0.0.1 / upstream.test, and the CA's PEM file."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "upstream.test").configure_cert(context)
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    return context, pem


# ---------------------------------------------------------------- retries


@pytest.mark.anyio
async def test_error_answers_are_retried_then_the_stream_flows() -> None:
    # A 500 (backoff), a 429 with Retry-After, then the answer: the SDK's policy, before the answer starts.
    script = [Reply.error(500, "hiccup"), Reply.rate_limited(retry_after=0.05), Reply(text="made it", chunks=2)]
    async with fake_openai_server(script) as server:
        async with provider_for(server, max_retries=2) as provider:
            chunks = await collect(provider)
    assert _text(chunks) == "made it"
    assert len(server.requests) == 3
    assert [h["x-stainless-retry-count"] for h in server.headers] == ["0", "1", "2"]
    assert server.requests[0] == server.requests[2]  # the same body each time


@pytest.mark.anyio
async def test_retries_run_out_into_the_typed_error() -> None:
    async with fake_openai_server([Reply.error(503, "overloaded")]) as server:
        async with provider_for(server, max_retries=1) as provider:
            error = await fails(provider)
    assert error.code == "provider_error" and error.status == 503 and "overloaded" in error.message
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_a_refusal_is_not_retried() -> None:
    async with fake_openai_server([Reply.error(400, "no such parameter"), Reply()]) as server:
        async with provider_for(server, max_retries=2) as provider:
            error = await fails(provider)
    assert error.code == "invalid_request" and "no such parameter" in error.message
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_a_timeout_before_the_answer_is_retried() -> None:
    async with fake_openai_server([Reply.stall(30), Reply(text="second try", chunks=1)]) as server:
        async with provider_for(server, timeout_s=0.5, max_retries=1) as provider:
            chunks = await collect(provider)
    assert _text(chunks) == "second try"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_cancel_before_the_answer_starts_closes_the_connection() -> None:
    # Cancelled while the upstream has not even sent its headers: the request's connection is
    # closed at once (the upstream sees the client go), and the provider works on afterwards.
    async with fake_openai_server([Reply.stall(30), Reply(text="after", chunks=1)]) as server:
        async with provider_for(server, max_retries=2) as provider:
            with anyio.CancelScope() as scope:
                async with aclosing(provider.stream(HELLO)) as chunks:  # type: ignore[type-var]
                    async with anyio.create_task_group() as tg:
                        async def cancel_once_sent() -> None:
                            with anyio.fail_after(5):
                                while not server.requests:
                                    await anyio.sleep(0.005)
                            scope.cancel()

                        tg.start_soon(cancel_once_sent)
                        async for _ in chunks:
                            pass
            assert scope.cancelled_caught
            gone = await server.wait_for_disconnect(timeout=2.0, request_index=0)
            assert gone.events_sent == 0
            assert _text(await collect(provider)) == "after"
    assert len(server.requests) == 2  # no retry of the cancelled request


# ---------------------------------------------------------------- the pool, the headers


@pytest.mark.anyio
async def test_sequential_requests_use_one_connection() -> None:
    whole = ProviderRequest(model="fake-model", messages=(Message(role="user", content="hi"),), stream=False)
    script = [Reply(text="one two", chunks=2, usage=(1, 2))] * 5 + [Reply.error(404, "gone"), Reply(text="whole")]
    async with fake_openai_server(script) as server:
        async with provider_for(server) as provider:
            for _ in range(5):
                assert _text(await collect(provider)) == "one two"
            assert (await fails(provider)).code == "not_found"  # an error answer read whole: still reusable
            assert _text(await collect(provider, whole)) == "whole"
    assert len(server.requests) == 7
    assert len(set(server.client_ports)) == 1, server.client_ports


@pytest.mark.anyio
async def test_the_sdk_client_configuration_goes_upstream() -> None:
    async with fake_openai_server([Reply(text="ok", chunks=1)]) as server:
        client = openai.AsyncOpenAI(
            api_key=KEY, base_url=server.base_url, organization="org-7", project="proj-9",
            default_headers={"x-team": "blue"}, timeout=5.0, max_retries=0,
        )
        provider = OpenAIProvider(OpenAISettings(base_url=server.base_url), client=client)
        traced = ProviderRequest(model="fake-model", messages=HELLO.messages, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
        try:
            assert _text(await collect(provider, traced)) == "ok"
        finally:
            await provider.aclose()
    sent = server.headers[0]
    assert sent["authorization"] == f"Bearer {KEY}"
    assert sent["openai-organization"] == "org-7" and sent["openai-project"] == "proj-9" and sent["x-team"] == "blue"
    assert sent["traceparent"] == traced.traceparent
    assert sent["user-agent"].startswith("AsyncOpenAI/Python ")
    assert sent["x-stainless-read-timeout"] == "5.0" and sent["content-type"] == "application/json"
    assert int(sent["content-length"]) > 0 and server.requests[0]["messages"][0]["content"] == "hi there"


@pytest.mark.anyio
async def test_a_callable_key_is_asked_for_each_request() -> None:
    keys = iter(["sk-first-000000000000", "sk-second-00000000000"])

    async def key() -> str:
        return next(keys)

    async with fake_openai_server([Reply(text="ok", chunks=1)]) as server:
        client = openai.AsyncOpenAI(api_key=key, base_url=server.base_url, max_retries=0)
        provider = OpenAIProvider(OpenAISettings(base_url=server.base_url), client=client)
        try:
            for _ in range(2):
                assert _text(await collect(provider)) == "ok"
        finally:
            await provider.aclose()
    assert [h["authorization"] for h in server.headers] == ["Bearer sk-first-000000000000", "Bearer sk-second-00000000000"]


# ---------------------------------------------------------------- proxies from the environment


@pytest.mark.anyio
async def test_http_proxy_from_the_environment(no_proxy_env: pytest.MonkeyPatch) -> None:
    async with fake_openai_server([Reply(text="via the proxy", chunks=2)]) as server:
        proxy = Proxy(server.port)
        async with serving(proxy):
            no_proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
            async with provider_for(server, base_url="http://upstream.test/v1") as provider:
                chunks = await collect(provider)
    assert _text(chunks) == "via the proxy"
    assert proxy.seen == [("POST", "http://upstream.test/v1/chat/completions")]


@pytest.mark.anyio
async def test_no_proxy_and_loopback_go_direct(no_proxy_env: pytest.MonkeyPatch) -> None:
    async with fake_openai_server([Reply(text="direct", chunks=1)]) as server:
        proxy = Proxy(server.port)
        async with serving(proxy):
            no_proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
            no_proxy_env.setenv("ALL_PROXY", f"http://127.0.0.1:{proxy.port}")
            async with provider_for(server) as provider:  # http://127.0.0.1:port/v1
                assert _text(await collect(provider)) == "direct"
            no_proxy_env.setenv("NO_PROXY", "upstream.test")
            async with provider_for(server, base_url=f"http://localhost:{server.port}/v1") as provider:
                assert _text(await collect(provider)) == "direct"
    assert proxy.seen == []
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_https_through_a_connect_proxy(no_proxy_env: pytest.MonkeyPatch, certificates: tuple[ssl.SSLContext, Path]) -> None:
    context, ca_file = certificates
    no_proxy_env.setenv("SSL_CERT_FILE", str(ca_file))
    async with fake_openai_server([Reply(text="tunnelled and encrypted", chunks=3)]) as server:
        front = TLSFront(server.port, context)
        async with serving(front):
            proxy = Proxy(server.port, front.port)
            async with serving(proxy):
                no_proxy_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
                async with provider_for(server, base_url="https://upstream.test/v1") as provider:
                    chunks = await collect(provider)
    assert _text(chunks) == "tunnelled and encrypted"
    assert proxy.seen == [("CONNECT", "upstream.test:443")]
    assert front.accepted == 1


# ---------------------------------------------------------------- TLS


@pytest.mark.anyio
async def test_https_with_a_ca_from_ssl_cert_file(no_proxy_env: pytest.MonkeyPatch, certificates: tuple[ssl.SSLContext, Path]) -> None:
    context, ca_file = certificates
    async with fake_openai_server([Reply(text="over TLS", chunks=2)] * 2) as server:
        front = TLSFront(server.port, context)
        async with serving(front):
            url = f"https://127.0.0.1:{front.port}/v1"
            # Unknown CA: refused, with the reason, not retried into a hang.
            async with provider_for(server, base_url=url) as provider:
                refused = await fails(provider)
            no_proxy_env.setenv("SSL_CERT_FILE", str(ca_file))
            async with provider_for(server, base_url=url) as provider:
                first = await collect(provider)
                second = await collect(provider)
    assert refused.code == "provider_error" and "CERTIFICATE_VERIFY_FAILED" in refused.message
    assert _text(first) == _text(second) == "over TLS"
    assert front.accepted == 1  # the refused handshake never completed; one kept-alive connection for both
    assert len(server.requests) == 2
