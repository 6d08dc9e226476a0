"""An oversized body gets a 413 the client can read, in the dialect's error shape.

A client that sends its whole body before it reads the answer (urllib, httpx, the openai
SDK) saw a broken pipe (and the SDK retried) when the server answered early and closed.
The server now reads and drops the rest of the upload (bounded in bytes and seconds)
before it sends the 413, on every HTTP route of every dialect.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import httpx
import openai
import pytest

from tests.asyncio_clients import in_asyncio

from ._support import live_gateway

pytestmark = pytest.mark.anyio

BIG = 40 * 1024 * 1024  # 40 MiB: ten times the http transport's 4 MiB limit, forty times OpenFang's


def _body() -> bytes:
    return b'{"model": "default", "messages": [{"role": "user", "content": "' + b"x" * BIG + b'"}]}'


def _urllib(url: str, body: bytes | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def _httpx(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(url, content=body, headers={"content-type": "application/json"})
        return response.status_code, response.json()


async def test_a_40_mib_chat_request_gets_openai_s_413_through_urllib_httpx_and_the_sdk() -> None:
    async with live_gateway(["http"]) as live:
        url = live.urls["http"] + "/v1/chat/completions"
        body = _body()
        status, answer = await _threads(_urllib, url, body)
        assert status == 413 and answer["error"]["code"] == "request_too_large" and "4194304" in answer["error"]["message"]
        status, answer = await in_asyncio(lambda: _httpx(url, body))
        assert status == 413 and answer["error"]["type"] == "invalid_request_error"

        async def sdk() -> Exception:
            client = openai.AsyncOpenAI(base_url=live.urls["http"] + "/v1", api_key="none", max_retries=0)
            try:
                await client.chat.completions.create(model="default", messages=[{"role": "user", "content": "x" * BIG}])
            except openai.APIStatusError as error:
                return error
            finally:
                await client.close()
            raise AssertionError("the SDK got no error")

        error = await in_asyncio(sdk)
        assert isinstance(error, openai.APIStatusError) and error.status_code == 413  # not a connection error
        # The connection and the server are fine: the next request is answered.
        status, answer = await _threads(_urllib, live.urls["http"] + "/v1/models", None)
        assert status == 200 and answer["object"] == "list"


async def test_the_native_api_and_openfang_answer_413_in_their_own_shapes() -> None:
    async with live_gateway(["http", "openfang"]) as live:
        native = live.urls["http"] + "/v1/sessions"
        status, answer = await _threads(_urllib, native, b'{"label": "' + b"x" * BIG + b'"}')
        assert status == 413 and answer["error"]["code"] == "too_large"
        message = f"{live.urls['openfang']}/api/agents/{live.agent_id}/message"
        status, answer = await in_asyncio(lambda: _httpx(message, b'{"message": "' + b"x" * BIG + b'"}'))
        assert status == 413 and isinstance(answer["error"], str)


async def _threads(fn: Any, *args: Any) -> Any:
    import anyio

    return await anyio.to_thread.run_sync(fn, *args)
