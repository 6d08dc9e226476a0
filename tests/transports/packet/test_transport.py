"""The packet transport inside `gateway serve`: sync code in the process reaches the kernel."""

from __future__ import annotations

import anyio
import anyio.to_thread
import pytest

from kernel import model as m
from kernel.testing import running_kernel
from plugins.manager import load_plugins
from plugins.providers.echo import EchoProvider
from transports.base import load_config
from transports.packet import (
    BackendClient,
    ConnectedServer,
    Packet,
    PacketTransport,
    connect,
)
from transports.packet.config import REASON, approval_policy

from ._support import ALL_TOOLS, SlowEcho

pytestmark = pytest.mark.anyio


def test_registered_as_a_transport() -> None:
    registry = load_plugins(("transports.packet.plugin",), use_entry_points=False)
    assert registry.transports == {"packet": PacketTransport}
    config = load_config(PacketTransport, {"endpoint": "app", "timeout_s": 5})
    assert (config.endpoint, config.session_id, config.timeout_s) == ("app", "packet", 5)
    with pytest.raises(ValueError, match=r"\[transports.packet\]"):
        load_config(PacketTransport, {"port": 1})


def test_tool_approval_is_a_policy_that_never_asks() -> None:
    assert load_config(PacketTransport, {}).tool_approval == "reject"
    assert approval_policy("reject") == m.ApprovalPolicy(mode="reject", reason=REASON)
    assert approval_policy("reject").at_turn_limit() == "stop"
    table = {"mode": "reject", "allow_tools": ["write_file"]}
    config = load_config(PacketTransport, {"tool_approval": table})
    assert approval_policy(config.tool_approval) == m.ApprovalPolicy(mode="reject", allow_tools=("write_file",), reason=REASON)
    for asking in ("ask", {"mode": "approve", "turn_limit": "ask"}):
        with pytest.raises(ValueError, match=r"\[transports.packet\]: tool_approval: the packet API's callers cannot be asked"):
            load_config(PacketTransport, {"tool_approval": asking})


async def test_connect_to_a_served_kernel() -> None:
    async with running_kernel(EchoProvider(), tools=ALL_TOOLS) as kernel, anyio.create_task_group() as tg:
        config = load_config(PacketTransport, {"endpoint": "test-connect"})
        await tg.start(PacketTransport().serve, kernel, config)

        def app() -> tuple[dict, dict, list, dict, dict, dict, dict]:
            client = BackendClient(connect("test-connect"))
            answer = client.process_message("hello")
            status = client.get_status()
            saved = client.get_history()
            settings = client.get_settings()
            app_setting = client.update_settings(api_config={"enable_tui": False})
            stop = client.server.send(Packet(id="s", type="shutdown", body={})).body
            return answer, status, saved, settings, app_setting, stop, client.get_status()

        answer, status, history, settings, app_setting, stop, after = await anyio.to_thread.run_sync(app)
        assert answer["data"]["content"] == "echo: hello"
        # No settings file here: the API settings only, and TrulyMEM's application settings are refused.
        assert set(settings["data"]["api_config"]) == {"api_key", "base_url", "model"}
        assert app_setting == {"success": False, "error": "enable_tui: kept in a BackendServer's config_file; this packet endpoint has none"}
        assert status["data"]["config"]["endpoint"] == "test-connect"
        assert history == [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "echo: hello"}]
        # Shutdown detaches this handle only: the gateway owns the kernel and keeps serving.
        assert stop == {"success": True, "data": {"status": "shutdown", "detached": True}}
        assert after == {"success": False, "error": "the backend is shut down"}
        fresh = await anyio.to_thread.run_sync(lambda: BackendClient(connect("test-connect")).get_status())
        assert fresh["success"] is True

        with pytest.raises(RuntimeError, match="already served"):
            await PacketTransport().serve(kernel, config)
        tg.cancel_scope.cancel()
    with pytest.raises(LookupError):
        connect("test-connect")


async def test_stopping_the_gateway_answers_waiting_callers() -> None:
    provider = SlowEcho()  # never released: the message ends only when the gateway stops
    async with running_kernel(provider) as kernel, anyio.create_task_group() as tg:
        config = load_config(PacketTransport, {"endpoint": "test-stop"})
        scope = anyio.CancelScope()

        async def serve() -> None:
            with scope:
                await PacketTransport().serve(kernel, config)

        tg.start_soon(serve)
        server = await anyio.to_thread.run_sync(lambda: connect("test-stop", wait_s=5))
        assert isinstance(server, ConnectedServer)
        async with anyio.create_task_group() as callers:
            answers: list[dict] = []

            async def caller() -> None:
                answers.append(await anyio.to_thread.run_sync(server.process_message, "slow and long"))

            callers.start_soon(caller)
            await anyio.to_thread.run_sync(provider.held.wait)
            scope.cancel()
        assert answers == [{"success": False, "error": "the backend is shut down"}]
        assert provider.log == [("start", "slow and long"), ("stopped", "slow and long")]
        assert await anyio.to_thread.run_sync(BackendClient(server).get_status) == {
            "success": False,
            "error": "no packet endpoint 'test-stop' is being served",
        }
