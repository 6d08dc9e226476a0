"""Memory tools over the kernel's SQLite store: facts, a persona and tasks.

The Packet dialect's assistant keeps three kinds of memory, each with its own
per-run limits (category x access, enforced by the kernel's ``ToolLimiter``):

* ``memory`` — facts as (subject, relation, object) triples: ``memory_commit``,
  ``memory_recall`` (full-text search, SQLite FTS5; a LIKE scan where FTS5 is not
  compiled in), ``memory_purge``.
* ``persona`` — attribute/value pairs describing the assistant's persona:
  ``persona_update``, ``persona_get``.
* ``task`` — a small working-memory chain of tasks with a state:
  ``task_create``, ``task_query``, ``task_set_state``.

Everything lives in the kernel's own database (tables created on first use), so a
fact committed in one conversation is recalled in a later one, after a restart.
Memory is scoped to the agent (``ctx.agent_id``): the agent's sessions share it.
Results are JSON text: readable by a model, parseable by a UI calling
``execute_tool``. Bad arguments raise :class:`ToolFailure` with a clear message.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import msgspec

from kernel import Tool, ToolContext, ToolFailure

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)

# The FTS module name; a test swaps it for a missing one to exercise the LIKE fallback.
FTS_MODULE = "fts5"
TASK_STATES = ("pending", "in_progress", "done", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_facts (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    subject    TEXT NOT NULL,
    relation   TEXT NOT NULL,
    object     TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (agent_id, subject, relation, object)
);
CREATE TABLE IF NOT EXISTS memory_persona (
    agent_id   TEXT NOT NULL,
    attribute  TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (agent_id, attribute)
);
CREATE TABLE IF NOT EXISTS memory_tasks (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    title      TEXT NOT NULL,
    details    TEXT NOT NULL DEFAULT '',
    state      TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
"""

# CJK characters are not separated by spaces, so each becomes its own search token.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_CHAR = re.compile(f"([{_CJK}])")
_TERM = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")
_encode = msgspec.json.Encoder().encode


def _json(data: Any) -> str:
    return _encode(data).decode()


# ---------------------------------------------------------------- arguments


class _Args(msgspec.Struct, forbid_unknown_fields=True):
    pass


class CommitArgs(_Args):
    subject: str
    relation: str
    object: str


class RecallArgs(_Args):
    query_intent: str
    limit: int = 10


class PurgeArgs(_Args):
    fact_id: int | None = None
    subject: str | None = None
    relation: str | None = None
    object: str | None = None
    all: bool = False


class PersonaUpdateArgs(_Args):
    attribute: str
    value: str


class PersonaGetArgs(_Args):
    attribute: str | None = None


class TaskCreateArgs(_Args):
    title: str
    details: str = ""
    state: Literal["pending", "in_progress", "done", "cancelled"] = "pending"


class TaskQueryArgs(_Args):
    state: Literal["pending", "in_progress", "done", "cancelled"] | None = None
    query: str | None = None
    limit: int = 20


class TaskSetStateArgs(_Args):
    task_id: int
    state: Literal["pending", "in_progress", "done", "cancelled"]


def _parse(tool: str, args: dict[str, Any], shape: type[S]) -> S:
    """Typed arguments or a ToolFailure that names the tool and the problem."""
    try:
        parsed = msgspec.convert(args, shape)
    except msgspec.ValidationError as exc:
        fields = ", ".join(shape.__struct_fields__)
        hint = f"; state is one of {', '.join(TASK_STATES)}" if "$.state" in str(exc) else ""
        raise ToolFailure(f"invalid arguments for {tool}: {exc}{hint} (expected fields: {fields})") from None
    for name in shape.__struct_fields__:
        value = getattr(parsed, name)
        if isinstance(value, str) and not value.strip() and name not in ("details", "value"):
            raise ToolFailure(f"invalid arguments for {tool}: {name!r} must not be empty")
    return parsed


def _bounded(tool: str, name: str, value: int, high: int) -> int:
    if not 1 <= value <= high:
        raise ToolFailure(f"invalid arguments for {tool}: {name!r} must be between 1 and {high} (got {value})")
    return value


