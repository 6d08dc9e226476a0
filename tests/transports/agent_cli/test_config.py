"""Configuration and registration of the Agent-CLI transport."""

from __future__ import annotations

import msgspec
import pytest

from kernel import model as m
from kernel.testing import running_kernel
from plugins.manager import load_plugins
from transports.agent_cli import AgentCliConfig, AgentCliTransport
from transports.agent_cli.config import APPROVAL_REASON
from transports.base import Transport, load_config
from transports.shared import LOOPBACK_ORIGINS, ConfigError


def test_defaults() -> None:
    cfg = load_config(AgentCliTransport, {})
    assert isinstance(cfg, AgentCliConfig)
    assert (cfg.host, cfg.port, cfg.path, cfg.complete_tag) == ("127.0.0.1", 8080, "/", "Complete")
    assert (cfg.approval_timeout_s, cfg.max_turns, cfg.max_queued_requests) == (300.0, None, 8)
    assert (cfg.max_file_bytes, cfg.max_image_bytes, cfg.max_input_parts, cfg.max_message_bytes) == (1_048_576, 3_145_728, 16, 4_194_304)
    assert cfg.agent is None and cfg.token is None and tuple(cfg.allowed_origins) == LOOPBACK_ORIGINS


def test_tool_approval_is_a_mode_or_a_table() -> None:
    assert AgentCliConfig().approval() == m.ApprovalPolicy(mode="ask", reason=APPROVAL_REASON)
    table = msgspec.convert({"tool_approval": {"mode": "reject", "allow_categories": ["clock"]}}, AgentCliConfig)
    assert table.approval() == m.ApprovalPolicy(mode="reject", allow_categories=("clock",), reason=APPROVAL_REASON)
    assert table.approval().at_turn_limit() == "stop"  # nobody is asked
    with pytest.raises(ValueError, match="tool_approval"):
        load_config(AgentCliTransport, {"tool_approval": "maybe"})


def test_invalid_options_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\[transports.agent-cli\].*complete_tag"):
        load_config(AgentCliTransport, {"complete_tag": "Done"})
    with pytest.raises(ValueError, match="Object contains unknown field `prot`"):
        load_config(AgentCliTransport, {"prot": 1})
    for bad in ({"path": "ws"}, {"max_turns": -1}, {"max_file_bytes": 0}, {"max_queued_requests": -1}):
        with pytest.raises(ValueError, match=r"\[transports.agent-cli\]: .*(path|max_turns|max_file_bytes|max_queued_requests)"):
            load_config(AgentCliTransport, bad)
        with pytest.raises(ConfigError):
            AgentCliConfig(**bad)  # type: ignore[arg-type]


def test_registered_as_a_plugin() -> None:
    registry = load_plugins(("transports.agent_cli.plugin",), use_entry_points=False)
    assert registry.transports == {"agent-cli": AgentCliTransport}
    assert isinstance(AgentCliTransport(), Transport)


@pytest.mark.anyio
async def test_unknown_agent_and_public_bind_are_start_up_errors() -> None:
    async with running_kernel() as kernel:
        with pytest.raises(ConfigError, match="agent: Agent not found: nobody"):
            await AgentCliTransport().serve(kernel, AgentCliConfig(port=0, agent="nobody"))
        with pytest.raises(ConfigError, match="refusing to bind"):
            await AgentCliTransport().serve(kernel, AgentCliConfig(port=0, host="0.0.0.0"))
