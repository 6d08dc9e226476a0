"""Two keys and the admin across the dialects, on real loopback servers with real clients.

One kernel serves http (native, OpenAI chat, Responses, the console's API), OpenFang (REST and
WebSocket), AG-UI and Agent-CLI. Alice and Bob hold keys; the admin holds the token. Neither
key sees, follows, prompts or deletes the other's sessions, and every refusal is the very
answer a missing session gets (the bodies are compared, the ids aside); scopes and limits are
enforced in each dialect's own error shape; a revoked key is refused at once, an open socket
at its next frame; no secret appears in an answer, a log line or a store row.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
import websockets

from kernel import Kernel
from kernel.access import LocalWindows
from kernel.testing import running_kernel
from tests.asyncio_clients import in_asyncio
from tests.security.test_access import Clock
from tests.transports.agui._helpers import agui_server, run_input, user
from transports.agent_cli import AgentCliConfig, AgentCliTransport
from transports.http import HttpConfig, HttpTransport
from transports.openfang import OpenFangConfig, OpenFangTransport

pytestmark = pytest.mark.anyio

ADMIN_TOKEN = "admin-token-for-the-security-tests"


@dataclass
class Team:
    kernel: Kernel
    db: Path
    http: str
    openfang: str
    agui: str
    agent_cli: str
    alice: str
    bob: str
    reader: str

    @property
    def agent_id(self) -> str:
        return self.kernel.settings.agents[0].agent_id()

    def client(self, base: str, secret: str | None, **kw: Any) -> httpx.AsyncClient:
        headers = {"authorization": f"Bearer {secret}"} if secret else {}
        return httpx.AsyncClient(base_url=base, headers=headers, timeout=20.0, **kw)


@asynccontextmanager
async def team(tmp_path: Path, **alice_limits: Any) -> AsyncIterator[Team]:
    db = tmp_path / "team.db"
    async with running_kernel(db_path=db) as kernel:
        _, alice = await kernel.keys.create("alice", **alice_limits)
        _, bob = await kernel.keys.create("bob")
        _, reader = await kernel.keys.create("reader", scopes=["read"])
        async with anyio.create_task_group() as tg:
            http = await tg.start(HttpTransport().serve, kernel, HttpConfig(port=0, token=ADMIN_TOKEN, sse_keepalive_s=0.0))
            openfang = await tg.start(
                OpenFangTransport().serve, kernel, OpenFangConfig(port=0, token=ADMIN_TOKEN, ping_interval_s=0.0, console=False)
            )
            agent_cli = await tg.start(AgentCliTransport().serve, kernel, AgentCliConfig(port=0, token=ADMIN_TOKEN))
            async with agui_server(kernel, token=ADMIN_TOKEN) as agui:
                yield Team(kernel, db, http, openfang, agui, agent_cli, alice, bob, reader)
            tg.cancel_scope.cancel()


def same_shape(other: httpx.Response, missing: httpx.Response, other_id: str, missing_id: str) -> None:
    """A refusal on another's session is the answer for a missing one: status, headers that
    matter and the body, the ids aside."""
    assert other.status_code == missing.status_code
    assert other.headers.get("content-type") == missing.headers.get("content-type")
    assert other.text.replace(other_id, "ID") == missing.text.replace(missing_id, "ID"), (other.text, missing.text)


async def native_session(t: Team, secret: str, session_id: str) -> None:
    async with t.client(t.http, secret) as http:
        created = await http.post("/v1/sessions", json={"session_id": session_id})
        assert created.status_code == 201, created.text
        done = await http.post(f"/v1/sessions/{session_id}/prompt", json={"text": "hello"}, headers={"accept": "application/json"})
        assert done.status_code == 200 and done.json()["text"], done.text


async def test_native_http_and_the_console_api(tmp_path: Path) -> None:
    async with team(tmp_path) as t:
        await native_session(t, t.alice, "alice-s")
        async with t.client(t.http, t.bob) as bob, t.client(t.http, ADMIN_TOKEN) as admin, t.client(t.http, None) as nobody:
            for method, path, body in (
                ("GET", "/v1/sessions/{}", None),
                ("GET", "/v1/sessions/{}/history", None),
                ("GET", "/v1/sessions/{}/events", None),
                ("POST", "/v1/sessions/{}/prompt", {"text": "mine now"}),
                ("POST", "/v1/sessions/{}/interrupt", None),
                ("DELETE", "/v1/sessions/{}", None),
                ("DELETE", "/v1/sessions/{}/history", None),
            ):
                other = await bob.request(method, path.format("alice-s"), json=body)
                missing = await bob.request(method, path.format("no-such"), json=body)
                assert other.status_code == 404, (method, path, other.text)
                same_shape(other, missing, "alice-s", "no-such")
            assert (await bob.get("/v1/me")).json() == {"name": "bob", "scopes": ["read", "prompt", "approve"], "agents": []}
            assert (await admin.get("/v1/me")).json() == {"name": "admin", "scopes": ["admin"], "agents": []}
            listed = (await bob.get("/v1/sessions")).json()
            assert listed["sessions"] == []
            everyone = (await admin.get("/v1/sessions")).json()["sessions"]
            assert [(s["session_id"], s["owner"]) for s in everyone] == [("alice-s", "alice")]
            # Alice's session is whole after all of Bob's attempts.
            history = (await admin.get("/v1/sessions/alice-s/history")).json()
            assert [x["role"] for x in history["messages"]] == ["user", "assistant"]
            # No credentials, a wrong key: 401 (keys exist, so even loopback asks).
            assert (await nobody.get("/v1/sessions")).status_code == 401
            assert (await nobody.get("/v1/sessions", headers={"authorization": "Bearer gw-not-a-key"})).status_code == 401
            # Keys, settings and the gateway's logs are the admin's.
            assert (await bob.get("/v1/keys")).status_code == 403
            assert (await bob.get("/v1/settings")).status_code == 403
            assert (await bob.get("/v1/logs")).status_code == 403
            keys = await admin.get("/v1/keys")
            assert keys.status_code == 200 and {k["name"] for k in keys.json()["keys"]} == {"alice", "bob", "reader"}
            assert t.alice not in keys.text and t.bob not in keys.text
        # The console signs in with a key: ?token= sets the cookie, and its API calls then
        # carry the key (the same native API), so it shows Alice's sessions only.
        async with t.client(t.http, None, follow_redirects=False) as browser:
            login = await browser.get("/", params={"token": t.alice})
            assert login.status_code == 303 and "set-cookie" in login.headers
            page = await browser.get("/")
            assert page.status_code == 200 and "<html" in page.text.lower()
            mine = (await browser.get("/v1/sessions")).json()["sessions"]
            assert [s["session_id"] for s in mine] == ["alice-s"]
            assert (await browser.get("/", params={"token": "gw-wrong"})).status_code == 401


async def test_scopes_over_http_are_403_in_each_dialects_shape(tmp_path: Path) -> None:
    async with team(tmp_path) as t:
        async with t.client(t.http, t.reader) as reader:
            refused = await reader.post("/v1/sessions", json={"session_id": "r"})
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
            assert (await reader.get("/v1/settings")).status_code == 403
            assert (await reader.get("/v1/sessions")).status_code == 200
        sdk = openai.AsyncOpenAI(base_url=f"{t.http}/v1", api_key=t.reader, max_retries=0)
        with pytest.raises(openai.PermissionDeniedError):
            await sdk.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}])
        await sdk.close()


async def test_openai_chat_and_responses_per_key(tmp_path: Path) -> None:
    async with team(tmp_path) as t:
        alice = openai.AsyncOpenAI(base_url=f"{t.http}/v1", api_key=t.alice, max_retries=0)
        bob = openai.AsyncOpenAI(base_url=f"{t.http}/v1", api_key=t.bob, max_retries=0)
        try:
            chat = await alice.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}])
            assert chat.choices[0].message.content
            stored = await alice.responses.create(model="default", input="remember this", store=True)
            assert (await alice.responses.retrieve(stored.id)).id == stored.id
            # Bob: Alice's stored response and its conversation are as missing ones.
            async with t.client(t.http, t.bob) as raw:
                other = await raw.get(f"/v1/responses/{stored.id}")
                missing = await raw.get("/v1/responses/resp_0123456789abcdef0123456789abcdef")
                same_shape(other, missing, stored.id, "resp_0123456789abcdef0123456789abcdef")
                follow_other = await raw.post("/v1/responses", json={"model": "default", "input": "and?", "previous_response_id": stored.id})
                follow_missing = await raw.post("/v1/responses", json={"model": "default", "input": "and?", "previous_response_id": "resp_nope"})
                assert follow_other.status_code in (400, 404)  # OpenAI's answer for an unknown previous response
                same_shape(follow_other, follow_missing, stored.id, "resp_nope")
                deleted = await raw.delete(f"/v1/responses/{stored.id}")
                assert deleted.status_code == 404
            with pytest.raises(openai.NotFoundError):
                await bob.responses.retrieve(stored.id)
            assert (await alice.responses.retrieve(stored.id)).id == stored.id  # still there
            # A revoked key is refused at the next request.
            await t.kernel.keys.revoke("alice")
            with pytest.raises(openai.AuthenticationError):
                await alice.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}])
        finally:
            await alice.close()
            await bob.close()


async def test_limits_are_429_with_retry_after_before_any_upstream_call(tmp_path: Path) -> None:
    async with team(tmp_path, rpm=1) as t:
        clock = Clock()
        t.kernel.access.windows = LocalWindows(clock)
        async with t.client(t.http, t.alice) as alice:
            await alice.post("/v1/sessions", json={"session_id": "lim"})
            first = await alice.post("/v1/sessions/lim/prompt", json={"text": "one"}, headers={"accept": "application/json"})
            assert first.status_code == 200
            second = await alice.post("/v1/sessions/lim/prompt", json={"text": "two"}, headers={"accept": "application/json"})
            assert second.status_code == 429 and second.json()["error"]["code"] == "rate_limited"
            assert 1 <= int(second.headers["retry-after"]) <= 60
            chat = await alice.post("/v1/chat/completions", json={"model": "default", "messages": [{"role": "user", "content": "x"}]})
            assert chat.status_code == 429 and "retry-after" in chat.headers and chat.json()["error"]["type"]
        async with t.client(t.http, t.bob) as bob:  # Bob's window is his own
            await bob.post("/v1/sessions", json={"session_id": "bob-lim"})
            ok = await bob.post("/v1/sessions/bob-lim/prompt", json={"text": "one"}, headers={"accept": "application/json"})
            assert ok.status_code == 200
        # Lifted once the minute has passed (the window's clock, moved by the test).
        clock.now += 60.5
        async with t.client(t.http, t.alice) as alice:
            again = await alice.post("/v1/sessions/lim/prompt", json={"text": "three"}, headers={"accept": "application/json"})
            assert again.status_code == 200


async def test_openfang_rest_and_websocket(tmp_path: Path) -> None:
    async with team(tmp_path) as t:
        agent = t.agent_id
        async with t.client(t.openfang, t.alice) as alice, t.client(t.openfang, t.bob) as bob:
            said = await alice.post(f"/api/agents/{agent}/message", json={"message": "hello"})
            assert said.status_code == 200, said.text
            alice_sessions = (await alice.get("/api/sessions")).json()
            assert len(alice_sessions["sessions"] if isinstance(alice_sessions, dict) else alice_sessions) == 1
            theirs = (await bob.get("/api/sessions")).json()
            assert (theirs["sessions"] if isinstance(theirs, dict) else theirs) == []
            listed = alice_sessions["sessions"] if isinstance(alice_sessions, dict) else alice_sessions
            sid = listed[0]["session_id"]
            other = await bob.delete(f"/api/sessions/{sid}")
            missing_id = "00000000-0000-4000-8000-000000000000"
            missing = await bob.delete(f"/api/sessions/{missing_id}")
            assert other.status_code == 404
            same_shape(other, missing, sid, missing_id)
            # Bob's agent session is his own: his history is empty, Alice's is untouched.
            assert (await bob.get(f"/api/agents/{agent}/session")).json()["messages"] == []
            assert len((await alice.get(f"/api/agents/{agent}/session")).json()["messages"]) == 2
        ws_url = t.openfang.replace("http://", "ws://") + f"/api/agents/{agent}/ws"

        async def socket_as(secret: str) -> list[dict[str, Any]]:
            async with websockets.connect(f"{ws_url}?token={secret}") as ws:
                frames = [json.loads(await ws.recv()) for _ in range(2)]  # connected, agents_updated
                await ws.send(json.dumps({"type": "message", "content": "from the socket"}))
                while frames[-1]["type"] not in ("response", "error"):
                    frames.append(json.loads(await ws.recv()))
                return frames

        frames = await in_asyncio(lambda: socket_as(t.bob))
        assert frames[-1]["type"] == "response"
        async with t.client(t.openfang, t.bob) as bob:
            assert len((await bob.get(f"/api/agents/{agent}/session")).json()["messages"]) == 2
        async with t.client(t.openfang, t.alice) as alice:
            assert len((await alice.get(f"/api/agents/{agent}/session")).json()["messages"]) == 2  # not Bob's turn

        async def refused_upgrade(secret: str) -> int:
            try:
                async with websockets.connect(f"{ws_url}?token={secret}"):
                    return 0
            except websockets.InvalidStatus as exc:
                return exc.response.status_code

        await t.kernel.keys.revoke("bob")
        assert await in_asyncio(lambda: refused_upgrade(t.bob)) == 401


async def test_an_open_socket_is_refused_at_its_next_frame_after_revocation(tmp_path: Path) -> None:
    """``gateway keys revoke`` in another process, while Alice's Agent-CLI socket is open:
    her next request on that socket is refused (the key is looked up per command)."""
    async with team(tmp_path) as t:
        url = t.agent_cli.replace("http://", "ws://") + "/"
        revoke = [sys.executable, "-m", "gateway", "keys", "--db", str(t.db), "revoke", "alice"]

        async def session() -> tuple[dict[str, Any], dict[str, Any], int]:
            async with websockets.connect(f"{url}?token={t.alice}") as ws:
                await ws.send(json.dumps({"request_id": "r1", "input": {"Text": "hi"}, "stream": False}))
                before = json.loads(await ws.recv())
                process = await asyncio.create_subprocess_exec(*revoke, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
                code = await process.wait()
                await ws.send(json.dumps({"request_id": "r2", "input": {"Text": "again"}, "stream": False}))
                return before, json.loads(await ws.recv()), code

        before, after, code = await in_asyncio(session)
        assert code == 0
        assert before["request_id"] == "r1" and before["error"] is None and before["response"]["Text"]
        assert after["request_id"] == "r2" and "revoked" in after["error"]


async def test_agui_threads_per_key(tmp_path: Path) -> None:
    async with team(tmp_path) as t:
        async with t.client(t.agui, t.alice) as alice, t.client(t.agui, t.bob) as bob:
            async with alice.stream("POST", "", json=run_input("t-alice", "r1", [user("hi")]), headers={"accept": "text/event-stream"}) as run:
                assert run.status_code == 200
                body = (await run.aread()).decode()
            assert "RUN_FINISHED" in body
            other = await bob.get("/threads/t-alice/events")
            missing = await bob.get("/threads/t-nobody/events")
            assert other.status_code == 404
            same_shape(other, missing, "t-alice", "t-nobody")
            stopped = await bob.post("/threads/t-alice/interrupt")
            assert stopped.status_code == 404


async def test_agent_cli_sessions_belong_to_the_sockets_key(tmp_path: Path) -> None:
    async with team(tmp_path) as t:
        url = t.agent_cli.replace("http://", "ws://") + "/"

        async def prompt_as(secret: str) -> dict[str, Any]:
            async with websockets.connect(f"{url}?token={secret}") as ws:
                await ws.send(json.dumps({"request_id": "p1", "input": {"Text": "hello"}, "stream": False}))
                return dict(json.loads(await ws.recv()))

        reply = await in_asyncio(lambda: prompt_as(t.alice))
        assert reply["error"] is None
        async with t.client(t.http, t.bob) as bob, t.client(t.http, t.alice) as alice:
            assert (await bob.get("/v1/sessions")).json()["sessions"] == []
            owned = (await alice.get("/v1/sessions")).json()["sessions"]
            assert len(owned) == 1 and owned[0]["owner"] == "alice" and owned[0]["message_count"] == 2


async def test_secrets_are_in_no_answer_log_or_store_row(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with team(tmp_path) as t:
        await native_session(t, t.alice, "s")
        async with t.client(t.http, t.bob) as bob:
            await bob.get("/v1/sessions/s")  # a refusal, audited
        async with t.client(t.http, ADMIN_TOKEN) as admin:
            answers = [(await admin.get(path)).text for path in ("/v1/keys", "/v1/sessions", "/v1/settings", "/v1/status")]
        await t.kernel.keys.revoke("bob")
    secrets = (t.alice, t.bob, t.reader)
    for text in [*answers, caplog.text]:
        assert not any(secret in text for secret in secrets)
    assert "refused: key bob" in caplog.text and "key revoked: bob" in caplog.text and "key created: alice" in caplog.text
    conn = sqlite3.connect(t.db)
    dump = "\n".join(conn.iterdump())
    assert not any(secret in dump for secret in secrets)
    assert "api_keys" in dump

