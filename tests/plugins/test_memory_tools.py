"""Memory tools over the kernel's SQLite store: facts, persona, tasks; limits by category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel import model as m
from kernel.provider import FinishChunk, ToolCallChunk
from kernel.testing import ScriptedProvider, running_kernel, text_turn
from plugins.manager import load_plugins
from plugins.tools import memory
from plugins.tools.memory import MEMORY_TOOLS

pytestmark = pytest.mark.anyio


async def call(kernel, name: str, **arguments) -> m.ToolOutput:
    reply = await kernel.execute(m.ExecuteTool(session_id="s1", name=name, arguments=arguments))
    assert isinstance(reply, m.ToolOutput)
    return reply


async def ok(kernel, name: str, **arguments) -> dict:
    reply = await call(kernel, name, **arguments)
    assert not reply.is_error, reply.result
    return json.loads(reply.result)


def test_plugin_registers_every_tool_with_category_and_access() -> None:
    registry = load_plugins(("plugins.memory_plugin",), use_entry_points=False)
    assert not registry.problems
    assert set(registry.tools) == {t.name for t in MEMORY_TOOLS}
    kinds = {t.name: (t.category, t.access) for t in MEMORY_TOOLS}
    assert kinds == {
        "memory_commit": ("memory", "update"),
        "memory_recall": ("memory", "query"),
        "memory_purge": ("memory", "update"),
        "persona_update": ("persona", "update"),
        "persona_get": ("persona", "query"),
        "task_create": ("task", "update"),
        "task_query": ("task", "query"),
        "task_set_state": ("task", "update"),
    }
    for tool in MEMORY_TOOLS:
        assert tool.parameters["type"] == "object"
        assert set(tool.parameters["required"]) <= set(tool.parameters["properties"])


async def test_commit_then_recall_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with running_kernel(tools=MEMORY_TOOLS, db_path=db) as kernel:
        assert (await ok(kernel, "memory_commit", subject="用户", relation="名字是", object="小明"))["status"] == "committed"
        await ok(kernel, "memory_commit", subject="user", relation="likes", object="green tea")
        again = await ok(kernel, "memory_commit", subject="用户", relation="名字是", object="小明")
        assert again["status"] == "already_known"
    async with running_kernel(tools=MEMORY_TOOLS, db_path=db) as kernel:
        found = await ok(kernel, "memory_recall", query_intent="用户信息")
        assert [(f["subject"], f["object"]) for f in found["facts"]] == [("用户", "小明")]
        found = await ok(kernel, "memory_recall", query_intent="what does the user like to drink? tea")
        assert found["facts"][0]["object"] == "green tea"
        assert (await ok(kernel, "memory_recall", query_intent="zebra"))["count"] == 0


async def test_recall_without_fts5_falls_back_to_like(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "FTS_MODULE", "no_such_fts_module")
    async with running_kernel(tools=MEMORY_TOOLS, db_path=tmp_path / "m.db") as kernel:
        await ok(kernel, "memory_commit", subject="用户", relation="名字是", object="小明")
        await ok(kernel, "memory_commit", subject="user", relation="works at", object="ACME_corp")
        found = await ok(kernel, "memory_recall", query_intent="名字")
        assert [f["object"] for f in found["facts"]] == ["小明"]
        found = await ok(kernel, "memory_recall", query_intent="acme_corp")
        assert [f["object"] for f in found["facts"]] == ["ACME_corp"]
        assert (await ok(kernel, "memory_recall", query_intent="100%"))["count"] == 0
        # No FTS table was created, so the fallback really ran.
        tables = await kernel.store.call(lambda c: [r[0] for r in c.execute("SELECT name FROM sqlite_master")])
        assert "memory_facts_fts" not in tables


async def test_purge_by_id_by_filter_and_all(tmp_path: Path) -> None:
    async with running_kernel(tools=MEMORY_TOOLS, db_path=tmp_path / "m.db") as kernel:
        first = await ok(kernel, "memory_commit", subject="user", relation="likes", object="tea")
        await ok(kernel, "memory_commit", subject="user", relation="likes", object="coffee")
        await ok(kernel, "memory_commit", subject="user", relation="lives in", object="Paris")
        await ok(kernel, "memory_commit", subject="cat", relation="is named", object="Tom")
        assert (await ok(kernel, "memory_purge", fact_id=first["id"]))["count"] == 1
        assert [f["object"] for f in (await ok(kernel, "memory_recall", query_intent="likes"))["facts"]] == ["coffee"]
        assert (await ok(kernel, "memory_purge", subject="user"))["count"] == 2
        assert (await ok(kernel, "memory_recall", query_intent="user Paris coffee"))["count"] == 0
        assert (await ok(kernel, "memory_recall", query_intent="Tom"))["count"] == 1
        assert (await ok(kernel, "memory_purge", all=True))["count"] == 1
        assert (await ok(kernel, "memory_recall", query_intent="Tom"))["count"] == 0


async def test_persona_and_tasks(tmp_path: Path) -> None:
    async with running_kernel(tools=MEMORY_TOOLS, db_path=tmp_path / "m.db") as kernel:
        await ok(kernel, "persona_update", attribute="name", value="Aria")
        await ok(kernel, "persona_update", attribute="tone", value="warm")
        await ok(kernel, "persona_update", attribute="name", value="Aria II")
        assert (await ok(kernel, "persona_get"))["persona"] == {"name": "Aria II", "tone": "warm"}
        assert (await ok(kernel, "persona_get", attribute="tone"))["persona"] == {"tone": "warm"}
        assert (await ok(kernel, "persona_update", attribute="tone", value=""))["status"] == "removed"
        assert (await ok(kernel, "persona_get"))["persona"] == {"name": "Aria II"}

        a = (await ok(kernel, "task_create", title="Book flights", details="to Paris"))["task"]
        await ok(kernel, "task_create", title="Pack", state="in_progress")
        assert a["state"] == "pending"
        done = await ok(kernel, "task_set_state", task_id=a["id"], state="done")
        assert done["task"]["state"] == "done"
        assert [t["title"] for t in (await ok(kernel, "task_query", state="done"))["tasks"]] == ["Book flights"]
        assert [t["title"] for t in (await ok(kernel, "task_query", query="paris"))["tasks"]] == ["Book flights"]
        assert (await ok(kernel, "task_query"))["count"] == 2


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("memory_commit", {"subject": "user", "relation": "likes"}, "missing required field `object`"),
        ("memory_commit", {"subject": "user", "relation": "likes", "object": 3}, "Expected `str`, got `int`"),
        ("memory_commit", {"subject": " ", "relation": "likes", "object": "tea"}, "'subject' must not be empty"),
        ("memory_recall", {"query": "tea"}, "unknown field `query`"),
        ("memory_recall", {"query_intent": "tea", "limit": 0}, "'limit' must be between 1 and 100"),
        ("memory_recall", {"query_intent": "?!"}, "no searchable words"),
        ("memory_purge", {}, "give 'fact_id'"),
        ("task_set_state", {"task_id": 1, "state": "finished"}, "Invalid enum value 'finished' - at `$.state`; state is one of pending, in_progress, done, cancelled"),
        ("task_set_state", {"task_id": 999, "state": "done"}, "no task with id 999"),
        ("persona_update", {"attribute": "name"}, "missing required field `value`"),
    ],
)
async def test_bad_arguments_give_a_clear_tool_error(tmp_path: Path, name: str, arguments: dict, expected: str) -> None:
    async with running_kernel(tools=MEMORY_TOOLS, db_path=tmp_path / "m.db") as kernel:
        reply = await call(kernel, name, **arguments)
        assert reply.is_error
        assert reply.result.startswith("tool error: ")
        assert name in reply.result
        assert expected in reply.result


def _calls(*names: str) -> list:
    chunks: list = [ToolCallChunk(index=i, id=f"c{i}", name=n, arguments="{}") for i, n in enumerate(names)]
    return [*chunks, FinishChunk("tool_calls")]


async def test_model_calls_are_limited_per_run_by_category(tmp_path: Path) -> None:
    provider = ScriptedProvider([_calls("persona_get", "persona_get", "task_query"), text_turn("done")])
    async with running_kernel(provider, tools=MEMORY_TOOLS, db_path=tmp_path / "m.db") as kernel:
        await kernel.session("s1")
        sub = await kernel.subscribe("s1")
        await kernel.execute(m.Prompt(session_id="s1", text="go"))
        async with sub:
            async for event in sub:
                if isinstance(event, m.RunFinished):
                    break
        assert event.rejected_tools == (("persona_get", "tool call rejected: persona query limit reached (1 per run)"),)
        tool_messages = [msg for msg in provider.requests[1].messages if msg.role == "tool"]
        assert [json.loads(t.content) if not t.content.startswith("tool") else t.content for t in tool_messages] == [
            {"persona": {}},
            "tool call rejected: persona query limit reached (1 per run)",
            {"tasks": [], "count": 0},
        ]
