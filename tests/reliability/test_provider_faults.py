"""Provider faults from the fake OpenAI server, seen through every dialect.

The gateway runs its real ``openai`` provider against the fake upstream with
``max_retries=0`` and a 2 s timeout (long enough for a loaded machine, far short of the stall). Each fault (429 with Retry-After, 500, a
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
    openai.max_retries, openai.timeout_s = 0, 2.0
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
            done: Callable[[dict[str, Any]], bool] = lambda f: f["type"] in ("response", "error")
        else:
            rid = f"r{self.n}"
            self.client.send_text(json.dumps({"request_id": rid, "input": {"Text": text}, "stream": True}))
            done = lambda f: f["request_id"] == rid and ("Complete" in f["response"] or bool(f["error"]))
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


class HttpNativeDriver:
    """The http transport's native API: one JSON answer, or the run's SSE events."""

    def __init__(self, url: str, stream: bool) -> None:
        self.url, self.stream = url, stream
        self.session_id = "http-sse-faults" if stream else "http-json-faults"

    async def prompt(self, text: str) -> Outcome:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            await client.post("/v1/sessions", json={"session_id": self.session_id})
            path = f"/v1/sessions/{self.session_id}/prompt"
            if not self.stream:
                response = await client.post(path, json={"text": text}, headers={"accept": "application/json"})
                body = response.json()
                if response.status_code != 200:
                    error = body["error"]
                    return Outcome(True, error["code"], f"{response.status_code} {error['message']} {json.dumps(error.get('details'))}")
                return Outcome(False, None, "", body["text"])
            events = []
            async with client.stream("POST", path, json={"text": text}) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
        end = events[-1]
        if end["type"] == "run_failed":
            return Outcome(True, end["error"]["code"], end["error"]["message"] + json.dumps(end["error"].get("details")))
        assert end["type"] == "run_finished", events
        return Outcome(False, None, "", end["text"])


#: OpenAI error type and code per kernel code (docs/http.md).
OPENAI_ERRORS = {"rate_limited": ("429", "rate_limit_error"), "provider_error": ("502", "server_error"), "timeout": ("504", "server_error")}


class HttpOpenAIDriver:
    """The http transport's OpenAI-compatible API (ephemeral sessions: no history to check)."""

    def __init__(self, url: str, stream: bool) -> None:
        self.url, self.stream, self.session_id = url, stream, None

    async def prompt(self, text: str) -> Outcome:
        body: dict[str, Any] = {"model": "General Assistant", "messages": [{"role": "user", "content": text}], "stream": self.stream}
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            if not self.stream:
                response = await client.post("/v1/chat/completions", json=body)
                return self._outcome(response.status_code, response.json())
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    return self._outcome(response.status_code, response.json())
                chunks = [line[6:] async for line in response.aiter_lines() if line.startswith("data: ")]
        assert chunks[-1] == "[DONE]" or "error" in json.loads(chunks[-1]), chunks
        decoded = [json.loads(c) for c in chunks if c != "[DONE]"]
        failure = next((c for c in decoded if "error" in c), None)
        if failure is not None:  # failed after the first token: in the stream
            return self._outcome(200, failure)
        return Outcome(False, None, "", "".join(c["choices"][0]["delta"].get("content") or "" for c in decoded if c["choices"]))

    @staticmethod
    def _outcome(status: int, body: dict[str, Any]) -> Outcome:
        if "error" in body:
            error = body["error"]
            assert set(error) == {"message", "type", "param", "code"}, error  # OpenAI's shape
            return Outcome(True, f"{status} {error['type']}", error["message"])
        return Outcome(False, None, "", body["choices"][0]["message"]["content"])


