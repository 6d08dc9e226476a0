"""The pure pieces behind OpenFang's ids and dashboard answers: session ids on plain values
(and fuzzed), and the shapes of ``routes.rs`` built from kernel data."""

from __future__ import annotations

import re
import uuid

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from kernel import model as m
from transports.openfang.dashboard_codec import (
    ModelBody,
    agent_model_json,
    agent_tools_json,
    approval_id,
    approvals_json,
    config_json,
    mcp_servers_json,
    models_json,
    pending_approvals,
    provider_facts,
    providers_json,
    split_model,
    tools_json,
    usage_by_model_json,
    usage_json,
    usage_summary_json,
)
from transports.openfang.rest_codec import session_json, sessions_json
from transports.openfang.sessionids import alias, canonical_uuid, new_session_id, public_session_id

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
AGENT = "3a1f159c-51da-580d-a4eb-98d4826ded8e"


def test_session_ids_are_shown_as_canonical_uuids() -> None:
    made = new_session_id()
    assert UUID.fullmatch(made) and public_session_id(made) == made
    upper = str(uuid.uuid4()).upper()
    assert public_session_id(upper) == upper.lower()
    hexed = uuid.uuid4()
    assert public_session_id(hexed.hex) == str(hexed) and canonical_uuid(hexed.hex) == str(hexed)
    assert canonical_uuid("notes") is None and canonical_uuid("x" * 1000) is None
    assert public_session_id("notes") == alias("notes") == str(uuid.uuid5(uuid.UUID("6f70656e-6661-4e67-8073-657373696f6e"), "notes"))
    assert alias("notes") != alias("Notes")


@given(st.text(max_size=200))
def test_fuzz_every_kernel_id_has_one_stable_public_uuid(kernel_id: str) -> None:
    shown = public_session_id(kernel_id)
    assert UUID.fullmatch(shown)
    assert public_session_id(shown) == shown and canonical_uuid(shown) == shown
    assert public_session_id(kernel_id) == shown


def test_session_rows_show_public_ids_and_the_active_flag() -> None:
    info = m.SessionInfo(session_id="notes", agent_id=AGENT, label="n", created_at=0.0, message_count=2)
    row = session_json(info, {"notes"})
    assert row == {"session_id": alias("notes"), "agent_id": AGENT, "message_count": 2, "created_at": "1970-01-01T00:00:00Z", "label": "n", "active": True}
    newer = m.SessionInfo(session_id=new_session_id(), agent_id=AGENT, created_at=5.0)
    assert [r["session_id"] for r in sessions_json([info, newer], set())["sessions"]] == [newer.session_id, alias("notes")]


def test_models_and_providers_from_the_settings_view() -> None:
    settings = {"provider": {"openai": {"api_key": "sk-…abcd", "base_url": None}}}
    openai, echo, plugin = provider_facts("openai", settings), provider_facts("echo", settings), provider_facts("mine", settings)
    assert (openai.auth_status, openai.base_url, openai.api_key_env) == ("configured", "https://api.openai.com/v1", "OPENAI_API_KEY")
    assert provider_facts("openai", {"provider": {"openai": {"api_key": None}}}).auth_status == "missing"
    assert (echo.auth_status, echo.is_local, echo.key_required) == ("not_required", True, False)
    assert plugin.auth_status == "configured"
    models = [m.ModelInfo(id="gpt-4o", provider="openai"), m.ModelInfo(id="echo", provider="echo")]
    facts = {"openai": provider_facts("openai", {"provider": {}}), "echo": echo}
    listing = models_json(models, facts, 1000)
    assert [(e["id"], e["available"], e["tier"]) for e in listing["models"]] == [("gpt-4o", False, "balanced"), ("echo", True, "local")]
    assert (listing["total"], listing["available"]) == (2, 1)
    assert [e["id"] for e in models_json(models, facts, 1000, available_only=True)["models"]] == ["echo"]
    assert [e["id"] for e in models_json(models, facts, 1000, provider="OpenAI")["models"]] == ["gpt-4o"]
    providers = providers_json([(echo, 1)])
    assert providers == {"providers": [{"id": "echo", "display_name": "Echo (offline)", "auth_status": "not_required", "model_count": 1,
                                        "key_required": False, "api_key_env": "", "base_url": "", "is_local": True}], "total": 1}


def test_model_names_agent_tools_and_tool_listing() -> None:
    assert split_model("openai/gpt-4o", "openai") == "gpt-4o"
    assert split_model("meta-llama/Llama-3-8B", "openai") == "meta-llama/Llama-3-8B"
    assert split_model("openai/", "openai") == "openai/" and split_model("gpt-4o", "openai") == "gpt-4o"
    assert msgspec.json.decode(b'{"model":"x"}', type=ModelBody).provider is None
    session = m.SessionInfo(session_id="notes", agent_id=AGENT, model="gpt-4o")
    assert agent_model_json(session, "openai") == {"status": "ok", "model": "gpt-4o", "provider": "openai", "session_id": alias("notes")}
    assert agent_tools_json(["*"], ["clock", "read_file"]) == {"tool_allowlist": [], "tool_blocklist": [], "tools": ["clock", "read_file"]}
    assert agent_tools_json(["clock"], ["clock"])["tool_allowlist"] == ["clock"]
    tool = m.ToolInfo(name="clock", description="time", parameters={"type": "object"}, requires_approval=True)
    assert tools_json([tool]) == {"tools": [{"name": "clock", "description": "time", "input_schema": {"type": "object"}, "category": "general",
                                             "access": "query", "requires_approval": True}], "total": 1}


