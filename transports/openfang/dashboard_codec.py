"""Sans-IO shapes of the REST endpoints OpenFang's dashboard reads beside the chat
(a pure piece of the codec; ``dashboard.py`` does the I/O).

Each function turns kernel data into the JSON ``crates/openfang-api/src/routes.rs``
answers, with the keys the dashboard's pages read: models and providers (the model
switcher, the settings page), the agent's tools and model, usage, pending approvals,
the configuration summary and the auth mode. Where OpenFang has something the gateway
does not (templates, a model catalog with prices), the lists are empty or the numbers
zero, never invented; fields OpenFang has no notion of are extras after its own.
"""

from __future__ import annotations

import os.path
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from kernel import model as m

from .rest_codec import iso_time
from .sessionids import ALIAS_NAMESPACE, public_session_id

AuthStatus = Literal["configured", "missing", "not_required"]
#: Where an OpenAI-compatible provider goes when no ``base_url`` is configured.
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"


class ProviderFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the dashboard shows of a provider, from the (masked) settings."""

    id: str
    display_name: str
    auth_status: AuthStatus
    key_required: bool
    api_key_env: str = ""
    base_url: str = ""
    is_local: bool = False

    @property
    def available(self) -> bool:
        return self.auth_status != "missing"


class ModelBody(msgspec.Struct, kw_only=True):
    """``PUT /api/agents/{id}/model``: ``{"model": "...", "provider"?: "..."}``."""

    model: str = ""
    provider: str | None = None


def provider_facts(name: str, settings: Mapping[str, Any]) -> ProviderFacts:
    """A provider's entry from ``Kernel.settings_view()`` (secrets already masked there)."""
    section = settings.get("provider", {})
    if name == "openai":
        openai = section.get("openai", {})
        return ProviderFacts(
            id=name, display_name="OpenAI-compatible API", auth_status="configured" if openai.get("api_key") else "missing",
            key_required=True, api_key_env="OPENAI_API_KEY", base_url=openai.get("base_url") or OPENAI_DEFAULT_URL,
        )
    if name == "echo":
        return ProviderFacts(id=name, display_name="Echo (offline)", auth_status="not_required", key_required=False, is_local=True)
    # A provider plugin: installed and set up through [provider.options.NAME], nothing to ask for.
    return ProviderFacts(id=name, display_name=name, auth_status="configured", key_required=False)


def provider_json(facts: ProviderFacts, model_count: int) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": facts.id,
        "display_name": facts.display_name,
        "auth_status": facts.auth_status,
        "model_count": model_count,
        "key_required": facts.key_required,
        "api_key_env": facts.api_key_env,
        "base_url": facts.base_url,
    }
    if facts.is_local:
        entry["is_local"] = True
    return entry


def providers_json(entries: Sequence[tuple[ProviderFacts, int]]) -> dict[str, Any]:
    """``GET /api/providers``: the providers the agents use, with how many models each offers."""
    return {"providers": [provider_json(facts, count) for facts, count in entries], "total": len(entries)}


def model_json(model: m.ModelInfo, facts: ProviderFacts, context_window: int) -> dict[str, Any]:
    """One catalog entry. The gateway knows a model's id and provider, not its prices or limits:
    costs and ``max_output_tokens`` are 0; the context window is the transport's assumption."""
    return {
        "id": model.id,
        "display_name": model.id,
        "provider": model.provider,
        "tier": "local" if facts.is_local else "balanced",
        "context_window": context_window,
        "max_output_tokens": 0,
        "input_cost_per_m": 0.0,
        "output_cost_per_m": 0.0,
        "supports_tools": True,
        "supports_vision": False,
        "supports_streaming": True,
        "available": facts.available,
    }


def models_json(
    models: Iterable[m.ModelInfo],
    providers: Mapping[str, ProviderFacts],
    context_window: int,
    *,
    provider: str | None = None,
    available_only: bool = False,
) -> dict[str, Any]:
    """``GET /api/models[?provider=&available=true]``: every model the agents' providers offer."""
    everything = [model_json(model, providers[model.provider], context_window) for model in models]
    shown = [
        entry for entry in everything
        if (provider is None or entry["provider"].lower() == provider.lower()) and (entry["available"] or not available_only)
    ]
    return {"models": shown, "total": len(everything), "available": sum(1 for entry in everything if entry["available"])}


def split_model(raw: str, provider: str) -> str:
    """The dashboard's ``provider/model`` spelling for the agent's own provider, as OpenFang
    strips it; a model id that merely contains a slash (``org/model``) is left whole."""
    prefix, slash, rest = raw.partition("/")
    return rest if slash and rest and prefix.lower() == provider.lower() else raw


