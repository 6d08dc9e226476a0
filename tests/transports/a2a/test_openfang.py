"""OpenFang 0.6's own A2A routes on the openfang transport, called the way OpenFang calls them:
its apps' REST routes, and its ``a2a.rs`` client (discover the card, then JSON-RPC
``tasks/send`` / ``tasks/get`` to the card's URL, reading ``result``)."""

from __future__ import annotations

import anyio
import httpx
import pytest

from kernel import model as m
from kernel.testing import ScriptedProvider, failing_turn, text_turn
from tests.transports.openfang._helpers import serving

from .test_server import GatedProvider

pytestmark = pytest.mark.anyio


def send_body(text: str, session_id: str | None = None) -> dict[str, object]:
    """What OpenFang's A2aClient::send_task posts."""
    return {"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": {"message": {"role": "user", "parts": [{"type": "text", "text": text}]}, "sessionId": session_id}}


async def test_the_a2a_rs_client_discovers_the_card_and_sends_and_gets_tasks_over_json_rpc() -> None:
    async with serving(ScriptedProvider([text_turn("Hello", " from the gateway")])) as server, httpx.AsyncClient(timeout=20) as http:
        card = (await http.get(f"{server.url}/.well-known/agent.json", headers={"user-agent": "OpenFang/0.1 A2A"})).json()
        sent = (await http.post(card["url"], json=send_body("hi there"))).json()
        task = sent["result"]
        got = (await http.post(card["url"], json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task["id"]}})).json()
        unknown = (await http.post(card["url"], json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "nope"}})).json()
    assert card["url"] == f"{server.url}/a2a" and card["version"] == "0.1.0"
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False, "stateTransitionHistory": True}
    assert task["status"] == "completed" and task["artifacts"] == []
    assert task["messages"] == [
        {"role": "user", "parts": [{"type": "text", "text": "hi there"}]},
        {"role": "agent", "parts": [{"type": "text", "text": "Hello from the gateway"}]},
    ]
    assert got["result"] == task
    assert unknown["error"]["code"] == -32001


async def test_the_rest_routes_send_get_list_and_continue_a_session() -> None:
    provider = ScriptedProvider([text_turn("one"), text_turn("two")])
    async with serving(provider) as server, httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        agents = (await http.get("/a2a/agents")).json()
        first = (await http.post("/a2a/tasks/send", json=send_body("a"))).json()
        second = (await http.post("/a2a/tasks/send", json=send_body("b", first["sessionId"]))).json()
        got = await http.get(f"/a2a/tasks/{first['id']}")
        missing = await http.get("/a2a/tasks/nope")
        history = await server.kernel.execute(m.GetHistory(session_id=first["sessionId"]))
    assert agents["total"] == 1 and agents["agents"][0]["url"] == f"{server.url}/a2a"
    assert first["status"] == second["status"] == "completed" and second["sessionId"] == first["sessionId"]
    assert got.status_code == 200 and got.json()["messages"][1]["parts"][0]["text"] == "one"
    assert missing.status_code == 404 and missing.json() == {"error": "Task 'nope' not found"}
    assert [msg.content for msg in history.messages] == ["a", "one", "b", "two"]  # one conversation


async def test_a_failed_run_is_a_failed_task_with_its_status_from_kernel_errors() -> None:
    async with serving(ScriptedProvider([failing_turn("the model is down")])) as server, httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        failed = await http.post("/a2a/tasks/send", json=send_body("hi"))
    assert failed.status_code == 502 and failed.json()["status"] == "failed"
    assert "the model is down" in failed.json()["messages"][-1]["parts"][0]["text"]


async def test_cancel_of_a_running_task_ends_it_cancelled() -> None:
    provider = GatedProvider()
    async with serving(provider) as server, httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        results: list[httpx.Response] = []

        async def send() -> None:
            results.append(await http.post("/a2a/tasks/send", json=send_body("go")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            with anyio.fail_after(10):
                while True:  # the run has started and streamed its first words
                    listed = await server.kernel.execute(m.ListSessions())
                    live = [s for s in listed.sessions if s.run_id is not None]
                    if live:
                        break
                    await anyio.sleep(0.01)
            task_id = live[0].request_id
            cancelled = await http.post(f"/a2a/tasks/{task_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert results[0].json()["status"] == "cancelled" and results[0].json()["id"] == task_id