# ---------------------------------------------------------------- storage


def _ensure_schema(conn: sqlite3.Connection) -> bool:
    """Create the tables if needed; True when the full-text index is available."""
    conn.executescript(_SCHEMA)
    try:
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS memory_facts_fts USING {FTS_MODULE}(subject, relation, object)"
        )
        return True
    except sqlite3.OperationalError:
        return False


async def _run(ctx: ToolContext, fn: Callable[[sqlite3.Connection, bool], T]) -> T:
    """Run ``fn(conn, fts)`` in one transaction on the store's connection thread."""
    call = getattr(ctx.store, "call", None)
    if call is None:
        raise ToolFailure("memory tools need the kernel's SQLite store, which this kernel does not use")

    def transaction(conn: sqlite3.Connection) -> T:
        fts = _ensure_schema(conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn, fts)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    return await call(transaction)


def _searchable(text: str) -> str:
    """Text as the index sees it: CJK characters split apart so each is a token."""
    return _CJK_CHAR.sub(r" \1 ", text)


def _terms(query: str) -> list[str]:
    return list(dict.fromkeys(t.lower() for t in _TERM.findall(query)))


def _fts_query(terms: list[str]) -> str:
    """Any term may match (bm25 ranks facts matching more of them first); Latin words as prefixes."""
    quoted = []
    for term in terms:
        phrase = '"' + term.replace('"', '""') + '"'
        quoted.append(phrase if _CJK_CHAR.fullmatch(term) else phrase + "*")
    return " OR ".join(quoted)


def _fact(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"id": row[0], "subject": row[1], "relation": row[2], "object": row[3]}


# ---------------------------------------------------------------- memory (facts)


async def memory_commit(args: dict[str, Any], ctx: ToolContext) -> str:
    a = _parse("memory_commit", args, CommitArgs)
    triple = (a.subject.strip(), a.relation.strip(), a.object.strip())

    def run(conn: sqlite3.Connection, fts: bool) -> str:
        row = conn.execute(
            "SELECT id FROM memory_facts WHERE agent_id=? AND subject=? AND relation=? AND object=?",
            (ctx.agent_id, *triple),
        ).fetchone()
        if row is not None:
            return _json({"status": "already_known", "id": row[0]})
        cur = conn.execute(
            "INSERT INTO memory_facts(agent_id, subject, relation, object, created_at) VALUES (?,?,?,?,?)",
            (ctx.agent_id, *triple, time.time()),
        )
        if fts:
            conn.execute(
                "INSERT INTO memory_facts_fts(rowid, subject, relation, object) VALUES (?,?,?,?)",
                (cur.lastrowid, *(_searchable(t) for t in triple)),
            )
        return _json({"status": "committed", "id": cur.lastrowid})

    return await _run(ctx, run)


