"""The shapes of OpenFang 0.6's comms, logs, scheduler and workflow pages, from the gateway's facts.

OpenFang's dashboard (``static/js/pages/comms.js``, ``logs.js``, ``scheduler.js``,
``workflows.js``) reads these fields; ``routes.rs`` (``comms_topology``, ``comms_events``,
``logs_stream``, ``list_cron_jobs``, ``list_workflows``) builds them. Here:

* **comms** — the sessions' cross-dialect activity: which transport asked which agent, from the
  kernel's record of the last runs (:class:`kernel.RunRecord`). Transports are nodes beside the
  agents, a transport that ran an agent is a ``peer`` edge to it, and each run is an
  ``agent_message`` event from the transport to the agent, its tokens in the detail as
  OpenFang's audit-derived events have them.
* **logs** — the gateway's own log records (:func:`kernel.log_fields`) as OpenFang's audit
  entries: the level is the ``action`` (the page classifies it by name), ``logger: msg`` the
  ``detail``.
* **cron jobs** and **workflows** — the gateway has neither: OpenFang's empty shapes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kernel import RunRecord, iso_ts
from kernel import model as m

EMPTY_CRON_JOBS: dict[str, Any] = {"jobs": [], "total": 0}
EMPTY_WORKFLOWS: list[Any] = []

#: How the logs page names levels (its ``classifyLevel`` looks for "error" and "warn").
_ACTIONS = {"DEBUG": "Debug", "INFO": "Info", "WARNING": "Warning", "ERROR": "Error", "CRITICAL": "CriticalError"}
_OUTCOMES = {"completed": "ok", "interrupted": "interrupted", "limit": "limit reached"}


def transport_node_id(transport: str) -> str:
    return f"transport:{transport}"


def topology_json(agents: Iterable[m.AgentInfo], runs: Iterable[RunRecord]) -> dict[str, Any]:
    """``{nodes: [{id, name, state, model}], edges: [{from, to, kind}]}``: the agents, the
    transports that ran them, one ``peer`` edge per (transport, agent) pair."""
    nodes = [{"id": a.id, "name": a.name, "state": "Running", "model": a.model} for a in agents]
    known = {a.id for a in agents}
    pairs = sorted({(run.transport, run.agent) for run in runs if run.agent in known})
    for transport in sorted({transport for transport, _ in pairs}):
        nodes.append({"id": transport_node_id(transport), "name": transport, "state": "Running", "model": ""})
    edges = [{"from": transport_node_id(transport), "to": agent, "kind": "peer"} for transport, agent in pairs]
    return {"nodes": nodes, "edges": edges}


def comms_event_json(run: RunRecord, names: dict[str, str]) -> dict[str, Any]:
    """One run as OpenFang's ``CommsEvent``: an ``agent_message`` from the transport to the agent."""
    detail = f"{run.input_tokens} in / {run.output_tokens} out tokens"
    outcome = run.error_code or _OUTCOMES.get(run.outcome, run.outcome)
    if outcome != "ok":
        detail += f" — {outcome}"
    return {
        "id": f"run-{run.seq}",  # unique, and names nobody's run
        "timestamp": iso_ts(run.ended_at),
        "kind": "agent_message",
        "source_id": transport_node_id(run.transport),
        "source_name": run.transport,
        "target_id": run.agent,
        "target_name": names.get(run.agent, run.agent),
        "detail": detail,
    }


def comms_events_json(runs: Iterable[RunRecord], names: dict[str, str], limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` runs first, as ``CommsEvent`` s."""
    return [comms_event_json(run, names) for run in sorted(runs, key=lambda r: r.seq, reverse=True)[:limit]]


def events_limit(raw: str | None, default: int = 100, most: int = 500) -> int:
    """``?limit=``: OpenFang's default 100, at most 500; anything unparsable is the default."""
    try:
        return max(0, min(int(raw), most)) if raw is not None else default
    except ValueError:
        return default


def log_entry_json(entry: dict[str, Any]) -> dict[str, Any]:
    """A gateway log entry as an OpenFang audit entry: ``{seq, timestamp, agent_id, action, detail, outcome, hash}``."""
    level = str(entry.get("level", "INFO"))
    return {
        "seq": entry["seq"],
        "timestamp": entry.get("ts", ""),
        "agent_id": entry.get("agent", ""),
        "action": _ACTIONS.get(level, level.title()),
        "detail": f"{entry.get('logger', '')}: {entry.get('msg', '')}",
        "outcome": "ok" if level in ("DEBUG", "INFO") else level.lower(),
        "hash": "",
    }


def log_level_class(action: str) -> str:
    """The logs page's ``classifyLevel`` (and ``routes.rs``'s ``classify_audit_level``)."""
    a = action.lower()
    if "error" in a or "fail" in a or "crash" in a or "denied" in a:
        return "error"
    if "warn" in a or "block" in a or "kill" in a:
        return "warn"
    return "info"


def log_entry_wanted(entry: dict[str, Any], level: str, text: str) -> bool:
    """``?level=`` (info | warn | error) and ``?filter=`` (a substring of action, detail, agent)."""
    if level and log_level_class(entry["action"]) != level:
        return False
    if text:
        return text.lower() in f"{entry['action']} {entry['detail']} {entry['agent_id']}".lower()
    return True
