"""Keys, ownership, scopes and limits in the kernel (kernel/keys.py, kernel/access.py).

Two keys and the admin on one kernel: each key sees and acts on its own sessions only, and a
refusal on another's session is the very error a missing session gets; scopes and agents are
enforced per command; limits refuse a run before the provider is called; a revoked key is
refused at its next command. A hypothesis property test walks the authorization table.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import Kernel, KernelError
from kernel import model as m
from kernel.access import CREATING, SCOPE_OF, LocalWindows, authorize
from kernel.keys import SCOPES
from kernel.settings import AgentSettings, AuthSettings, ConfigKeySettings, Settings
from kernel.testing import ScriptedProvider, running_kernel
from tests.kernel.helpers import run_events

pytestmark = pytest.mark.anyio


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def caller_of(principal: m.Principal) -> m.Caller:
    return m.Caller(principal=principal, transport="test")


async def two_keys(kernel: Kernel, **limits: Any) -> tuple[m.Caller, m.Caller, str, str]:
    alice, alice_secret = await kernel.keys.create("alice", **limits)
    bob, bob_secret = await kernel.keys.create("bob")
    return caller_of(alice.principal()), caller_of(bob.principal()), alice_secret, bob_secret


async def refusal(kernel: Kernel, command: m.Command, caller: m.Caller) -> m.ErrorInfo:
    with pytest.raises(KernelError) as caught:
        await kernel.execute(command, caller)
    return caught.value.info()


async def test_a_key_is_stored_hashed_and_resolves_to_its_principal(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    async with running_kernel(db_path=db) as kernel:
        record, secret = await kernel.keys.create("alice", scopes=["read,prompt"], agents=["general-assistant"], rpm=5)
        assert secret.startswith("gw-") and len(secret) >= 40
        principal = await kernel.authenticate(secret)
        assert principal == m.Principal(name="alice", scopes=("read", "prompt"), agents=("general-assistant",))
        assert await kernel.authenticate(secret + "x") is None
        assert await kernel.authenticate("") is None
        assert await kernel.keys_required()
        views = await kernel.keys.views()
        assert [v.name for v in views] == ["alice"] and secret not in msgspec.json.encode(views).decode()
        with pytest.raises(KernelError, match="exists already"):
            await kernel.keys.create("alice")
        with pytest.raises(KernelError, match="reserved"):
            await kernel.keys.create("admin")
        with pytest.raises(KernelError, match="unknown scope"):
            await kernel.keys.create("carol", scopes=["root"])
    rows = sqlite3.connect(db).execute("SELECT * FROM api_keys").fetchall()
    assert rows and secret not in repr(rows) and record.secret_hash in repr(rows)


async def test_neither_key_sees_or_touches_the_others_sessions() -> None:
    async with running_kernel() as kernel:
        alice, bob, _, _ = await two_keys(kernel)
        mine = await kernel.execute(m.Prompt(session_id="alice-1", text="hi"), alice)
        assert isinstance(mine, m.Accepted)
        sub = await kernel.subscribe("alice-1", 0, caller=alice)
        await run_events(sub)  # type: ignore[arg-type]
        sub.close()
        # Bob: every command on Alice's session answers as for a session that does not exist.
        for make in (
            lambda sid: m.GetSession(session_id=sid),
            lambda sid: m.GetHistory(session_id=sid),
            lambda sid: m.Regenerate(session_id=sid),
            lambda sid: m.Interrupt(session_id=sid),
            lambda sid: m.DeleteSession(session_id=sid),
            lambda sid: m.ClearContext(session_id=sid),
            lambda sid: m.ResolveToolApproval(session_id=sid, call_id="c", approved=True),
            lambda sid: m.ConfigureSession(session_id=sid, max_turns=1),
        ):
            other = await refusal(kernel, make("alice-1"), bob)
            missing = await refusal(kernel, make("no-such-session"), bob)
            assert other.code == missing.code == "not_found"
            assert other.message.replace("alice-1", "X") == missing.message.replace("no-such-session", "X")
        with pytest.raises(KernelError) as followed:
            await kernel.subscribe("alice-1", caller=bob)
        with pytest.raises(KernelError) as absent:
            await kernel.subscribe("nope", caller=bob)
        assert followed.value.code == absent.value.code == "not_found"
        # Lists: one's own only; the admin sees all, with the owner.
        await kernel.execute(m.OpenSession(session_id="bob-1"), bob)
        listed = await kernel.execute(m.ListSessions(), bob)
        assert isinstance(listed, m.SessionList) and [s.session_id for s in listed.sessions] == ["bob-1"]
        everything = await kernel.execute(m.ListSessions())
        assert isinstance(everything, m.SessionList)
        assert {(s.session_id, s.owner) for s in everything.sessions} == {("alice-1", "alice"), ("bob-1", "bob")}
        # The status counts one's own live sessions only.
        status = await kernel.execute(m.GetStatus(), bob)
        assert isinstance(status, m.StatusReport) and status.sessions == 1 and status.active_runs == 0
        assert (await kernel.execute(m.GetStatus())).sessions == 2
        # Alice's session is whole: Bob's delete did nothing.
        history = await kernel.execute(m.GetHistory(session_id="alice-1"), alice)
        assert isinstance(history, m.HistoryView) and [x.role for x in history.messages] == ["user", "assistant"]


async def test_ownership_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    async with running_kernel(db_path=db) as kernel:
        alice, bob, alice_secret, _ = await two_keys(kernel)
        await kernel.execute(m.OpenSession(session_id="s1"), alice)
    async with running_kernel(db_path=db) as kernel:
        principal = await kernel.authenticate(alice_secret)
        assert principal is not None
        opened = await kernel.execute(m.GetSession(session_id="s1"), caller_of(principal))
        assert isinstance(opened, m.SessionOpened) and opened.session.owner == "alice"
        assert (await refusal(kernel, m.GetSession(session_id="s1"), bob)).code == "not_found"


async def test_scopes_and_agents_are_enforced_per_command() -> None:
    settings = Settings(agents=[AgentSettings(name="General Assistant"), AgentSettings(name="Coder", id="coder")])
    async with running_kernel(settings=settings) as kernel:
        reader_record, _ = await kernel.keys.create("reader", scopes=["read"])
        coder_record, _ = await kernel.keys.create("coder-only", agents=["coder"])
        reader, coder = caller_of(reader_record.principal()), caller_of(coder_record.principal())
        assert (await refusal(kernel, m.Prompt(session_id="r1", text="hi"), reader)).code == "forbidden"
        assert (await refusal(kernel, m.OpenSession(session_id="r1"), reader)).code == "forbidden"  # creating needs prompt
        assert (await refusal(kernel, m.GetSettings(), reader)).code == "forbidden"
        assert (await refusal(kernel, m.UpdateSettings(changes={}), coder)).code == "forbidden"
        assert isinstance(await kernel.execute(m.ListAgents(), reader), m.AgentList)
        agents = await kernel.execute(m.ListAgents(), coder)
        assert isinstance(agents, m.AgentList) and [a.id for a in agents.agents] == ["coder"]
        assert (await refusal(kernel, m.Prompt(session_id="c1", text="hi"), coder)).code == "forbidden"  # the default agent
        accepted = await kernel.execute(m.Prompt(session_id="c1", agent_id="coder", text="hi"), coder)
        assert isinstance(accepted, m.Accepted)


async def test_limits_refuse_a_run_before_the_provider_and_lift() -> None:
    provider = ScriptedProvider()
    clock = Clock()
    async with running_kernel(provider=provider) as kernel:
        kernel.access.windows = LocalWindows(clock)
        limited, _ = await kernel.keys.create("limited", rpm=2)
        caller = caller_of(limited.principal())
        for n in range(2):
            accepted = await kernel.execute(m.Prompt(session_id="s", text=f"p{n}"), caller)
            assert isinstance(accepted, m.Accepted)
        error = await refusal(kernel, m.Prompt(session_id="s", text="p3"), caller)
        assert error.code == "rate_limited" and error.details is not None and error.details["retry_after_s"] == 60
        assert error.details["limit"] == "rpm"
        assert await kernel.wait_idle(5)
        assert len(provider.requests) == 2  # the refused run never reached the model
        clock.now += 30  # half the window: the wait left is half
        error = await refusal(kernel, m.Prompt(session_id="s", text="p3"), caller)
        assert error.details is not None and error.details["retry_after_s"] == 30
        # The window lifts once its minute has passed (a clock of the test's own).
        clock.now += 30.5
        assert isinstance(await kernel.execute(m.Prompt(session_id="s", text="p4"), caller), m.Accepted)
        assert await kernel.wait_idle(5)
        assert len(provider.requests) == 3


async def test_tokens_per_day_count_the_runs_usage() -> None:
    async with running_kernel() as kernel:
        record, _ = await kernel.keys.create("frugal", tokens_per_day=3)
        caller = caller_of(record.principal())
        accepted = await kernel.execute(m.Prompt(session_id="t", text="hello there"), caller)
        assert isinstance(accepted, m.Accepted)
        follow = await kernel.subscribe("t", 0, caller=caller)
        events = await run_events(follow)  # type: ignore[arg-type]
        follow.close()
        end = events[-1]
        assert isinstance(end, m.RunFinished) and end.usage.input_tokens + end.usage.output_tokens >= 3
        error = await refusal(kernel, m.Prompt(session_id="t", text="again"), caller)
        assert error.code == "rate_limited" and error.details is not None and error.details["limit"] == "tokens_per_day"
        with anyio.fail_after(5):
            while not (await kernel.store.get_key("frugal")).tokens_today:  # type: ignore[union-attr]
                await anyio.sleep(0.01)
        usage = {v.name: v for v in await kernel.keys.views()}["frugal"]
        assert usage.requests_today == 1 and usage.tokens_today == end.usage.input_tokens + end.usage.output_tokens


async def test_concurrent_runs_per_key() -> None:
    provider = ScriptedProvider(delay_s=0.05)
    async with running_kernel(provider=provider) as kernel:
        record, _ = await kernel.keys.create("one-at-a-time", concurrent=1)
        caller = caller_of(record.principal())
        assert isinstance(await kernel.execute(m.Prompt(session_id="a", text="x"), caller), m.Accepted)
        error = await refusal(kernel, m.Prompt(session_id="b", text="y"), caller)
        assert error.code == "rate_limited" and error.details is not None and error.details["limit"] == "concurrent"
        # The same session queues behind its own run: that is not a second concurrent run.
        assert isinstance(await kernel.execute(m.Prompt(session_id="a", text="z"), caller), m.Accepted)
        assert await kernel.wait_idle(5)
        assert isinstance(await kernel.execute(m.Prompt(session_id="b", text="y"), caller), m.Accepted)


async def test_a_revoked_key_is_refused_at_once_even_on_an_open_connection() -> None:
    async with running_kernel() as kernel:
        alice, _, secret, _ = await two_keys(kernel)
        await kernel.execute(m.OpenSession(session_id="s"), alice)
        await kernel.keys.revoke("alice")
        assert await kernel.authenticate(secret) is None
        # A connection resolved before the revocation holds the old principal: refused anyway.
        assert (await refusal(kernel, m.GetSession(session_id="s"), alice)).code == "unauthorized"
        with pytest.raises(KernelError, match="revoked"):
            await kernel.subscribe("s", caller=alice)
        with pytest.raises(KernelError, match="no live key"):
            await kernel.keys.revoke("alice")
        # The name can be given to a new key; the old secret stays dead.
        _, again = await kernel.keys.create("alice")
        assert await kernel.authenticate(again) is not None and await kernel.authenticate(secret) is None


async def test_configured_keys_read_their_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_KEY_CI", "gw-ci-secret-from-env-0123456789")
    settings = Settings(auth=AuthSettings(keys=[ConfigKeySettings(name="ci", secret_env="TEAM_KEY_CI", scopes=["read"])]))
    async with running_kernel(settings=settings) as kernel:
        principal = await kernel.authenticate("gw-ci-secret-from-env-0123456789")
        assert principal == m.Principal(name="ci", scopes=("read",))
        with pytest.raises(KernelError, match="configuration"):
            await kernel.keys.revoke("ci")
        assert [v.source for v in await kernel.keys.views()] == ["config"]
    monkeypatch.delenv("TEAM_KEY_CI")
    with pytest.raises(KernelError, match="TEAM_KEY_CI"):
        async with running_kernel(settings=settings):
            pass


# ---------------------------------------------------------------- the table, as a property


def _sample(kind: type) -> m.Command:
    fields = {"name": "x"} if kind in (m.RunCommand, m.ExecuteTool) else {}
    return kind(session_id="s", **fields)  # type: ignore[no-any-return]


COMMAND_TYPES = sorted(SCOPE_OF, key=lambda k: k.__name__)


@given(
    kind=st.sampled_from(COMMAND_TYPES),
    scopes=st.sets(st.sampled_from(SCOPES)),
    owner=st.sampled_from(["me", "other", None]),
)
def test_authorization_table(kind: type, scopes: set[m.Scope], owner: str | None) -> None:
    """Every command x every set of scopes x own / another's / no session."""
    principal = m.Principal(name="me", scopes=tuple(scopes))
    command = _sample(kind)
    try:
        authorize(principal, command, owner, None)
        allowed = True
    except KernelError as exc:
        allowed, code = False, exc.code
    if "admin" in scopes:
        assert allowed
        return
    if owner == "other" or (owner is None and not isinstance(command, CREATING)):
        assert not allowed and code == "not_found"  # never a hint that the session exists
        return
    needed = "prompt" if kind is m.OpenSession and owner is None else SCOPE_OF[kind]
    assert allowed == (needed in scopes)
    if not allowed:
        assert code == "forbidden"


def test_every_command_has_a_scope() -> None:
    assert set(SCOPE_OF) == set(m.Command.__args__)  # type: ignore[attr-defined]