async def memory_recall(args: dict[str, Any], ctx: ToolContext) -> str:
    a = _parse("memory_recall", args, RecallArgs)
    limit = _bounded("memory_recall", "limit", a.limit, 100)
    terms = _terms(a.query_intent)
    if not terms:
        raise ToolFailure("invalid arguments for memory_recall: 'query_intent' has no searchable words")

    def run(conn: sqlite3.Connection, fts: bool) -> str:
        if fts:
            rows = conn.execute(
                "SELECT f.id, f.subject, f.relation, f.object FROM memory_facts_fts"
                " JOIN memory_facts f ON f.id = memory_facts_fts.rowid"
                " WHERE memory_facts_fts MATCH ? AND f.agent_id = ?"
                " ORDER BY bm25(memory_facts_fts), f.id DESC LIMIT ?",
                (_fts_query(terms), ctx.agent_id, limit),
            ).fetchall()
        else:
            hay = "lower(subject || ' ' || relation || ' ' || object)"
            score = " + ".join(f"({hay} LIKE ? ESCAPE '\\')" for _ in terms)
            patterns = ["%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for t in terms]
            rows = conn.execute(
                f"SELECT id, subject, relation, object FROM (SELECT *, ({score}) AS score FROM memory_facts"
                " WHERE agent_id = ?) WHERE score > 0 ORDER BY score DESC, id DESC LIMIT ?",
                (*patterns, ctx.agent_id, limit),
            ).fetchall()
        facts = [_fact(r) for r in rows]
        return _json({"facts": facts, "count": len(facts)})

    return await _run(ctx, run)


async def memory_purge(args: dict[str, Any], ctx: ToolContext) -> str:
    a = _parse("memory_purge", args, PurgeArgs)
    filters = {k: v.strip() for k, v in (("subject", a.subject), ("relation", a.relation), ("object", a.object)) if v is not None}
    if a.fact_id is None and not filters and not a.all:
        raise ToolFailure("invalid arguments for memory_purge: give 'fact_id', or any of 'subject'/'relation'/'object', or 'all': true")
    where = ["agent_id = ?"]
    params: list[Any] = [ctx.agent_id]
    if a.fact_id is not None:
        where.append("id = ?")
        params.append(a.fact_id)
    for column, value in filters.items():
        where.append(f"{column} = ?")
        params.append(value)

    def run(conn: sqlite3.Connection, fts: bool) -> str:
        ids = [r[0] for r in conn.execute(f"SELECT id FROM memory_facts WHERE {' AND '.join(where)}", params)]
        conn.executemany("DELETE FROM memory_facts WHERE id = ?", [(i,) for i in ids])
        if fts:
            conn.executemany("DELETE FROM memory_facts_fts WHERE rowid = ?", [(i,) for i in ids])
        return _json({"status": "purged", "count": len(ids)})

    return await _run(ctx, run)


# ---------------------------------------------------------------- persona


async def persona_update(args: dict[str, Any], ctx: ToolContext) -> str:
    a = _parse("persona_update", args, PersonaUpdateArgs)
    attribute, value = a.attribute.strip(), a.value.strip()

    def run(conn: sqlite3.Connection, fts: bool) -> str:
        if not value:
            cur = conn.execute("DELETE FROM memory_persona WHERE agent_id=? AND attribute=?", (ctx.agent_id, attribute))
            return _json({"status": "removed" if cur.rowcount else "absent", "attribute": attribute})
        conn.execute(
            "INSERT INTO memory_persona(agent_id, attribute, value, updated_at) VALUES (?,?,?,?)"
            " ON CONFLICT(agent_id, attribute) DO UPDATE SET value=excluded.value, updated_at=excluded.updated_at",
            (ctx.agent_id, attribute, value, time.time()),
        )
        return _json({"status": "updated", "attribute": attribute, "value": value})

    return await _run(ctx, run)


async def persona_get(args: dict[str, Any], ctx: ToolContext) -> str:
    a = _parse("persona_get", args, PersonaGetArgs)

    def run(conn: sqlite3.Connection, fts: bool) -> str:
        sql = "SELECT attribute, value FROM memory_persona WHERE agent_id=?"
        params: tuple[Any, ...] = (ctx.agent_id,)
        if a.attribute is not None:
            sql, params = sql + " AND attribute=?", (*params, a.attribute.strip())
        rows = conn.execute(sql + " ORDER BY attribute", params).fetchall()
        return _json({"persona": {r[0]: r[1] for r in rows}})

    return await _run(ctx, run)


# ---------------------------------------------------------------- tasks


def _task(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"id": row[0], "title": row[1], "details": row[2], "state": row[3]}


async def task_create(args: dict[str, Any], ctx: ToolContext) -> str:
    a = _parse("task_create", args, TaskCreateArgs)

    def run(conn: sqlite3.Connection, fts: bool) -> str:
        now = time.time()
        cur = conn.execute(
            "INSERT INTO memory_tasks(agent_id, title, details, state, created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (ctx.agent_id, a.title.strip(), a.details.strip(), a.state, now, now),
        )
        return _json({"status": "created", "task": _task((cur.lastrowid, a.title.strip(), a.details.strip(), a.state))})

    return await _run(ctx, run)


async def task_query(args: dict[str, Any], ctx: ToolContext) -> str:
    a = _parse("task_query", args, TaskQueryArgs)
    limit = _bounded("task_query", "limit", a.limit, 200)
    where, params = ["agent_id = ?"], [ctx.agent_id]
    if a.state is not None:
        where.append("state = ?")
        params.append(a.state)
    if a.query:
        where.append("lower(title || ' ' || details) LIKE ? ESCAPE '\\'")
        params.append("%" + a.query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")

    def run(conn: sqlite3.Connection, fts: bool) -> str:
        rows = conn.execute(
            f"SELECT id, title, details, state FROM memory_tasks WHERE {' AND '.join(where)} ORDER BY id LIMIT ?",
            (*params, limit),
        ).fetchall()
        return _json({"tasks": [_task(r) for r in rows], "count": len(rows)})

    return await _run(ctx, run)


async def task_set_state(args: dict[str, Any], ctx: ToolContext) -> str:
    a = _parse("task_set_state", args, TaskSetStateArgs)

    def run(conn: sqlite3.Connection, fts: bool) -> str:
        cur = conn.execute(
            "UPDATE memory_tasks SET state=?, updated_at=? WHERE id=? AND agent_id=?",
            (a.state, time.time(), a.task_id, ctx.agent_id),
        )
        if not cur.rowcount:
            raise ToolFailure(f"task_set_state: no task with id {a.task_id}")
        row = conn.execute("SELECT id, title, details, state FROM memory_tasks WHERE id=?", (a.task_id,)).fetchone()
        return _json({"status": "updated", "task": _task(row)})

    return await _run(ctx, run)


# ---------------------------------------------------------------- declarations


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_STR = {"type": "string", "minLength": 1}
_STATE = {"type": "string", "enum": list(TASK_STATES)}

MEMORY_TOOLS = (
    Tool(
        name="memory_commit",
        description="Remember a fact as a (subject, relation, object) triple, e.g. (user, name is, Xiaoming).",
        parameters=_schema({"subject": _STR, "relation": _STR, "object": _STR}, ["subject", "relation", "object"]),
        handler=memory_commit,
        category="memory",
        access="update",
    ),
    Tool(
        name="memory_recall",
        description="Search remembered facts by what you want to know (words in any language); best matches first.",
        parameters=_schema(
            {
                "query_intent": {**_STR, "description": "what you want to recall, e.g. 'user name'"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            },
            ["query_intent"],
        ),
        handler=memory_recall,
        category="memory",
        access="query",
    ),
    Tool(
        name="memory_purge",
        description="Forget facts: one by 'fact_id', those matching subject/relation/object exactly, or 'all'.",
        parameters=_schema(
            {"fact_id": {"type": "integer"}, "subject": _STR, "relation": _STR, "object": _STR, "all": {"type": "boolean"}},
            [],
        ),
        handler=memory_purge,
        category="memory",
        access="update",
    ),
    Tool(
        name="persona_update",
        description="Set an attribute of your persona (name, tone, role...); an empty value removes it.",
        parameters=_schema({"attribute": _STR, "value": {"type": "string"}}, ["attribute", "value"]),
        handler=persona_update,
        category="persona",
        access="update",
    ),
    Tool(
        name="persona_get",
        description="Read your persona: every attribute, or one by name.",
        parameters=_schema({"attribute": _STR}, []),
        handler=persona_get,
        category="persona",
        access="query",
    ),
    Tool(
        name="task_create",
        description="Add a task to your working memory (state pending unless given).",
        parameters=_schema({"title": _STR, "details": {"type": "string"}, "state": _STATE}, ["title"]),
        handler=task_create,
        category="task",
        access="update",
    ),
    Tool(
        name="task_query",
        description="List tasks in your working memory, optionally by state or by words in title/details.",
        parameters=_schema(
            {"state": _STATE, "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 200}},
            [],
        ),
        handler=task_query,
        category="task",
        access="query",
    ),
    Tool(
        name="task_set_state",
        description="Change a task's state: pending, in_progress, done or cancelled.",
        parameters=_schema({"task_id": {"type": "integer"}, "state": _STATE}, ["task_id", "state"]),
        handler=task_set_state,
        category="task",
        access="update",
    ),
)