class AcpDriver:
    """An editor on the ACP transport's pipes: session/prompt answers a stop reason or a JSON-RPC error."""

    def __init__(self, pipes: Any) -> None:
        self.pipes, self.n, self.session_id = pipes, 0, ""

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        start = len(self.pipes.reader.lines)
        self.pipes.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        lines = await self.pipes.reader.until(lambda x: x.get("id") == self.n and ("result" in x or "error" in x), start=start)
        return next(x for x in lines[start:] if x.get("id") == self.n and ("result" in x or "error" in x))

    async def open(self, cwd: str) -> AcpDriver:
        await self.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        self.session_id = (await self.call("session/new", {"cwd": cwd, "mcpServers": []}))["result"]["sessionId"]
        return self

    async def prompt(self, text: str) -> Outcome:
        start = len(self.pipes.reader.lines)
        answer = await self.call("session/prompt", {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]})
        if "error" in answer:
            error = answer["error"]
            assert error["code"] == -32603, error
            return Outcome(True, error["data"]["code"], error["message"])
        chunks = [
            x["params"]["update"]["content"]["text"] for x in self.pipes.reader.lines[start:]
            if x.get("method") == "session/update" and x["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        assert answer["result"]["stopReason"] == "end_turn", answer
        return Outcome(False, None, "", "".join(chunks))


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
    elif dialect.startswith("http-native"):
        yield HttpNativeDriver(live.urls["http"], stream=dialect.endswith("sse"))
    elif dialect.startswith("http-openai"):
        yield HttpOpenAIDriver(live.urls["http"], stream=dialect.endswith("stream"))
    elif dialect == "acp":
        async with stdio_pipes(kernel, "acp") as pipes:
            yield await AcpDriver(pipes).open(kernel.settings.store.path.rsplit("/", 1)[0])
    else:
        raise AssertionError(dialect)


def transports_for(dialect: str, kernel: Kernel) -> tuple[list[str], dict[str, Any]]:
    if dialect in ("openfang", "openfang-rest"):
        return ["openfang"], {}
    if dialect == "agent-cli":
        return ["agent-cli"], {}
    if dialect == "packet":
        return ["packet"], {"packet": {"endpoint": f"faults-{id(kernel)}"}}
    if dialect.startswith("http"):
        return ["http"], {}
    return [], {}


EXPECTED_STATUS = {"rate_limited": "429", "provider_error": "502", "timeout": "504"}


DIALECTS = [
    "stdio", "openfang", "openfang-rest", "agent-cli", "packet",
    "http-native-json", "http-native-sse", "http-openai", "http-openai-stream", "acp",
]


@pytest.mark.parametrize("dialect", DIALECTS)
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
                    if dialect in ("stdio", "http-native-json", "http-native-sse", "acp"):
                        assert failed.code == code, (name, failed)
                    if dialect == "http-native-json":
                        assert failed.message.startswith(EXPECTED_STATUS[code]), (name, failed)
                    if dialect.startswith("http-openai"):
                        status, kind = OPENAI_ERRORS[code]
                        assert failed.code in (f"{status} {kind}", f"200 {kind}"), (name, failed)  # 200: failed mid-stream
                    if dialect == "openfang-rest":
                        assert failed.code == EXPECTED_STATUS[code], (name, failed)
                    if dialect == "agent-cli":
                        kind = "timeout_error: " if code == "timeout" else "processing_error: "
                        assert failed.message.startswith(kind), (name, failed)
                    if name == "429":
                        assert "7" in failed.message, failed  # the Retry-After reaches the client
                    assert not recovered.failed and recovered.text == OK.text, (name, recovered)
                if dialect.startswith("http-openai"):
                    return  # each request is its own ephemeral session: no history to keep
                session_id = driver.session_id if dialect != "agent-cli" else next(iter(kernel.sessions))
                history = await kernel.execute(m.GetHistory(session_id=session_id))
    assert isinstance(history, m.HistoryView)
    pairs = [(msg.role, msg.content) for msg in history.messages]
    expected: list[tuple[str, str]] = []
    for name in FAULTS:
        expected += [("user", f"fault {name}"), ("user", f"after {name}"), ("assistant", OK.text)]
    assert pairs == expected  # the acknowledged prompts are kept; a failed run adds no answer
