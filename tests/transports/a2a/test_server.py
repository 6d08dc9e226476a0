"""The A2A transport over a real server, driven by the a2a-sdk 1.x client on both of its
bindings (JSON-RPC and HTTP+JSON): cards, sends, streams, tasks, questions, push
notifications and errors; then A2A 0.3 on the raw wire, and tasks after a restart."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.compat.v0_3.types import AgentCard as V03Card
from a2a.compat.v0_3.types import Task as V03Task
from a2a.compat.v0_3.types import TaskArtifactUpdateEvent as V03ArtifactUpdate
from a2a.compat.v0_3.types import TaskStatusUpdateEvent as V03StatusUpdate
from a2a.types import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Part,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict

from kernel import Kernel
from kernel import model as m
from kernel.provider import Chunk, ProviderRequest, TextChunk
from kernel.settings import AgentSettings, Settings
from kernel.testing import ScriptedProvider, failing_turn, running_kernel, text_turn, tool_turn
from tests.transports.http._helpers import DANGER_TOOL

from ._helpers import a2a_server, collect, kinds, sdk_client, streamed_text, text, user_message

pytestmark = pytest.mark.anyio

BINDINGS = ["JSONRPC", "HTTP+JSON"]


@asynccontextmanager
async def served(provider: Any, *, db_path: Path | None = None, **config: Any) -> AsyncIterator[tuple[Kernel, str]]:
    settings = Settings(agents=[AgentSettings(name="Helper", description="A helpful agent", tools=["danger"])])
    async with running_kernel(provider, settings=settings, tools=[DANGER_TOOL], db_path=db_path) as kernel, a2a_server(kernel, **config) as url:
        yield kernel, url


class GatedProvider:
    """Streams ``first``, waits until ``gate`` is set, then streams ``second``: a run that is
    running for as long as a test needs it to, with no timing involved."""

    name = "gated"
    model = "gated-1"

    def __init__(self, first: str = "first ", second: str = "second") -> None:
        self.first, self.second = first, second
        self.gate = anyio.Event()

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        yield TextChunk(self.first)
        await self.gate.wait()
        yield TextChunk(self.second)

    async def aclose(self) -> None:
        return None


def data_part(value: dict[str, Any]) -> Part:
    data = struct_pb2.Value()
    data.struct_value.update(value)
    return Part(data=data)


# ---------------------------------------------------------------- the card


async def test_the_card_lists_both_bindings_at_1_0_and_json_rpc_at_0_3_with_absolute_urls() -> None:
    async with served(ScriptedProvider()) as (kernel, url), httpx.AsyncClient(base_url=url) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
        agent_id = kernel.agent(None).agent_id()
        per_agent = (await http.get(f"/agents/{agent_id}/.well-known/agent-card.json")).json()
    assert card["name"] == "Helper" and card["description"] == "A helpful agent"
    assert [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]] == [("JSONRPC", "1.0"), ("HTTP+JSON", "1.0"), ("JSONRPC", "0.3")]
    assert {i["url"] for i in card["supportedInterfaces"]} == {f"{url}/"} and card["url"] == f"{url}/"
    assert card["capabilities"] == {"streaming": True}  # push_allow is empty: no push notifications
    assert [s["id"] for s in card["skills"]] == [agent_id, "tool:danger"]
    assert "securitySchemes" not in card  # no token: nothing to present
    assert {i["url"] for i in per_agent["supportedInterfaces"]} == {f"{url}/agents/{agent_id}"}


async def test_a_token_is_announced_in_the_card_and_required_by_every_method() -> None:
    async with served(ScriptedProvider([text_turn("ok")]), token="s3cret") as (_, url), httpx.AsyncClient(base_url=url) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
        probes = [(await http.get(path)).status_code for path in ("/livez", "/readyz")]  # open, like the cards
        refused = await http.post("/message:send", json={"message": {"messageId": "1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
        async with sdk_client(url, binding="HTTP+JSON", headers={"authorization": "Bearer s3cret"}) as client:
            events = await collect(client.send_message(text("hi")))
    bearer = {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "The gateway's token or an API key"}, "type": "http", "scheme": "bearer"}
    assert card["securitySchemes"] == {"bearer": bearer} and card["security"] == [{"bearer": []}]  # 1.0's and 0.3's
    assert V03Card.model_validate(card).security_schemes["bearer"].root.scheme == "bearer"  # a 0.3 client reads it too
    assert card["capabilities"]["extendedAgentCard"] is True and probes == [200, 200]
    assert refused.status_code == 401 and refused.json()["error"]["status"] == "UNAUTHENTICATED"
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


# ---------------------------------------------------------------- sending


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_streamed_send_is_the_task_then_artifact_chunks_then_the_terminal_status(binding: str) -> None:
    async with served(ScriptedProvider([text_turn("Hello", " world")])) as (_, url), sdk_client(url, binding=binding) as client:
        events = await collect(client.send_message(text("hi")))
    assert kinds(events)[0] == "task" and kinds(events)[-1] == "status_update"
    assert set(kinds(events)[1:-1]) == {"artifact_update"}
    chunks = [e.artifact_update for e in events[1:-1]]
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c.last_chunk for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert streamed_text(events) == "Hello world"
    task = events[0].task
    assert events[-1].status_update.task_id == task.id and events[-1].status_update.context_id == task.context_id
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_blocking_send_returns_the_finished_task_and_get_and_list_find_it(binding: str) -> None:
    provider = ScriptedProvider([text_turn("first answer"), text_turn("second answer")])
    async with served(provider) as (_, url), sdk_client(url, binding=binding, streaming=False) as client:
        [first] = await collect(client.send_message(text("one")))
        task = first.task
        [second] = await collect(client.send_message(text("two", context_id=task.context_id)))
        got = await client.get_task(GetTaskRequest(id=task.id))
        listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED and task.artifacts[0].parts[0].text == "first answer"
    assert [h.role for h in task.history] == [1, 2] and task.history[0].parts[0].text == "one"
    assert second.task.context_id == task.context_id and second.task.id != task.id
    assert got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED
    assert sorted(t.id for t in listed.tasks) == sorted([task.id, second.task.id]) and listed.total_size == 2


async def test_a_failed_run_is_a_failed_task_never_a_completed_one() -> None:
    async with served(ScriptedProvider([failing_turn("the model is down")])) as (_, url), sdk_client(url) as client:
        events = await collect(client.send_message(text("hi")))
    status = events[-1].status_update.status
    assert status.state == TaskState.TASK_STATE_FAILED and "the model is down" in status.message.parts[0].text


async def test_data_and_file_parts_reach_the_model() -> None:
    provider = ScriptedProvider([text_turn("seen")])
    async with served(provider) as (_, url), sdk_client(url, binding="HTTP+JSON") as client:
        request = user_message(Part(text="look"), data_part({"city": "Oslo"}), Part(raw=b"notes", filename="n.txt", media_type="text/plain"))
        await collect(client.send_message(request))
    user = provider.requests[0].messages[-1]
    assert user.role == "user"
    # Files reach the model as text with their name (the kernel's model view); data as its JSON.
    assert "look" in user.content and '{"city":"Oslo"}' in user.content and "n.txt" in user.content and "notes" in user.content


# ---------------------------------------------------------------- running tasks


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_second_client_subscribes_mid_run_and_both_see_the_end(binding: str) -> None:
    provider = GatedProvider()
    async with served(provider) as (kernel, url), sdk_client(url, binding=binding) as first, sdk_client(url, binding=binding) as second:
        stream = first.send_message(text("go"))
        head = [await anext(stream), await anext(stream)]  # the Task, the first chunk
        task_id = head[0].task.id
        watcher = second.subscribe(SubscribeToTaskRequest(id=task_id))
        opening = await anext(watcher)  # the current Task: the subscription is live
        info = await kernel.execute(m.GetSession(session_id=task_id.split("~")[0]))
        provider.gate.set()
        rest = await collect(stream)
        watched = await collect(watcher)
    assert opening.task.id == task_id and opening.task.status.state == TaskState.TASK_STATE_WORKING
    assert opening.task.artifacts[0].parts[0].text == "first "
    # The console (and every session list) shows the session, followed by the a2a transport.
    assert isinstance(info, m.SessionOpened) and info.session.state == "running" and "a2a" in info.session.clients
    assert streamed_text(head + rest) == "first second" and streamed_text(watched) == "second"
    assert watched[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED == rest[-1].status_update.status.state


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_of_a_running_task_ends_it_canceled(binding: str) -> None:
    provider = GatedProvider()
    async with served(provider) as (kernel, url), sdk_client(url, binding=binding) as client, sdk_client(url, binding=binding) as other:
        stream = client.send_message(text("go"))
        head = [await anext(stream), await anext(stream)]
        canceled = await other.cancel_task(CancelTaskRequest(id=head[0].task.id))
        rest = await collect(stream)
        with pytest.raises(TaskNotCancelableError):
            await other.cancel_task(CancelTaskRequest(id=head[0].task.id))
        with pytest.raises(UnsupportedOperationError):
            await collect(other.subscribe(SubscribeToTaskRequest(id=head[0].task.id)))
        info = await kernel.execute(m.GetSession(session_id=head[0].task.context_id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    assert isinstance(info, m.SessionOpened) and info.session.state == "idle"


# ---------------------------------------------------------------- questions


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_approval_is_input_required_answered_by_a_data_part(binding: str) -> None:
    provider = ScriptedProvider([tool_turn("danger"), text_turn("it is done")])
    async with served(provider) as (_, url), sdk_client(url, binding=binding) as client:
        asked = await collect(client.send_message(text("do it")))
        status = asked[-1].status_update.status
        task = asked[0].task
        answer = user_message(data_part({"approved": True}), context_id=task.context_id, task_id=task.id)
        answered = await collect(client.send_message(answer))
        got = await client.get_task(GetTaskRequest(id=task.id))
    assert status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    working = [e.status_update.status for e in asked[1:-1] if e.HasField("status_update")]
    assert [MessageToDict(w.message.parts[1].data)["tool"] for w in working] == ["danger"]  # the call, as a working status
    assert all(w.state == TaskState.TASK_STATE_WORKING for w in working)
    question = MessageToDict(status.message.parts[1].data)
    assert question["tool"] == "danger" and question["question"] == "tool_approval"
    assert answered[0].task.id == task.id and answered[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert streamed_text(answered) == "it is done" and got.status.state == TaskState.TASK_STATE_COMPLETED
    tool_message = provider.requests[1].messages[-1]
    assert tool_message.role == "tool" and tool_message.content == "done"


async def test_an_approval_answered_with_the_text_reject_still_completes_and_the_model_is_told() -> None:
    provider = ScriptedProvider([tool_turn("danger"), text_turn("fine, I will not")])
    async with served(provider) as (_, url), sdk_client(url, streaming=False) as client:
        [asked] = await collect(client.send_message(text("do it")))
        task = asked.task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        with pytest.raises(InvalidParamsError):  # neither an answer nor a new prompt
            await collect(client.send_message(text("what?", task_id=task.id)))
        [answered] = await collect(client.send_message(text("reject", task_id=task.id)))
    assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED and answered.task.artifacts[0].parts[0].text == "fine, I will not"
    tool_message = provider.requests[1].messages[-1]
    assert tool_message.role == "tool" and tool_message.outcome == "rejected"


# ---------------------------------------------------------------- push notifications


@asynccontextmanager
async def receiver() -> AsyncIterator[tuple[str, list[tuple[dict[str, str], Any]], anyio.Event]]:
    """A local webhook: records each POST's headers and JSON body; ``done`` is set once a
    terminal state arrives."""
    received: list[tuple[dict[str, str], Any]] = []
    done = anyio.Event()

    async def handle(stream: Any) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            while len(body) < int(headers.get("content-length", "0")):
                body += await stream.receive()
            received.append((headers, json.loads(body)))
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            if received[-1][1]["statusUpdate"]["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"):
                done.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield f"http://127.0.0.1:{port}/hook", received, done
        tg.cancel_scope.cancel()


async def test_push_notifications_go_to_an_allowed_webhook_with_the_token() -> None:
    provider = ScriptedProvider([tool_turn("danger"), text_turn("done")])
    async with receiver() as (hook, received, done):
        base = hook.rsplit("/", 1)[0] + "/"
        async with served(provider, push_allow=[base]) as (_, url), sdk_client(url, streaming=False) as client:
            card = (await client._transport.httpx_client.get(f"{url}/.well-known/agent-card.json")).json()  # type: ignore[attr-defined]
            [asked] = await collect(client.send_message(text("do it")))
            task = asked.task
            config = await client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=task.id, url=hook, token="tok-1"))
            await collect(client.send_message(text("approve", task_id=task.id)))
            with anyio.fail_after(10):
                await done.wait()
            with pytest.raises(InvalidParamsError):
                await client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=task.id, url="http://169.254.169.254/latest"))
    assert card["capabilities"]["pushNotifications"] is True and config.id and config.url == hook
    states = [body["statusUpdate"]["status"]["state"] for _, body in received]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert {headers["x-a2a-notification-token"] for headers, _ in received} == {"tok-1"}
    assert all(body["statusUpdate"]["taskId"] == task.id for _, body in received)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("binding", BINDINGS)
async def test_unknown_tasks_are_task_not_found(binding: str) -> None:
    async with served(ScriptedProvider()) as (_, url), sdk_client(url, binding=binding) as client:
        for task_id in ("nope", "nosession~abc123"):
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id=task_id))
            with pytest.raises(TaskNotFoundError):
                await client.cancel_task(CancelTaskRequest(id=task_id))


async def test_json_rpc_errors_carry_a2a_codes_and_the_error_info_detail() -> None:
    async with served(ScriptedProvider()) as (_, url), httpx.AsyncClient(base_url=url) as http:
        v1 = {"a2a-version": "1.0"}
        malformed = (await http.post("/", content=b"{not json", headers=v1)).json()
        unknown = (await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "Nope"}, headers=v1)).json()
        old_name = (await http.post("/", json={"jsonrpc": "2.0", "id": 2, "method": "message/send", "params": {}}, headers=v1)).json()
        new_name_no_header = (await http.post("/", json={"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {}})).json()
        bad_version = await http.post("/", json={"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {}}, headers={"a2a-version": "2.0"})
        bad_params = (await http.post("/", json={"jsonrpc": "2.0", "id": 5, "method": "GetTask", "params": {"id": 7}}, headers=v1)).json()
        rest = await http.get("/tasks/nope", headers=v1)
        alive = await http.get("/.well-known/agent-card.json")
    assert malformed["error"]["code"] == -32700
    assert unknown["id"] == 1 and unknown["error"]["code"] == -32601
    assert "0.3" in old_name["error"]["message"] and old_name["error"]["code"] == -32601
    assert new_name_no_header["error"]["code"] == -32009
    assert bad_version.status_code == 200 and bad_version.json()["error"]["code"] == -32009
    assert bad_params["error"]["code"] == -32602
    assert bad_params["error"]["data"] == [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "INVALID_PARAMS", "domain": "a2a-protocol.org", "metadata": {}}]
    assert rest.status_code == 404 and rest.json()["error"]["status"] == "NOT_FOUND"
    assert rest.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    assert alive.status_code == 200


# ---------------------------------------------------------------- A2A 0.3 on the wire


def _sse_events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]


async def test_a_request_without_the_version_header_speaks_0_3() -> None:
    provider = ScriptedProvider([text_turn("Hello", " there")])
    message = {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
    async with served(provider) as (_, url), httpx.AsyncClient(base_url=url, timeout=20) as http:
        sent = (await http.post("/", json={"jsonrpc": "2.0", "id": "a", "method": "message/send", "params": {"message": message}})).json()
        task = sent["result"]
        got = (await http.post("/", json={"jsonrpc": "2.0", "id": "b", "method": "tasks/get", "params": {"id": task["id"]}})).json()
        again = {**message, "messageId": "m2", "contextId": task["contextId"]}
        streamed = await http.post("/", json={"jsonrpc": "2.0", "id": "c", "method": "message/stream", "params": {"message": again}})
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "Hello there"}]
    assert task["history"][0]["role"] == "user" and task["history"][0]["parts"][0]["kind"] == "text"
    assert got["result"]["id"] == task["id"] and got["result"]["status"]["state"] == "completed"
    events = _sse_events(streamed.text)
    assert streamed.text.endswith("\n\n") and all(e["id"] == "c" for e in events)
    results = [e["result"] for e in events]
    models = {"task": V03Task, "status-update": V03StatusUpdate, "artifact-update": V03ArtifactUpdate}
    for result in [task, got["result"], *results]:  # every 0.3 result is valid for the SDK's own 0.3 models
        models[result["kind"]].model_validate(result)
    assert results[0]["kind"] == "task" and results[-1]["kind"] == "status-update" and results[-1]["final"] is True
    assert results[-1]["status"]["state"] == "completed"
    assert "".join(p["text"] for r in results if r["kind"] == "artifact-update" for p in r["artifact"]["parts"]) == "Hello there"


# ---------------------------------------------------------------- after a restart


async def test_tasks_are_listed_from_the_store_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    async with served(ScriptedProvider([text_turn("kept")]), db_path=db) as (_, url), sdk_client(url, streaming=False) as client:
        [first] = await collect(client.send_message(text("remember")))
    async with served(ScriptedProvider(), db_path=db) as (_, url), sdk_client(url, binding="HTTP+JSON", streaming=False) as client:
        listed = await client.list_tasks(ListTasksRequest(context_id=first.task.context_id))
        got = await client.get_task(GetTaskRequest(id=first.task.id))
    assert [t.id for t in listed.tasks] == [first.task.id]
    assert got.status.state == TaskState.TASK_STATE_COMPLETED and got.artifacts[0].parts[0].text == "kept"
    assert got.history[0].parts[0].text == "remember"


async def test_a_push_url_that_resolves_to_an_inner_address_needs_its_host_named() -> None:
    from transports.a2a.push import PushRefused, check_addresses, check_url

    check_url("http://localhost:9/hook", ["http://"])  # under the prefix: statically fine
    with pytest.raises(PushRefused, match="inner address"):
        await check_addresses("http://localhost:9/hook", ["http://"])  # ...but it is this machine
    await check_addresses("http://localhost:9/hook", ["http://localhost:9/"])  # named: allowed
    with pytest.raises(PushRefused, match="not allowed"):
        check_url("http://example.com/hook", ["http://localhost:9/"])


# ---------------------------------------------------------------- principals


async def test_api_keys_are_principals_and_a_task_of_another_key_is_not_found() -> None:
    async with served(ScriptedProvider([text_turn("mine")])) as (kernel, url):
        _, alice = await kernel.keys.create("alice")
        _, bob = await kernel.keys.create("bob")
        async with httpx.AsyncClient(base_url=url) as http:
            card = (await http.get("/.well-known/agent-card.json")).json()  # keys exist: credentials are needed
            refused = await http.get("/tasks", headers={"authorization": "Bearer nope"})
        async with sdk_client(url, streaming=False, headers={"authorization": f"Bearer {alice}"}) as as_alice:
            [sent] = await collect(as_alice.send_message(text("hi")))
            mine = await as_alice.list_tasks(ListTasksRequest())
        async with sdk_client(url, binding="HTTP+JSON", headers={"authorization": f"Bearer {bob}"}) as as_bob:
            with pytest.raises(TaskNotFoundError):
                await as_bob.get_task(GetTaskRequest(id=sent.task.id))
            theirs = await as_bob.list_tasks(ListTasksRequest())
        info = await kernel.execute(m.GetSession(session_id=sent.task.context_id))
    assert "bearer" in card["securitySchemes"] and refused.status_code == 401
    assert [t.id for t in mine.tasks] == [sent.task.id] and list(theirs.tasks) == []
    assert isinstance(info, m.SessionOpened) and info.session.owner == "alice"


async def test_push_without_an_allow_list_and_unacceptable_output_modes_are_refused_in_a2as_terms() -> None:
    async with served(ScriptedProvider([text_turn("ok")])) as (_, url), sdk_client(url, streaming=False) as client:
        [sent] = await collect(client.send_message(text("hi")))
        with pytest.raises(PushNotificationNotSupportedError):
            await client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=sent.task.id, url="http://127.0.0.1:9/x"))
        request = text("a picture please")
        request.configuration.accepted_output_modes.append("image/png")
        with pytest.raises(ContentTypeNotSupportedError):
            await collect(client.send_message(request))
        stored = await client.get_task(GetTaskRequest(id=sent.task.id))
        later = await client.list_tasks(ListTasksRequest(status_timestamp_after=stored.status.timestamp))
        every = await client.list_tasks(ListTasksRequest())
    assert [t.id for t in every.tasks] == [sent.task.id] and list(later.tasks) == []  # nothing changed after it ended


async def test_0_3_push_config_methods_and_resubscribe_speak_0_3() -> None:
    provider = ScriptedProvider([tool_turn("danger"), text_turn("done")])
    message = {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "do it"}]}

    async def rpc(http: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return (await http.post("/", json={"jsonrpc": "2.0", "id": method, "method": method, "params": params})).json()

    async with served(provider, push_allow=["http://127.0.0.1:9/"]) as (_, url), httpx.AsyncClient(base_url=url, timeout=20) as http:
        asked = (await rpc(http, "message/send", {"message": message}))["result"]
        task_id = asked["id"]
        config = {"url": "http://127.0.0.1:9/hook", "token": "t", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}
        created = await rpc(http, "tasks/pushNotificationConfig/set", {"taskId": task_id, "pushNotificationConfig": config})
        config_id = created["result"]["pushNotificationConfig"]["id"]
        got = await rpc(http, "tasks/pushNotificationConfig/get", {"id": task_id, "pushNotificationConfigId": config_id})
        listed = await rpc(http, "tasks/pushNotificationConfig/list", {"id": task_id})
        deleted = await rpc(http, "tasks/pushNotificationConfig/delete", {"id": task_id, "pushNotificationConfigId": config_id})
        after = await rpc(http, "tasks/pushNotificationConfig/list", {"id": task_id})
        resubscribed = await http.post("/", json={"jsonrpc": "2.0", "id": "r", "method": "tasks/resubscribe", "params": {"id": task_id}})
    V03Task.model_validate(asked)
    assert asked["kind"] == "task" and asked["status"]["state"] == "input-required"
    assert asked["status"]["message"]["parts"][1]["kind"] == "data" and asked["status"]["message"]["parts"][1]["data"]["tool"] == "danger"
    assert created["result"]["taskId"] == task_id and created["result"]["pushNotificationConfig"]["authentication"] == {"schemes": ["Bearer"], "credentials": "c"}
    assert got["result"]["pushNotificationConfig"]["url"] == "http://127.0.0.1:9/hook"
    assert [c["pushNotificationConfig"]["id"] for c in listed["result"]] == [config_id]
    assert deleted["result"] is None and after["result"] == []
    events = _sse_events(resubscribed.text)  # a task waiting for input: the task, and the stream ends
    assert [e["result"]["kind"] for e in events] == ["task"] and events[0]["result"]["status"]["state"] == "input-required"


async def test_the_turn_limit_is_input_required_answered_by_continue() -> None:
    provider = ScriptedProvider([tool_turn("danger"), text_turn("went on")])
    settings = Settings(agents=[AgentSettings(name="Helper", tools=["danger"], max_turns=1)])
    async with running_kernel(provider, settings=settings, tools=[DANGER_TOOL]) as kernel, a2a_server(kernel, tool_approval=m.ApprovalPolicy(mode="approve", turn_limit="ask")) as url:
        async with sdk_client(url) as client:
            asked = await collect(client.send_message(text("go")))
            status = asked[-1].status_update.status
            task = asked[0].task
            answered = await collect(client.send_message(user_message(data_part({"continue": True}), task_id=task.id)))
    assert status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert MessageToDict(status.message.parts[1].data) == {"question": "turn_limit", "currentTurns": 1.0, "maxTurns": 1.0}
    assert answered[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED and streamed_text(answered) == "went on"


async def test_the_extended_card_needs_credentials_and_is_refused_without_them() -> None:
    async with served(ScriptedProvider(), token="s3cret") as (_, url):
        async with sdk_client(url, binding="HTTP+JSON", headers={"authorization": "Bearer s3cret"}) as client:
            extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    async with served(ScriptedProvider()) as (_, url), httpx.AsyncClient(base_url=url) as http:
        refused = (await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}, headers={"a2a-version": "1.0"})).json()
    assert extended.name == "Helper" and extended.capabilities.extended_agent_card
    assert refused["error"]["code"] == -32007


async def test_a_failed_push_is_retried_with_backoff() -> None:
    attempts: list[int] = []
    delivered = anyio.Event()

    async def handle(stream: Any) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            attempts.append(1)
            if len(attempts) == 1:
                await stream.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            else:
                await stream.send(b"HTTP/1.1 204 No Content\r\n\r\n")
                delivered.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    base = f"http://127.0.0.1:{port}/"
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        provider = ScriptedProvider([tool_turn("danger"), text_turn("done")])
        async with served(provider, push_allow=[base]) as (_, url), sdk_client(url, streaming=False) as client:
            [asked] = await collect(client.send_message(text("do it")))
            await client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=asked.task.id, url=f"{base}hook"))
            await collect(client.send_message(text("approve", task_id=asked.task.id)))  # working: the first push fails, its retry lands
            with anyio.fail_after(10):
                await delivered.wait()
        tg.cancel_scope.cancel()
    assert len(attempts) >= 2
