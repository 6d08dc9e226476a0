"""BackendServer/BackendClient from synchronous code, with the backend on asyncio and trio."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal

from gateway.embedded import DEFAULT_BASE_URL, DEFAULT_MODEL
from kernel import model as m
from kernel.settings import DEFAULT_TOOL_LIMITS, ENV_OVERRIDES
from kernel.testing import ScriptedProvider, text_turn, tool_turn
from tests.fakes.openai_server import Reply, fake_openai_server
from transports.packet import BackendClient, BackendServer, Packet, PacketType
from transports.packet.settingsfile import APP_DEFAULTS

from ._support import SlowEcho, calls_turn, kernel_factory

SHUT_DOWN = {"success": False, "error": "the backend is shut down"}


@pytest.fixture(params=["asyncio", "trio"])
def loop(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ENV_OVERRIDES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # the default settings file: ~/.trulymem/config.json


def make_server(tmp_path: Path, loop: str, provider: Any = None, **kwargs: Any) -> BackendServer:
    return BackendServer(db_path=str(tmp_path / "g.db"), backend=loop, kernel_factory=kernel_factory(provider), **kwargs)


@contextmanager
def running(server: BackendServer, **start: Any) -> Iterator[BackendServer]:
    server.start(**start)
    try:
        yield server
    finally:
        server.shutdown()


def wait_for_active_run(client: BackendClient) -> None:
    """Until the status counts the running message (the test's timeout bounds the wait)."""
    while client.get_status()["data"]["config"]["active_runs"] != 1:
        time.sleep(0.01)


def test_every_packet_type_through_the_client(tmp_path: Path, loop: str) -> None:
    server = make_server(tmp_path, loop)
    server.start()
    thread = server._thread
    client = BackendClient(server)

    result = client.process_message("你好，请记住我的名字是小明")
    expected = {"success": True, "content": "echo: 你好，请记住我的名字是小明", "tool_calls": [], "rejected_tools": []}
    assert result == {"success": True, "data": expected}
    assert result["content"] == expected["content"]  # the document's basic example reads it so

    commit = '{"subject": "用户", "relation": "名字是", "object": "小明"}'
    result = client.process_message(f"/tool memory_commit {commit}")
    assert result["data"]["tool_calls"] == [
        {"name": "memory_commit", "arguments": json.loads(commit), "result": '{"status":"committed","id":1}'}
    ]
    assert result["data"]["content"] == 'echo: tool memory_commit returned: {"status":"committed","id":1}'

    result = client.execute_tool("memory_recall", {"query_intent": "用户信息"})
    assert result["success"] and result["data"]["success"]
    assert json.loads(result["data"]["result"])["facts"][0]["object"] == "小明"

    status = client.get_status()["data"]
    assert (status["running"], status["graph_initialized"], status["client_initialized"]) == (True, True, False)
    assert status["config"]["provider"] == "echo" and "offline echo model" in status["config"]["notice"]
    assert status["config"]["event_loop"] == loop

    settings = client.get_settings()["data"]
    assert settings == {
        "api_config": {"api_key": None, "base_url": DEFAULT_BASE_URL, "model": DEFAULT_MODEL, **APP_DEFAULTS},
        "tool_limits": DEFAULT_TOOL_LIMITS,
    }
    update = client.update_settings(tool_limits={"persona_query_max": 2, "task_query_max": 5, "memory_query_max": 30})
    assert update == {"success": True, "data": {"status": "settings_updated"}}
    limits = client.get_settings()["data"]["tool_limits"]
    assert limits == {**DEFAULT_TOOL_LIMITS, "persona_query_max": 2, "task_query_max": 5, "memory_query_max": 30}

    assert [h["role"] for h in client.get_history()] == ["user", "assistant", "user", "assistant"]
    assert client.save_history([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == {"status": "history_saved"}
    assert client.get_history()[-2:] == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert client.clear_history() == {"status": "history_saved"}
    assert client.get_history() == []

    assert client.shutdown() == {"success": True, "data": {"status": "shutdown"}}
    assert not server.running and thread is not None and not thread.is_alive()
    assert client.get_status() == SHUT_DOWN


class ForeignType(Enum):
    """A program's own PacketType: same values, other names and identity."""

    MSG = "process_message"
    TOOL = "execute_tool"
    STATUS = "get_status"
    GET = "get_settings"
    SET = "set_settings"
    HISTORY = "get_history"
    SAVE = "save_history"
    STOP = "shutdown"


@dataclass
class ForeignPacket:
    id: str
    type: Any
    body: dict[str, Any]
    response_queue: Any = None
    created_at: float = field(default_factory=time.time)


def test_raw_packets_of_a_foreign_class(tmp_path: Path, loop: str) -> None:
    server = make_server(tmp_path, loop)
    server.start()

    def send(kind: Any, body: Any = None) -> dict[str, Any]:
        result = server.send(ForeignPacket(id=f"req-{kind}", type=kind, body=body))
        assert result.id == f"req-{kind}" and result.type is kind
        return result.body

    assert send(ForeignType.MSG, {"user_input": "hi"})["data"]["content"] == "echo: hi"
    assert json.loads(send(ForeignType.TOOL, {"tool_name": "persona_get", "arguments": {}})["data"]["result"]) == {"persona": {}}
    assert send(ForeignType.STATUS, {})["data"]["running"] is True
    assert send("get_status")["data"]["running"] is True  # a plain string type works too
    assert send(ForeignType.SET, {"api_config": {"model": "m-2"}}) == {"success": True, "data": {"status": "settings_updated"}}
    assert send(ForeignType.GET, {})["data"]["api_config"]["model"] == "m-2"
    assert send(ForeignType.SAVE, {"messages": [{"role": "user", "content": "x", "timestamp": 1}]})["data"] == {"status": "history_saved"}
    assert send(ForeignType.HISTORY, {})["data"]["history"][-1] == {"role": "user", "content": "x"}
    assert send(PacketType.GET_STATUS, {})["success"] is True

    assert send("get_weather", {}) == {
        "success": False,
        "error": "unknown packet type 'get_weather'; expected one of: execute_tool, get_history, get_settings, get_status, "
        "process_message, save_history, set_settings, shutdown",
    }
    assert send(ForeignType.MSG, {"text": "hi"})["error"] == "invalid process_message body: Object missing required field `user_input`"
    assert send(ForeignType.MSG, {"user_input": "  "})["error"] == "invalid process_message body: 'user_input' must not be empty"
    assert send(ForeignType.TOOL, {"tool_name": "nope"}) == {"success": False, "error": "Unknown tool: nope"}
    assert send(ForeignType.SAVE, {"messages": [{"role": "robot", "content": "x"}]})["error"].startswith("invalid save_history body")
    assert send(ForeignType.SET, ["not", "an", "object"])["error"] == "invalid set_settings body: expected an object, got list"

    assert send(ForeignType.STOP, {}) == {"success": True, "data": {"status": "shutdown"}}
    assert not server.running
    assert send(ForeignType.STATUS, {}) == SHUT_DOWN


def test_twenty_threads_at_once(tmp_path: Path, loop: str) -> None:
    with running(make_server(tmp_path, loop)) as server:
        client = BackendClient(server)

        def work(i: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            return client.process_message(f"message {i}"), client.get_status(), client.execute_tool("persona_get")

        with ThreadPoolExecutor(20) as pool:
            results = list(pool.map(work, range(20)))
        for i, (message, status, tool) in enumerate(results):
            assert message["data"]["content"] == f"echo: message {i}"
            assert status["success"] and tool["success"]
        history = client.get_history()
        assert len(history) == 40
        # One conversation: each message is answered before the next one starts.
        for user, assistant in zip(history[::2], history[1::2], strict=False):
            assert (user["role"], assistant["role"]) == ("user", "assistant")
            assert assistant["content"] == "echo: " + user["content"]


def test_a_slow_turn_does_not_block_status_or_tools(tmp_path: Path, loop: str) -> None:
    provider = SlowEcho()
    with running(make_server(tmp_path, loop, provider)) as server:
        client = BackendClient(server)
        answers: list[dict[str, Any]] = []
        worker = threading.Thread(target=lambda: answers.append(client.process_message("slow one two three four")))
        worker.start()
        provider.held.wait()
        assert client.get_status()["data"]["running"] is True
        assert client.execute_tool("current_time")["success"] is True
        assert client.get_settings()["success"] is True
        # The turn is held until released: all three were answered while it still runs.
        assert worker.is_alive() and not answers
        assert client.get_status()["data"]["config"]["active_runs"] == 1
        provider.release.set()
        worker.join()
        assert answers[0]["data"]["content"] == "echo: slow one two three four"
        assert provider.log == [("start", "slow one two three four"), ("done", "slow one two three four")]


def test_timeout_leaves_the_backend_healthy(tmp_path: Path, loop: str) -> None:
    provider = SlowEcho()  # never released: only the timeout can answer a held turn
    with running(make_server(tmp_path, loop, provider, timeout_s=0.4)) as server:
        client = BackendClient(server)
        assert client.process_message("slow a b c d e f g") == {"success": False, "error": "timeout"}
        packet = Packet(id="p1", type=PacketType.PROCESS_MESSAGE, body={"user_input": "slow again and again"})
        answer = server.send(packet, timeout=0.2)
        assert (answer.id, answer.body) == ("p1", {"success": False, "error": "timeout"})
        # The abandoned runs were interrupted: the conversation answers the next message.
        assert client.process_message("fast")["data"]["content"] == "echo: fast"
        assert client.get_status()["data"]["config"]["active_runs"] == 0
        contents = [h["content"] for h in client.get_history() if h["role"] == "user"]
        assert contents == ["slow a b c d e f g", "slow again and again", "fast"]
        # Each abandoned turn was stopped before the next message reached the model.
        assert provider.log == [
            ("start", "slow a b c d e f g"),
            ("stopped", "slow a b c d e f g"),
            ("start", "slow again and again"),
            ("stopped", "slow again and again"),
        ]


def test_shutdown_while_a_message_is_in_flight(tmp_path: Path, loop: str) -> None:
    provider = SlowEcho()  # never released: the held turn ends only when shutdown interrupts it
    server = make_server(tmp_path, loop, provider)
    server.start()
    thread = server._thread
    client = BackendClient(server)
    answers: dict[str, dict[str, Any]] = {}
    first = threading.Thread(target=lambda: answers.setdefault("slow", client.process_message("slow words that take a while")))
    first.start()
    provider.held.wait()
    second = threading.Thread(target=lambda: answers.setdefault("queued", client.process_message("queued")))
    second.start()
    portal, backend = server._portal, server._backend
    assert portal is not None and backend is not None
    while portal.call(lambda: backend._turns.statistics().tasks_waiting) == 0:  # until the second waits behind the first
        time.sleep(0.01)
    server.shutdown()
    first.join()
    second.join()
    assert provider.log == [("start", "slow words that take a while"), ("stopped", "slow words that take a while")]
    assert answers["slow"] == {"success": False, "error": "the backend is shut down: the message was interrupted"}
    assert answers["queued"] == SHUT_DOWN
    assert thread is not None and not thread.is_alive()
    assert client.get_status() == SHUT_DOWN
    server.shutdown()  # idempotent


def test_a_history_save_during_a_message_is_applied_after_it(tmp_path: Path, loop: str) -> None:
    provider = SlowEcho()
    with running(make_server(tmp_path, loop, provider)) as server:
        client = BackendClient(server)
        answers: list[dict[str, Any]] = []
        worker = threading.Thread(target=lambda: answers.append(client.process_message("slow reply")))
        worker.start()
        provider.held.wait()
        assert client.save_history([{"role": "user", "content": "saved meanwhile"}]) == {"status": "history_saved"}
        provider.release.set()
        worker.join()
        assert answers[0]["data"]["content"] == "echo: slow reply"
        assert client.process_message("next")["data"]["content"] == "echo: next"
        contents = [h["content"] for h in client.get_history()]
        assert contents == ["slow reply", "echo: slow reply", "saved meanwhile", "next", "echo: next"]


def test_settings_are_persisted_across_a_restart(tmp_path: Path, loop: str) -> None:
    with running(make_server(tmp_path, loop)) as server:
        client = BackendClient(server)
        result = client.update_settings(
            api_config={"api_key": "sk-test-1234567890abcd", "base_url": "http://127.0.0.1:9/v1", "model": "m-1"},
            tool_limits={"memory_query_max": 3},
        )
        assert result["success"], result
        assert client.update_settings(tool_limits={"task_update_max": 0}) == {
            "success": False,
            "error": "tool_limits.task_update_max must be an integer >= 1 (got 0)",
        }
        assert client.update_settings(tool_limits={"memory_query_max": "5"})["error"] == "tool_limits.memory_query_max must be an integer >= 1 (got '5')"
        assert client.update_settings(tool_limits={"bogus": 1})["error"].startswith("unknown tool limit 'bogus'")
        assert client.update_settings(api_config={"token": "x"})["error"].startswith("unknown api_config field 'token'")
        settings = client.get_settings()["data"]
        assert settings["api_config"] == {"api_key": "sk-…abcd", "base_url": "http://127.0.0.1:9/v1", "model": "m-1", **APP_DEFAULTS}
        # Posting the masked settings back (as a settings form would) keeps the real key.
        assert client.update_settings(api_config=settings["api_config"])["success"]
    with running(make_server(tmp_path, loop)) as server:
        client = BackendClient(server)
        settings = client.get_settings()["data"]
        assert settings["api_config"] == {"api_key": "sk-…abcd", "base_url": "http://127.0.0.1:9/v1", "model": "m-1", **APP_DEFAULTS}
        assert settings["tool_limits"] == {**DEFAULT_TOOL_LIMITS, "memory_query_max": 3}
        status = client.get_status()["data"]
        assert status["client_initialized"] is True and status["config"]["provider"] == "openai"
        assert "notice" not in status["config"]


def test_a_settings_change_waits_for_the_running_message(tmp_path: Path, loop: str) -> None:
    """Applying settings rebuilds the providers: never under a turn that streams from one."""
    script = [Reply(text="one two three four", chunks=4, delay_s=0.15)]
    with start_blocking_portal(loop) as portal, portal.wrap_async_context_manager(fake_openai_server(script)) as fake:
        with running(make_server(tmp_path, loop), api_key="sk-fake-key-1234", base_url=fake.base_url, model="m") as server:
            client = BackendClient(server)
            answers: list[dict[str, Any]] = []
            worker = threading.Thread(target=lambda: answers.append(client.process_message("hi")))
            worker.start()
            wait_for_active_run(client)
            assert client.update_settings(tool_limits={"memory_query_max": 3})["success"] is True
            worker.join(10)
            assert answers == [{"success": True, "data": {"success": True, "content": "one two three four", "tool_calls": [], "rejected_tools": []}}]
            assert client.get_settings()["data"]["tool_limits"]["memory_query_max"] == 3
            assert client.process_message("again")["data"]["content"] == "one two three four"


def test_start_arguments_configure_the_model(tmp_path: Path, loop: str) -> None:
    with running(make_server(tmp_path, loop), api_key="sk-start-key-000011112222", model="deepseek-chat") as server:
        data = BackendClient(server).get_settings()["data"]
        assert data["api_config"] == {"api_key": "sk-…2222", "base_url": DEFAULT_BASE_URL, "model": "deepseek-chat", **APP_DEFAULTS}
        with pytest.raises(RuntimeError, match="already started"):
            server.start()


def test_history_is_capped_at_500(tmp_path: Path, loop: str) -> None:
    with running(make_server(tmp_path, loop)) as server:
        client = BackendClient(server)
        messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(600)]
        assert client.save_history(messages) == {"status": "history_saved"}
        history = client.get_history()
        assert len(history) == 500
        assert history[0]["content"] == "m100" and history[-1]["content"] == "m599"
        client.process_message("one more")
        history = client.get_history()
        assert len(history) == 500 and history[-2:] == [
            {"role": "user", "content": "one more"},
            {"role": "assistant", "content": "echo: one more"},
        ]
        assert client.save_history([{"role": "robot", "content": "x"}])["success"] is False


def test_lifecycle(tmp_path: Path, loop: str) -> None:
    server = make_server(tmp_path, loop)
    assert server.process_message("hi") == {"success": False, "error": "the backend is not started: call start() first"}
    with server:
        assert server.running and server.process_message("hi")["data"]["content"] == "echo: hi"
    assert not server.running and server.process_message("hi") == SHUT_DOWN
    # The same object starts again and continues the stored conversation.
    with running(server):
        assert BackendClient(server).get_history() == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "echo: hi"}]
    assert not any(t.name == "packet-backend" for t in threading.enumerate())


MANY = (
    [("persona_get", "{}")] * 2
    + [("persona_update", '{"attribute": "name", "value": "Aria"}')] * 2
    + [("task_query", "{}")] * 5
    + [("task_create", '{"title": "t"}')] * 3
    + [("memory_recall", '{"query_intent": "tea"}')] * 21
    + [(("memory_commit", json.dumps({"subject": "user", "relation": "likes", "object": f"tea {i}"}))) for i in range(11)]
)


def test_tool_limits_per_message(tmp_path: Path, loop: str) -> None:
    provider = ScriptedProvider([calls_turn(*MANY), text_turn("first"), calls_turn(*MANY), text_turn("second")])
    with running(make_server(tmp_path, loop, provider)) as server:
        client = BackendClient(server)
        first = client.process_message("use your memory")["data"]
        assert first["content"] == "first"
        assert first["rejected_tools"] == [
            ["persona_get", "tool call rejected: persona query limit reached (1 per run)"],
            ["persona_update", "tool call rejected: persona update limit reached (1 per run)"],
            ["task_query", "tool call rejected: task query limit reached (4 per run)"],
            ["task_create", "tool call rejected: task update limit reached (2 per run)"],
            ["memory_recall", "tool call rejected: memory query limit reached (20 per run)"],
            ["memory_commit", "tool call rejected: memory update limit reached (10 per run)"],
        ]
        assert len(first["tool_calls"]) == len(MANY) - 6
        seen_by_model = [msg.content for msg in provider.requests[1].messages if msg.role == "tool"]
        assert sum(c.startswith("tool call rejected: ") for c in seen_by_model) == 6

        # Counters reset at each message; new limits apply to the next one.
        assert client.update_settings(tool_limits={"memory_query_max": 21, "persona_update_max": 2})["success"]
        second = client.process_message("again")["data"]
        assert [name for name, _ in second["rejected_tools"]] == ["persona_get", "task_query", "task_create", "memory_commit"]

        # Direct calls are not limited.
        for _ in range(5):
            assert client.execute_tool("persona_get")["success"] is True


def test_memory_survives_a_restart_and_a_new_conversation(tmp_path: Path, loop: str) -> None:
    commit = json.dumps({"subject": "用户", "relation": "名字是", "object": "小明"})
    provider = ScriptedProvider([calls_turn(("memory_commit", commit)), text_turn("好的，小明")])
    with running(make_server(tmp_path, loop, provider)) as server:
        answer = BackendClient(server).process_message("你好，请记住我的名字是小明")["data"]
        assert answer["tool_calls"][0]["result"] == '{"status":"committed","id":1}'
    provider = ScriptedProvider([calls_turn(("memory_recall", '{"query_intent": "用户信息"}')), text_turn("你叫小明")])
    with running(make_server(tmp_path, loop, provider, session_id="another-conversation")) as server:
        client = BackendClient(server)
        answer = client.process_message("我叫什么？")["data"]
        assert json.loads(answer["tool_calls"][0]["result"])["facts"][0]["object"] == "小明"
        assert answer["content"] == "你叫小明"
        assert client.get_history()[0] == {"role": "user", "content": "我叫什么？"}

        purged = client.execute_tool("memory_purge", {"subject": "用户"})
        assert json.loads(purged["data"]["result"]) == {"status": "purged", "count": 1}
        recall = client.execute_tool("memory_recall", {"query_intent": "用户信息"})
        assert json.loads(recall["data"]["result"])["count"] == 0
        bad = client.execute_tool("memory_commit", {"subject": "用户"})
        assert bad["success"] is False
        assert bad["error"].startswith("tool error: invalid arguments for memory_commit: Object missing required field `relation`")


WRITE_NOTES = json.dumps({"path": "notes.txt", "content": "remember tea"})


def test_a_tool_that_needs_approval_is_rejected_by_default(tmp_path: Path, loop: str) -> None:
    """Nobody can be asked through the packet API: the default policy refuses the call
    at once (without it, the turn would wait for the kernel's 300 s approval timeout)."""
    provider = ScriptedProvider([tool_turn("write_file", WRITE_NOTES), text_turn("I could not write it")])
    with running(make_server(tmp_path, loop, provider)) as server:
        answer = BackendClient(server).process_message("write my notes")
    assert answer["success"] is True, answer
    reason = "the user declined to run write_file (the packet API cannot ask for approval; set [transports.packet] tool_approval)"
    assert answer["data"] == {
        "success": True,
        "content": "I could not write it",
        "tool_calls": [],
        "rejected_tools": [["write_file", f"tool call rejected: {reason}"]],
    }
    tool_message = provider.requests[1].messages[-1]
    assert (tool_message.role, tool_message.outcome) == ("tool", "rejected")
    assert not (tmp_path / "notes.txt").exists()


def test_tool_approval_approve_runs_the_tool(tmp_path: Path, loop: str) -> None:
    provider = ScriptedProvider([tool_turn("write_file", WRITE_NOTES), text_turn("written")])
    with running(make_server(tmp_path, loop, provider, tool_approval="approve")) as server:
        answer = BackendClient(server).process_message("write my notes")
    assert answer["data"]["tool_calls"] == [
        {"name": "write_file", "arguments": json.loads(WRITE_NOTES), "result": "wrote 12 bytes to notes.txt"}
    ]
    assert answer["data"]["rejected_tools"] == []
    assert provider.requests[1].messages[-1].outcome == "ok"
    assert (tmp_path / "notes.txt").read_text() == "remember tea"


def test_tool_approval_must_not_ask(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be asked"):
        make_server(tmp_path, "asyncio", tool_approval="ask")
    with pytest.raises(ValueError, match="cannot be asked"):
        make_server(tmp_path, "asyncio", tool_approval=m.ApprovalPolicy(mode="reject", turn_limit="ask"))
