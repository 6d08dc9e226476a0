"""Keys in a cluster: real ``gateway serve`` processes on PostgreSQL and Redis.

Keys are made with ``gateway keys`` against the cluster's store (PostgreSQL); two instances
(asyncio and trio) serve http. A command a key sends to the instance that does not run the
session is forwarded with its caller, and the owner refuses another key's exactly as a missing
session; the key's runs-per-minute window is one for both instances (Redis); a revocation holds
at once on both.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.cluster._support import gateway_instances
from tests.services import postgres_schema
from tests.subprocess_gateway import gateway_env

pytestmark = pytest.mark.anyio


def keys(store_url: str, tmp_path: Path, *args: str) -> str:
    """``gateway keys --db STORE ARGS``: its stdout (a new key's secret)."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "keys", "--db", store_url, *args],
        capture_output=True, text=True, timeout=60, env=gateway_env(tmp_path / "unused.db"), cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def client(base: str, secret: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base, headers={"authorization": f"Bearer {secret}"}, timeout=60)


async def test_keys_across_two_instances(tmp_path: Path) -> None:
    with postgres_schema() as store_url:
        async with gateway_instances(tmp_path, ["asyncio", "trio"], transports=("http",), store_url=store_url) as (a, b):
            alice = keys(store_url, tmp_path, "create", "alice", "--rpm", "3")
            bob = keys(store_url, tmp_path, "create", "bob")
            assert alice.startswith("gw-") and bob.startswith("gw-")
            json_answer = {"accept": "application/json"}
            async with client(a.urls["http"], alice) as alice_a, client(b.urls["http"], alice) as alice_b, client(b.urls["http"], bob) as bob_b:
                assert (await alice_a.post("/v1/sessions", json={"session_id": "alice-1"})).status_code == 201
                first = await alice_a.post("/v1/sessions/alice-1/prompt", json={"text": "on A"}, headers=json_answer)
                assert first.status_code == 200, first.text
                # Bob on B: Alice's session (run by A) answers as a missing one, forwarded or not.
                for method, path, body in (
                    ("GET", "/v1/sessions/{}", None),
                    ("POST", "/v1/sessions/{}/interrupt", None),
                    ("DELETE", "/v1/sessions/{}", None),
                ):
                    other = await bob_b.request(method, path.format("alice-1"), json=body)
                    missing = await bob_b.request(method, path.format("nobody-1"), json=body)
                    assert other.status_code == missing.status_code == 404
                    assert other.text.replace("alice-1", "X") == missing.text.replace("nobody-1", "X")
                assert (await bob_b.get("/v1/sessions")).json()["sessions"] == []
                # Alice continues her session through B (the command is forwarded as hers).
                second = await alice_b.post("/v1/sessions/alice-1/prompt", json={"text": "on B"}, headers=json_answer)
                assert second.status_code == 200, second.text
                # One window for both instances: the third run in the minute is refused on either.
                third = await alice_b.post("/v1/sessions/alice-1/prompt", json={"text": "again"}, headers=json_answer)
                assert third.status_code == 200, third.text
                refused = await alice_a.post("/v1/sessions/alice-1/prompt", json={"text": "too many"}, headers=json_answer)
                assert refused.status_code == 429 and "retry-after" in refused.headers
                history = (await alice_a.get("/v1/sessions/alice-1/history")).json()["messages"]
                assert [x["content"] for x in history if x["role"] == "user"] == ["on A", "on B", "again"]
                # Revoked once, refused at once on both instances.
                keys(store_url, tmp_path, "revoke", "alice")
                assert (await alice_a.get("/v1/sessions")).status_code == 401
                assert (await alice_b.get("/v1/sessions")).status_code == 401
                assert (await bob_b.get("/v1/sessions")).status_code == 200
            listed = keys(store_url, tmp_path, "list", "--usage")
            assert "alice" in listed and "revoked" in listed and alice not in listed