def agent_model_json(session: m.SessionInfo, provider: str) -> dict[str, Any]:
    """``GET`` / ``PUT /api/agents/{id}/model``: the model of the agent's active session."""
    return {"status": "ok", "model": session.model, "provider": provider, "session_id": public_session_id(session.session_id)}


def agent_tools_json(configured: Sequence[str], effective: Iterable[str]) -> dict[str, Any]:
    """``GET /api/agents/{id}/tools``. OpenFang's empty allowlist means "every tool" — the
    gateway's ``tools = ["*"]``; ``tools`` (an extra) is what the agent really gets."""
    return {
        "tool_allowlist": [] if "*" in configured else list(configured),
        "tool_blocklist": [],
        "tools": list(effective),
    }


def tools_json(tools: Iterable[m.ToolInfo]) -> dict[str, Any]:
    """``GET /api/tools``: every installed tool with its JSON schema."""
    rows = [
        {
            "name": tool.name, "description": tool.description, "input_schema": tool.parameters,
            "category": tool.category, "access": tool.access, "requires_approval": tool.requires_approval,
        }
        for tool in tools
    ]
    return {"tools": rows, "total": len(rows)}


def usage_json(agents: Iterable[m.AgentInfo], sessions: Iterable[m.SessionInfo]) -> dict[str, Any]:
    """``GET /api/usage``: tokens per agent, summed over its sessions since the gateway loaded
    them (the kernel's count). The kernel does not count tool calls, so ``tool_calls`` is absent
    (the dashboard reads a missing count as 0)."""
    totals: dict[str, m.Usage] = {}
    counts: dict[str, int] = {}
    for info in sessions:
        totals[info.agent_id] = totals.get(info.agent_id, m.Usage()) + info.usage
        counts[info.agent_id] = counts.get(info.agent_id, 0) + 1
    rows = []
    for agent in agents:
        usage = totals.get(agent.id, m.Usage())
        rows.append({
            "agent_id": agent.id, "name": agent.name, "total_tokens": usage.total_tokens,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "sessions": counts.get(agent.id, 0),
        })
    return {"agents": rows}


def approval_id(session_id: str, call_id: str) -> str:
    """A pending approval's id: a UUID (the dashboard puts it in a path), stable for its question."""
    return str(uuid.uuid5(ALIAS_NAMESPACE, f"approval\n{session_id}\n{call_id}"))


def pending_approvals(sessions: Iterable[m.SessionInfo]) -> list[m.SessionInfo]:
    """The sessions waiting for a yes or no on a tool call."""
    return [info for info in sessions if info.state == "awaiting_tool_approval" and info.pending_call_id is not None]


def approval_json(session: m.SessionInfo, agent_name: str, timeout_s: float) -> dict[str, Any]:
    """One pending approval. ``SessionInfo`` names the waiting call by its id only, so that is
    what ``action`` shows; ``session_id`` and ``call_id`` are extras."""
    call_id = session.pending_call_id or ""
    asked = iso_time(session.updated_at)
    topic = f' ("{session.title}")' if session.title else ""
    action = f"Tool call {call_id}"
    return {
        "id": approval_id(session.session_id, call_id),
        "agent_id": session.agent_id,
        "agent_name": agent_name,
        "tool_name": "",
        "description": f"Session {public_session_id(session.session_id)}{topic} waits for a yes or no on tool call {call_id}.",
        "action_summary": action,
        "action": action,
        "risk_level": "high",
        "requested_at": asked,
        "created_at": asked,
        "timeout_secs": int(timeout_s),
        "status": "pending",
        "session_id": public_session_id(session.session_id),
        "call_id": call_id,
    }


