"""The same three files through every dialect, one behaviour (the kernel's attachment policy):

* a PDF is refused, in the dialect's own error shape, with the kernel's one message naming the
  file and its type, and never reaches the model;
* a PNG — attached as a *file* wherever the dialect has files — reaches the model as an image;
* a UTF-8 text file reaches the model as text under its name.

Each dialect is served for real (hypercorn on 127.0.0.1, pipes for stdio and ACP) over a kernel
whose scripted model records what it was sent.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from kernel import Kernel
from kernel import model as m
from kernel.testing import ScriptedProvider, running_kernel
from tests.asyncio_clients import in_asyncio
from tests.reliability._support import PipeReader
from tests.transports.acp._pipes import editor
from tests.transports.agent_cli.helpers import client as agent_cli_client
from tests.transports.agent_cli.helpers import serve as agent_cli_serve
from tests.transports.agui._helpers import agui_server, run_input
from tests.transports.http._helpers import http_server
from tests.transports.openfang._helpers import make_config
from transports.openfang import OpenFangTransport
from transports.stdio import StdioConfig, StdioTransport

pytestmark = pytest.mark.anyio

PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
TEXT = "héllo, wörld\n".encode()
FILES = {"pdf": ("report.pdf", "application/pdf", PDF), "png": ("dot.png", "image/png", PNG), "txt": ("notes.txt", "text/plain", TEXT)}
#: (ACP names a file by its URI, file:///w/report.pdf: the name's end is compared.)
REFUSED = "report.pdf' (application/pdf) is not text the model can read"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(ctype: str, data: bytes) -> str:
    return f"data:{ctype};base64,{b64(data)}"


#: A dialect's sender: serves the dialect on ``kernel``, sends "look" and the file, and returns
#: the refusal's text as the client read it (None when the prompt was taken and answered).
Sender = Callable[[Kernel, str, str, bytes], Awaitable[str | None]]


async def native(kernel: Kernel, name: str, ctype: str, data: bytes) -> str | None:
    async with http_server(kernel) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        assert (await http.post("/v1/sessions", json={"session_id": "s"})).status_code == 201
        body = {"text": "look", "parts": [{"type": "file", "name": name, "data": b64(data), "content_type": ctype}]}
        reply = await http.post("/v1/sessions/s/prompt", json=body, headers={"accept": "application/json"})
        if reply.status_code == 400:
            return str(reply.json()["error"]["message"])
        assert reply.status_code == 200, reply.text
        return None


async def openai_chat(kernel: Kernel, name: str, ctype: str, data: bytes) -> str | None:
    async with http_server(kernel) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        content = [{"type": "text", "text": "look"}, {"type": "file", "file": {"filename": name, "file_data": data_url(ctype, data)}}]
        reply = await http.post("/v1/chat/completions", json={"model": "default", "messages": [{"role": "user", "content": content}]})
        if reply.status_code == 400:
            return str(reply.json()["error"]["message"])
        assert reply.status_code == 200, reply.text
        return None


async def agui(kernel: Kernel, name: str, ctype: str, data: bytes) -> str | None:
    async with agui_server(kernel) as url, httpx.AsyncClient(timeout=10) as http:
        content = [{"type": "text", "text": "look"}, {"type": "binary", "mimeType": ctype, "data": b64(data), "filename": name}]
        reply = await http.post(url, json=run_input("t1", "r1", [{"id": "u1", "role": "user", "content": content}]))
        if reply.status_code == 400:
            return str(reply.json()["message"])
        assert reply.status_code == 200, reply.text
        events = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        return None


async def acp(kernel: Kernel, name: str, ctype: str, data: bytes) -> str | None:
    async with editor(kernel) as (pipe, session):
        blocks = [{"type": "text", "text": "look"}, {"type": "resource", "resource": {"uri": f"file:///w/{name}", "blob": b64(data), "mimeType": ctype}}]
        reply, _ = await pipe.call(2, "session/prompt", {"sessionId": session, "prompt": blocks})
        if "error" in reply:
            return str(reply["error"]["message"])
        assert reply["result"]["stopReason"] == "end_turn", reply
        return None


async def agent_cli(kernel: Kernel, name: str, ctype: str, data: bytes) -> str | None:
    async with agent_cli_serve(kernel) as url:

        async def go() -> list[dict[str, Any]]:
            async with agent_cli_client(url) as c:
                file = {"File": {"filename": name, "content_type": ctype, "data": b64(data)}}
                return await c.ask({"request_id": "a", "input": {"Multi": [{"Text": "look"}, file]}})

        frames = await in_asyncio(go)
    error = frames[-1].get("error")
    return str(error) if error else None


async def openfang(kernel: Kernel, name: str, ctype: str, data: bytes) -> str | None:
    scope = anyio.CancelScope()

    async def run(*, task_status: Any) -> None:
        with scope:
            await OpenFangTransport().serve(kernel, make_config(), task_status=task_status)

    refusal: str | None = None
    async with anyio.create_task_group() as tg:
        url = await tg.start(run)
        try:
            base = f"{url}/api/agents/{kernel.settings.agents[0].agent_id()}"
            async with httpx.AsyncClient(timeout=10) as http:
                upload = await http.post(f"{base}/upload", files={"file": (name, data, ctype)})
                if upload.status_code == 400:
                    refusal = str(upload.json()["error"])
                else:
                    reply = await http.post(f"{base}/message", json={"message": "look", "attachments": [{"file_id": upload.json()["file_id"]}]})
                    assert reply.status_code == 200, reply.text
        finally:
            scope.cancel()
    return refusal


async def stdio(kernel: Kernel, name: str, ctype: str, data: bytes) -> str | None:
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    reader = PipeReader(stdout_r)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(StdioTransport(stdin_r, stdout_w).serve, kernel, StdioConfig(session_id="s"))
            part = {"type": "file", "name": name, "data": b64(data), "content_type": ctype}
            os.write(stdin_w, msgspec.json.encode({"type": "prompt", "text": "look", "parts": [part], "request_id": "p"}) + b"\n")
            lines = await reader.until(lambda x: x.get("request_id") == "p" and x["type"] in ("error", "run_finished", "run_failed"), 10)
            tg.cancel_scope.cancel()
    finally:
        for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
            os.close(fd)
    end = lines[-1]
    if end["type"] == "error":
        return str(end["error"]["message"])
    assert end["type"] == "run_finished", end
    return None


SENDERS: dict[str, Sender] = {
    "native": native,
    "openai-chat": openai_chat,
    "ag-ui": agui,
    "acp": acp,
    "agent-cli": agent_cli,
    "openfang": openfang,
    "stdio": stdio,
}


@asynccontextmanager
async def recording_kernel() -> Any:
    provider = ScriptedProvider()
    async with running_kernel(provider) as kernel:
        yield kernel, provider


def sent_parts(message: m.Message) -> list[m.ContentPart]:
    """What the model got of the user's message, as parts (plain content as one text part)."""
    return list(message.parts) or [m.TextPart(message.content)]


@pytest.mark.parametrize("dialect", sorted(SENDERS))
@pytest.mark.parametrize("kind", sorted(FILES))
async def test_one_attachment_policy_in_every_dialect(dialect: str, kind: str) -> None:
    name, ctype, data = FILES[kind]
    async with recording_kernel() as (kernel, provider):
        refusal = await SENDERS[dialect](kernel, name, ctype, data)
        if kind == "pdf":
            assert refusal is not None and REFUSED in refusal, refusal
            assert provider.requests == [], "a refused file never reaches the model"
            return
        assert refusal is None
        parts = sent_parts(provider.requests[-1].messages[-1])
        text = "\n".join(p.text for p in parts if isinstance(p, m.TextPart))
        assert "look" in text
        if kind == "png":
            assert m.ImagePart(data=PNG, mime_type="image/png") in parts, parts
        else:
            assert "File: " in text and "notes.txt (text/plain)\n```\nhéllo, wörld\n" in text, text
