"""Provider faults from the fake OpenAI server, seen through every dialect.

The gateway runs its real ``openai`` provider against the fake upstream with
``max_retries=0`` and a 0.5 s timeout. Each fault (429 with Retry-After, 500, a
connection reset mid-stream, a stall past the timeout, a malformed chunk) must end the
run with the dialect's clear error; the history keeps the prompt that was
acknowledged (and no answer for it); the next prompt is answered.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.app import build_kernel, load_registry
from kernel import Kernel
from kernel import model as m
from kernel.settings import Settings
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_openai_server
from tests.reliability._support import RawWebSocket, frames, serving, stdio_pipes
from transports.packet import connect

pytestmark = pytest.mark.anyio

KEY = "sk-fault-test-0123456789abcdef"
OK = Reply(text="all good again", chunks=3)
#: fault -> (the upstream's reply, the kernel error code the run must fail with)
FAULTS: dict[str, tuple[Reply, str]] = {
    "429": (Reply.rate_limited(retry_after=7), "rate_limited"),
    "500": (Reply.error(500, "the fake upstream broke"), "provider_error"),
    "reset": (Reply.cut(after=2), "provider_error"),
    "stall": (Reply.stall(30, after=1), "timeout"),
    "malformed": (Reply.malformed(after=1), "provider_error"),
}


@dataclass
class Outcome:
    failed: bool
    code: str | None  # the kernel code, where the dialect carries it
    message: str
    text: str = ""


def settings_for(server: FakeOpenAIServer, tmp_path: Path) -> Settings:
    settings = Settings()
    settings.store.path = str(tmp_path / "faults.db")
    openai = settings.provider.openai
    openai.api_key, openai.base_url, openai.model = KEY, server.base_url, "fake-model"
    openai.max_retries, openai.timeout_s = 0, 0.5
    return settings


def arm(server: FakeOpenAIServer, fault: Reply) -> None:
    """The next upstream request gets ``fault``, the ones after it a normal answer."""
    server.script = [OK] * len(server.requests) + [fault, OK]


# ------------------------------------------------------------------ one driver per dialect


class StdioDriver:
    def __init__(self, pipes: Any) -> None:
        self.pipes, self.n, self.session_id = pipes, 0, "faults"

    async def prompt(self, text: str) -> Outcome:
        self.n += 1
        rid = f"p{self.n}"
        start = len(self.pipes.reader.lines)
        self.pipes.send({"type": "prompt", "text": text, "request_id": rid})
        lines = await self.pipes.reader.until(lambda x: x.get("request_id") == rid and x["type"] in ("run_finished", "run_failed"), start=start)
        end = next(x for x in lines[start:] if x.get("request_id") == rid and x["type"] in ("run_finished", "run_failed"))
        if end["type"] == "run_failed":
            return Outcome(True, end["error"]["code"], end["error"]["message"] + json.dumps(end["error"].get("details")))
        return Outcome(False, None, "", end["text"])


class WsDriver:
    """OpenFang and Agent-CLI sockets (a blocking client in a worker thread)."""

    def __init__(self, dialect: str, client: RawWebSocket) -> None:
        self.dialect, self.client, self.n = dialect, client, 0
        self.session_id = "of-faults"

    @classmethod
    async def open(cls, dialect: str, url: str) -> WsDriver:
        client = await anyio.to_thread.run_sync(lambda: RawWebSocket(url))
        if dialect == "openfang":
            await anyio.to_thread.run_sync(lambda: client.read_until(lambda t: len(t) >= 2))
        return cls(dialect, client)

    async def prompt(self, text: str) -> Outcome:
        self.n += 1
        start = len(self.client.texts)
        if self.dialect == "openfang":
            self.client.send_text(json.dumps({"type": "message", "content": text, "session_id": self.session_id}))
            done: Callable[[dict[str, Any]], bool] = lambda f: f["type"] in ("response", "error")  # noqa: E731
        else:
            rid = f"r{self.n}"
            self.client.send_text(json.dumps({"request_id": rid, "input": {"Text": text}, "stream": True}))
            done = lambda f: f["request_id"] == rid and ("Complete" in f["response"] or bool(f["error"]))  # noqa: E731
        await anyio.to_thread.run_sync(lambda: self.client.read_until(lambda t: any(done(f) for f in frames(t[start:]))))
        got = frames(self.client.texts[start:])
        end = next(f for f in got if done(f))
        if self.dialect == "openfang":
            if end["type"] == "error":
                # OpenFang's order: the typing indicator stops, then the error.
                assert [f["type"] for f in got[-2:]] == ["typing", "error"] and got[-2]["state"] == "stop", got
                return Outcome(True, None, end["content"])
            return Outcome(False, None, "", end["content"])
        if end["error"]:
            return Outcome(True, None, end["error"])
        return Outcome(False, None, "", "".join(f["response"].get("Stream", "") for f in got))


class PacketDriver:
    def __init__(self, endpoint: str) -> None:
        self.server = connect(endpoint, wait_s=5)
        self.session_id = "packet"

    async def prompt(self, text: str) -> Outcome:
        answer = await anyio.to_thread.run_sync(lambda: self.server.process_message(text, timeout=10))
        if not answer["success"]:
            return Outcome(True, None, answer["error"])
        return Outcome(False, None, "", answer["data"]["content"])


class OpenFangRestDriver:
    def __init__(self, url: str, agent_id: str) -> None:
        self.url, self.agent_id, self.session_id = url, agent_id, "of-rest-faults"

    async def prompt(self, text: str) -> Outcome:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            response = await client.post(f"/api/agents/{self.agent_id}/message", json={"message": text, "session_id": self.session_id})
        body = response.json()
        if response.status_code != 200:
            return Outcome(True, str(response.status_code), body["error"])
        return Outcome(False, None, "", body["response"])


@asynccontextmanager
async def driver_for(dialect: str, kernel: Kernel, live: Any) -> AsyncIterator[Any]:
    if dialect == "stdio":
        async with stdio_pipes(kernel, session_id="faults") as pipes:
            await pipes.reader.until(lambda x: x["type"] == "session")
            yield StdioDriver(pipes)
    elif dialect in ("openfang", "agent-cli"):
        driver = await WsDriver.open(dialect, live.ws(dialect))
        try:
            yield driver
        finally:
            driver.client.close()
    elif dialect == "openfang-rest":
        yield OpenFangRestDriver(live.urls["openfang"], live.agent_id)
    elif dialect == "packet":
        yield PacketDriver(f"faults-{id(kernel)}")
    else:
        raise AssertionError(dialect)


def transports_for(dialect: str, kernel: Kernel) -> tuple[list[str], dict[str, Any]]:
    if dialect in ("openfang", "openfang-rest"):
        return ["openfang"], {}
    if dialect == "agent-cli":
        return ["agent-cli"], {}
    if dialect == "packet":
        return ["packet"], {"packet": {"endpoint": f"faults-{id(kernel)}"}}
    return [], {}


EXPECTED_STATUS = {"rate_limited": "429", "provider_error": "502", "timeout": "504"}


@pytest.mark.parametrize("dialect", ["stdio", "openfang", "openfang-rest", "agent-cli", "packet"])
async def test_every_fault_ends_the_run_clearly_and_the_next_prompt_works(dialect: str, tmp_path: Path) -> None:
    async with fake_openai_server([OK]) as server:
        kernel = build_kernel(settings_for(server, tmp_path), load_registry(use_entry_points=False))
        async with kernel:
            names, configs = transports_for(dialect, kernel)
            async with serving(kernel, names, **configs) as live, driver_for(dialect, kernel, live) as driver:
                for name, (fault, code) in FAULTS.items():
                    arm(server, fault)
                    with anyio.fail_after(15):
                        failed = await driver.prompt(f"fault {name}")
                        recovered = await driver.prompt(f"after {name}")
                    assert failed.failed and failed.message, (name, failed)
                    if dialect == "stdio":
                        assert failed.code == code, (name, failed)
                    if dialect == "openfang-rest":
                        assert failed.code == EXPECTED_STATUS[code], (name, failed)
                    if dialect == "agent-cli":
                        kind = "timeout_error: " if code == "timeout" else "processing_error: "
                        assert failed.message.startswith(kind), (name, failed)
                    if name == "429":
                        assert "7" in failed.message, failed  # the Retry-After reaches the client
                    assert not recovered.failed and recovered.text == OK.text, (name, recovered)
                session_id = driver.session_id if dialect != "agent-cli" else next(iter(kernel.sessions))
                history = await kernel.execute(m.GetHistory(session_id=session_id))
    assert isinstance(history, m.HistoryView)
    pairs = [(msg.role, msg.content) for msg in history.messages]
    expected: list[tuple[str, str]] = []
    for name in FAULTS:
        expected += [("user", f"fault {name}"), ("user", f"after {name}"), ("assistant", OK.text)]
    assert pairs == expected  # the acknowledged prompts are kept; a failed run adds no answer
