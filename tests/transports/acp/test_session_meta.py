"""Config options, session list pages and their cursors: pure, on plain values, and fuzzed."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import model as m
from transports.acp import session_meta as meta
from transports.acp.jsonrpc import RpcFailure
from transports.acp.wire import SetConfigOptionParams

from ._client import REPO


def wire(value: Any) -> Any:
    return json.loads(msgspec.json.encode(value))


def settings_of(**changes: Any) -> meta.SessionSettings:
    values: dict[str, Any] = {"mode": "default", "model": "gpt-small", "models": ("gpt-small", "gpt-large"), "max_turns": 0}
    values.update(changes)
    return meta.SessionSettings(**values)


def test_the_options_are_mode_model_and_turn_limit() -> None:
    mode, model, turns = wire(meta.config_options(settings_of()))
    assert mode["id"] == "mode" and mode["category"] == "mode" and mode["type"] == "select" and mode["currentValue"] == "default"
    assert [o["value"] for o in mode["options"]] == ["default", "ask"]
    assert model == {
        "type": "select",
        "id": "model",
        "name": "Model",
        "currentValue": "gpt-small",
        "options": [{"value": "gpt-small", "name": "gpt-small"}, {"value": "gpt-large", "name": "gpt-large"}],
        "category": "model",
    }
    assert turns["id"] == "max_turns" and "category" not in turns and turns["currentValue"] == "0"
    assert [o["value"] for o in turns["options"]] == ["0", "5", "10", "25", "50", "100"] and turns["options"][0]["name"] == "No limit"


def test_the_sessions_own_model_and_limit_are_always_offered() -> None:
    _, model, turns = wire(meta.config_options(settings_of(model="my-finetune", models=(), max_turns=7)))
    assert [o["value"] for o in model["options"]] == ["my-finetune"]
    assert "7" in [o["value"] for o in turns["options"]] and turns["currentValue"] == "7"


def test_a_choice_must_be_an_offered_value() -> None:
    options = meta.config_options(settings_of())
    choose = lambda **kw: meta.config_choice(SetConfigOptionParams(session_id="S", **kw), options)
    assert choose(config_id="model", value="gpt-large") == ("model", "gpt-large")
    assert choose(config_id="max_turns", value="25") == ("max_turns", "25")
    assert choose(config_id="mode", value="ask") == ("mode", "ask")
    for bad, words in (
        (dict(config_id="temperature", value="1"), "Unknown config option"),
        (dict(config_id="model", value="gpt-huge"), "one of: gpt-small, gpt-large"),
        (dict(config_id="model", value=True, type="boolean"), "not a boolean"),
        (dict(config_id="max_turns", value="3"), "Invalid value"),
    ):
        with pytest.raises(RpcFailure) as failure:
            choose(**bad)
        assert failure.value.error.code == -32602 and words in failure.value.error.message


def session(sid: str, updated: float, title: str | None = None) -> m.SessionInfo:
    return m.SessionInfo(session_id=sid, agent_id="a", title=title, created_at=1.0, updated_at=updated)


def test_pages_are_newest_first_and_cursors_continue_where_they_stopped() -> None:
    sessions = [session(f"s{i}", 1000.0 + i, title=f"t{i}") for i in range(7)]
    page = lambda cursor=None, **kw: meta.session_page(sessions, cwd=None, cursor=cursor, known_cwds={}, default_cwd="/ws", page_size=3, **kw)
    first = page()
    assert [s.session_id for s in first.sessions] == ["s6", "s5", "s4"] and first.next_cursor is not None
    assert wire(first.sessions[0]) == {"sessionId": "s6", "cwd": "/ws", "title": "t6", "updatedAt": "1970-01-01T00:16:46.000Z"}
    # A session active between two pages moves to the front; what is still to come is unchanged.
    sessions[0] = session("s0", 5000.0)
    second = page(first.next_cursor)
    assert [s.session_id for s in second.sessions] == ["s3", "s2", "s1"]
    assert second.next_cursor is None and "nextCursor" not in wire(second)
    assert [s.session_id for s in page().sessions] == ["s0", "s6", "s5"]


def test_known_working_directories_filter_and_the_rest_are_listed_everywhere() -> None:
    sessions = [session("mine", 3.0), session("elsewhere", 2.0), session("from-openfang", 1.0)]
    known = {"mine": "/p", "elsewhere": "/q"}
    listed = meta.session_page(sessions, cwd="/p", cursor=None, known_cwds=known, default_cwd="/ws", page_size=10)
    assert [(s.session_id, s.cwd) for s in listed.sessions] == [("mine", "/p"), ("from-openfang", "/p")]
    unfiltered = meta.session_page(sessions, cwd=None, cursor=None, known_cwds=known, default_cwd="/ws", page_size=10)
    assert [s.cwd for s in unfiltered.sessions] == ["/p", "/q", "/ws"]


@pytest.mark.parametrize("cursor", ["", "!!!", "bm90IGpzb24=", "WzEsMl0=", "é", "W10="])
def test_a_cursor_not_from_session_list_is_invalid_params(cursor: str) -> None:
    with pytest.raises(RpcFailure) as failure:
        meta.session_page([session("s", 1.0)], cwd=None, cursor=cursor, known_cwds={}, default_cwd="/", page_size=2)
    assert failure.value.error.code == -32602 and "cursor" in failure.value.error.message


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=20), st.one_of(st.text(max_size=10), st.booleans()), st.sampled_from([None, "boolean", "x"]))
def test_fuzz_cursors_and_choices_answer_or_refuse(cursor: str, config_id: str, value: str | bool, kind: str | None) -> None:
    try:
        meta.session_page([session("s", 1.0)], cwd=None, cursor=cursor, known_cwds={}, default_cwd="/", page_size=1)
    except RpcFailure as failure:
        assert failure.error.code == -32602
    try:
        option, chosen = meta.config_choice(SetConfigOptionParams(session_id="S", config_id=config_id, value=value, type=kind), meta.config_options(settings_of()))
        assert option in ("mode", "model", "max_turns") and isinstance(chosen, str)
    except RpcFailure as failure:
        assert failure.error.code == -32602


@pytest.mark.parametrize("module", ["transports.acp.jsonrpc", "transports.acp.session_meta"])
def test_the_other_pure_modules_load_no_server(module: str) -> None:
    code = f"import sys, {module}; print(sorted({{'anyio', 'trio', 'hypercorn'}} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
