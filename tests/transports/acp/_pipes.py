"""The editor's end of two OS pipes to an in-process ACP server, for tests on either backend."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from kernel import Kernel
from transports.acp import AcpConfig, AcpTransport
from transports.shared import LineReader, LineWriter

Answerer = Callable[[dict[str, Any]], Any]


class PipeEditor:
    """The editor's end of the pipes: sends lines, reads lines, answers the gateway's requests."""

    def __init__(self, to_gateway: int, from_gateway: int) -> None:
        self.writer = LineWriter(to_gateway)
        self.to_gateway = to_gateway
        self.lines = LineReader(from_gateway).__aiter__()
        self.requests: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.writer.write_line(json.dumps(message).encode())

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(10):
            return json.loads(await self.lines.__anext__())

    async def call(self, rid: Any, method: str, params: Any, answer: Answerer | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return await self.until(rid, answer)

    async def until(self, rid: Any, answer: Answerer | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Read up to the response to ``rid``, answering the gateway's requests with ``answer``."""
        before: list[dict[str, Any]] = []
        while True:
            message = await self.receive()
            if "method" in message and "id" in message:
                self.requests.append(message)
                reply = answer(message) if answer else None
                if reply is not None:
                    await self.send({"jsonrpc": "2.0", "id": message["id"], **reply})
            elif "method" not in message and message.get("id") == rid:
                return message, before
            else:
                before.append(message)

    def close(self) -> None:
        self.writer.close()
        os.close(self.to_gateway)


@contextlib.asynccontextmanager
async def editor(
    kernel: Kernel, config: AcpConfig | None = None, *, fs: bool = False, terminal: bool = False, new_session: bool = True
) -> AsyncIterator[tuple[PipeEditor, str]]:
    """Serve ACP over two pipes; yields the editor end and an open session ("" with
    ``new_session=False``). Closing = EOF."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()

    async def serve(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await AcpTransport(stdin_fd=in_r, stdout_fd=out_w).serve(kernel, config or AcpConfig(), task_status=task_status)
        finally:
            os.close(out_w)  # like a process exiting: the editor sees EOF on the gateway's stdout

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(serve)
            pipe = PipeEditor(in_w, out_r)
            caps = {"fs": {"readTextFile": fs, "writeTextFile": fs}, "terminal": terminal}
            await pipe.call(0, "initialize", {"protocolVersion": 1, "clientCapabilities": caps})
            session = ""
            if new_session:
                reply, _ = await pipe.call(1, "session/new", {"cwd": "/project", "mcpServers": []})
                session = reply["result"]["sessionId"]
            try:
                yield pipe, session
            finally:
                pipe.close()
                with anyio.fail_after(15):
                    while True:  # drain until the gateway closes its end (serve returned)
                        try:
                            await pipe.lines.__anext__()
                        except StopAsyncIteration:
                            break
    finally:
        for fd in (in_r, out_r):
            with contextlib.suppress(OSError):
                os.close(fd)


def prompt(session: str, text: str) -> dict[str, Any]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


def updates(messages: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    found = [m["params"]["update"] for m in messages if m.get("method") == "session/update"]
    return [u for u in found if kind is None or u["sessionUpdate"] == kind]