def approvals_json(pending: Iterable[m.SessionInfo], agent_names: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    """``GET /api/approvals``: the tool calls waiting for approval now, in every session."""
    rows = [approval_json(info, agent_names.get(info.agent_id, info.agent_id), timeout_s) for info in pending]
    return {"approvals": rows, "total": len(rows)}


def decision_json(approval: str, approved: bool, decided_at: float) -> dict[str, Any]:
    """``POST /api/approvals/{id}/approve|reject``."""
    return {"id": approval, "status": "approved" if approved else "rejected", "decided_at": iso_time(decided_at)}


def config_json(settings: Mapping[str, Any], default: m.AgentInfo, *, token_set: bool) -> dict[str, Any]:
    """``GET /api/config``: a summary without secrets. ``api_key`` is OpenFang's key for its own
    API — here the transport's token: ``"***"`` when one is set, else ``"not set"``."""
    return {
        "home_dir": settings.get("tools", {}).get("workspace", ""),
        "data_dir": _data_dir(str(settings.get("store", {}).get("path", ""))),
        "api_key": "***" if token_set else "not set",
        "default_model": {
            "provider": default.provider,
            "model": default.model,
            "api_key_env": "OPENAI_API_KEY" if default.provider == "openai" else "",
        },
    }


def _data_dir(store: str) -> str:
    """Where the store lives: a file's directory; of a database URL (which may hold a
    password) only its scheme."""
    if "://" in store:
        return store.split("://", 1)[0] + "://…"
    return os.path.dirname(store)


def auth_check_json(authenticated: bool) -> dict[str, Any]:
    """``GET /api/auth/check``. The gateway has no session login, only the token (the dashboard's
    "API key" mode), which is OpenFang's ``mode: "none"``: the dashboard then probes ``/api/tools``."""
    return {"authenticated": authenticated, "mode": "none"}


TEMPLATES_JSON: dict[str, Any] = {"templates": [], "total": 0}


def usage_summary_json(sessions: Iterable[m.SessionInfo]) -> dict[str, Any]:
    """``GET /api/usage/summary``: the tokens of every session since the gateway loaded it. The
    gateway prices nothing and does not count model or tool calls per session: those are 0."""
    total = sum((info.usage for info in sessions), m.Usage())
    return {
        "total_input_tokens": total.input_tokens, "total_output_tokens": total.output_tokens,
        "total_cost_usd": 0.0, "call_count": 0, "total_tool_calls": 0,
    }


def usage_by_model_json(sessions: Iterable[m.SessionInfo]) -> dict[str, Any]:
    """``GET /api/usage/by-model``: the sessions' tokens grouped by the model each one uses now."""
    totals: dict[str, m.Usage] = {}
    for info in sessions:
        if info.usage.total_tokens:
            totals[info.model] = totals.get(info.model, m.Usage()) + info.usage
    rows = [
        {"model": model, "total_cost_usd": 0.0, "total_input_tokens": usage.input_tokens, "total_output_tokens": usage.output_tokens, "call_count": 0}
        for model, usage in sorted(totals.items(), key=lambda item: -item[1].total_tokens)
    ]
    return {"models": rows}


def mcp_servers_json(configured: Iterable[Mapping[str, Any]], tools: Iterable[m.ToolInfo]) -> dict[str, Any]:
    """``GET /api/mcp/servers``: the ``[[tools.mcp]]`` servers (from the masked settings: an
    ``env`` value or header that holds a secret shows masked) and, as connected, those whose
    tools the kernel offers now (``NAME__TOOL``)."""
    servers = list(configured)
    offered: dict[str, list[dict[str, Any]]] = {}
    for tool in tools:
        prefix, sep, name = tool.name.partition("__")
        if sep:
            offered.setdefault(prefix, []).append({"name": name, "description": tool.description})
    configured_rows = []
    for server in servers:
        if server.get("url"):
            transport: dict[str, Any] = {"type": "http", "url": server["url"]}
        else:
            transport = {"type": "stdio", "command": server.get("command") or "", "args": list(server.get("args") or [])}
        configured_rows.append({
            "name": server["name"], "transport": transport,
            "timeout_secs": int(server.get("connect_timeout_s") or 0), "env": dict(server.get("env") or {}),
        })
    connected = [
        {"name": server["name"], "tools_count": len(offered[server["name"]]), "tools": offered[server["name"]], "connected": True}
        for server in servers
        if server["name"] in offered
    ]
    return {"configured": configured_rows, "connected": connected, "total_configured": len(configured_rows), "total_connected": len(connected)}


#: What the dashboard's other panels ask for, where the gateway has nothing to show — no
#: pricing (daily costs, budgets), no audit chain, no peer network, no A2A agents, no
#: channels, no skills — in OpenFang's shapes with empty lists and zeros, so the panels
#: load (a 404 leaves them broken and raises a toast). Path -> body.
NOTHING_TO_SHOW: dict[str, dict[str, Any]] = {
    "/api/usage/daily": {"days": [], "today_cost_usd": 0.0, "first_event_date": None},
    "/api/budget": {
        "hourly_spend": 0.0, "hourly_limit": 0.0, "hourly_pct": 0.0,
        "daily_spend": 0.0, "daily_limit": 0.0, "daily_pct": 0.0,
        "monthly_spend": 0.0, "monthly_limit": 0.0, "monthly_pct": 0.0,
        "alert_threshold": 0.0, "default_max_llm_tokens_per_hour": 0,
    },
    "/api/budget/agents": {"agents": [], "total": 0},
    "/api/audit/recent": {"entries": [], "total": 0, "tip_hash": ""},
    "/api/network/status": {"enabled": False, "node_id": "", "listen_address": "", "connected_peers": 0, "total_peers": 0},
    "/api/a2a/agents": {"agents": [], "total": 0},
    "/api/channels": {"channels": [], "total": 0, "configured_count": 0},
    "/api/skills": {"skills": [], "total": 0},
}