def test_usage_sums_the_sessions_of_each_agent() -> None:
    agents = [m.AgentInfo(id=AGENT, name="General Assistant"), m.AgentInfo(id="b", name="Quiet")]
    sessions = [
        m.SessionInfo(session_id="1", agent_id=AGENT, usage=m.Usage(input_tokens=3, output_tokens=4)),
        m.SessionInfo(session_id="2", agent_id=AGENT, usage=m.Usage(input_tokens=1, output_tokens=1)),
    ]
    rows = usage_json(agents, sessions)["agents"]
    assert rows == [
        {"agent_id": AGENT, "name": "General Assistant", "total_tokens": 9, "input_tokens": 4, "output_tokens": 5, "sessions": 2},
        {"agent_id": "b", "name": "Quiet", "total_tokens": 0, "input_tokens": 0, "output_tokens": 0, "sessions": 0},
    ]


def test_approvals_list_the_sessions_waiting_for_a_yes() -> None:
    waiting = m.SessionInfo(session_id="s1", agent_id=AGENT, state="awaiting_tool_approval", pending_call_id="c1", title="do it", updated_at=60.0)
    idle = m.SessionInfo(session_id="s2", agent_id=AGENT)
    asking_turns = m.SessionInfo(session_id="s3", agent_id=AGENT, state="awaiting_turn_confirmation")
    assert pending_approvals([waiting, idle, asking_turns]) == [waiting]
    listing = approvals_json([waiting], {AGENT: "General Assistant"}, 300.0)
    row = listing["approvals"][0]
    assert listing["total"] == 1 and row["id"] == approval_id("s1", "c1") and UUID.fullmatch(row["id"])
    assert approval_id("s1", "c1") != approval_id("s1", "c2")
    assert {"agent_name": "General Assistant", "status": "pending", "timeout_secs": 300, "created_at": "1970-01-01T00:01:00Z", "call_id": "c1"}.items() <= row.items()
    assert '"do it"' in row["description"] and row["action"] == "Tool call c1"


def test_config_shows_no_secret() -> None:
    default = m.AgentInfo(id=AGENT, name="General Assistant", provider="openai", model="gpt-4o")
    settings = {"tools": {"workspace": "/srv/work"}, "store": {"path": "postgresql://gw:hunter2@db/gateway"}}
    config = config_json(settings, default, token_set=True)
    assert config == {"home_dir": "/srv/work", "data_dir": "postgresql://…", "api_key": "***",
                      "default_model": {"provider": "openai", "model": "gpt-4o", "api_key_env": "OPENAI_API_KEY"}}
    assert config_json({"store": {"path": "/var/lib/gw/gateway.db"}}, default, token_set=False)["data_dir"] == "/var/lib/gw"


def test_usage_summary_and_by_model_sum_the_sessions_tokens() -> None:
    sessions = [
        m.SessionInfo(session_id="a", agent_id=AGENT, model="big", usage=m.Usage(input_tokens=10, output_tokens=5)),
        m.SessionInfo(session_id="b", agent_id=AGENT, model="small", usage=m.Usage(input_tokens=1, output_tokens=1)),
        m.SessionInfo(session_id="c", agent_id=AGENT, model="big", usage=m.Usage(input_tokens=2, output_tokens=3)),
        m.SessionInfo(session_id="d", agent_id=AGENT, model="unused"),
    ]
    summary = usage_summary_json(sessions)
    assert (summary["total_input_tokens"], summary["total_output_tokens"], summary["total_cost_usd"]) == (13, 9, 0.0)
    rows = usage_by_model_json(sessions)["models"]
    assert [(row["model"], row["total_input_tokens"], row["total_output_tokens"]) for row in rows] == [("big", 12, 8), ("small", 1, 1)]


def test_mcp_servers_from_the_masked_settings_and_the_offered_tools() -> None:
    configured = [
        {"name": "files", "command": "npx", "args": ["-y", "srv"], "env": {"API_KEY": "sk-…3456"}, "url": None, "connect_timeout_s": 30.0},
        {"name": "web", "command": None, "args": [], "env": {}, "url": "http://127.0.0.1:9/mcp", "connect_timeout_s": 5.0},
    ]
    tools = [
        m.ToolInfo(name="files__read", description="Read a file", parameters={}),
        m.ToolInfo(name="clock", description="The time", parameters={}),
    ]
    body = mcp_servers_json(configured, tools)
    assert body["configured"] == [
        {"name": "files", "transport": {"type": "stdio", "command": "npx", "args": ["-y", "srv"]}, "timeout_secs": 30, "env": {"API_KEY": "sk-…3456"}},
        {"name": "web", "transport": {"type": "http", "url": "http://127.0.0.1:9/mcp"}, "timeout_secs": 5, "env": {}},
    ]
    assert body["connected"] == [{"name": "files", "tools_count": 1, "tools": [{"name": "read", "description": "Read a file"}], "connected": True}]
    assert (body["total_configured"], body["total_connected"]) == (2, 1)
