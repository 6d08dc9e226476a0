"""A2A across a cluster: a task started on one instance is subscribed to, read and listed on
another (real PostgreSQL and Redis; skipped with one line when they are absent)."""

from __future__ import annotations

import pytest
from a2a.types import GetTaskRequest, ListTasksRequest, SubscribeToTaskRequest, TaskState

from kernel.testing import ScriptedProvider
from tests.cluster._support import cluster_kernels

from ._helpers import a2a_server, collect, sdk_client, streamed_text, text
from .test_server import GatedProvider

pytestmark = pytest.mark.anyio


async def test_a_task_started_on_one_instance_is_subscribed_to_on_another() -> None:
    provider = GatedProvider()
    async with cluster_kernels([provider, ScriptedProvider()]) as (a, b), a2a_server(a) as url_a, a2a_server(b) as url_b:
        async with sdk_client(url_a) as on_a, sdk_client(url_b, binding="HTTP+JSON") as on_b:
            stream = on_a.send_message(text("go"))
            head = [await anext(stream), await anext(stream)]  # the Task, the first chunk: the run is live on A
            task = head[0].task
            watcher = on_b.subscribe(SubscribeToTaskRequest(id=task.id))
            opening = await anext(watcher)  # B's view of A's task, its follower subscribed
            provider.gate.set()
            rest = await collect(stream)
            watched = await collect(watcher)
            got = await on_b.get_task(GetTaskRequest(id=task.id))
            listed = await on_b.list_tasks(ListTasksRequest(context_id=task.context_id))
    assert opening.task.id == task.id and opening.task.status.state == TaskState.TASK_STATE_WORKING
    assert streamed_text(head + rest) == "first second" and streamed_text(watched) == "second"
    assert watched[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert got.status.state == TaskState.TASK_STATE_COMPLETED and got.artifacts[0].parts[0].text == "first second"
    assert [t.id for t in listed.tasks] == [task.id]
