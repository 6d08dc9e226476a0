"""A reference A2A server built with a2a-sdk's own server package (Starlette, asyncio), run
in a thread of its own so that tests on trio can use it too; also the benchmark's peer.

Its agent echoes: the user's text streamed back word by word as chunks of one artifact —
or, for ``count N``, the words ``w1 … wN`` (the benchmark's long stream). A text starting
with ``ask`` first asks for input (``TASK_STATE_INPUT_REQUIRED``) and finishes with the answer;
``wait`` works until it is canceled.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Task, TaskState, TaskStatus
from starlette.applications import Starlette


def _words(text: str) -> list[str]:
    head, _, rest = text.partition(" ")
    if head == "count" and rest.strip().isdigit():
        return [f"w{i}" for i in range(1, int(rest) + 1)]
    return text.split()


class EchoExecutor(AgentExecutor):
    def __init__(self) -> None:
        self.canceled: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        text = context.get_user_input()
        if context.current_task is None:
            task = Task(id=updater.task_id, context_id=updater.context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
            if context.message is not None:
                task.history.append(context.message)
            await event_queue.enqueue_event(task)
            await updater.start_work()
            if text.startswith("ask"):
                await updater.requires_input(updater.new_agent_message([Part(text="Which colour?")]))
                return
            if text.startswith("wait"):
                await updater.add_artifact([Part(text="waiting ")], artifact_id="answer", append=False, last_chunk=False)
                await asyncio.Event().wait()
        else:
            await updater.start_work()
            text = f"you said {text}"
        words = _words(text)
        for index, word in enumerate(words):
            await updater.add_artifact([Part(text=f"{word} ")], artifact_id="answer", append=index > 0, last_chunk=index == len(words) - 1)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.canceled.append(context.task_id or "")
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


def reference_app(url: str, executor: EchoExecutor) -> Starlette:
    card = AgentCard(
        name="Reference echo",
        description="a2a-sdk's reference server: echoes the text word by word",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/"), *create_rest_routes(handler)])


@contextmanager
def reference_server() -> Iterator[tuple[str, EchoExecutor]]:
    """The reference server on an ephemeral loopback port, in a thread with its own asyncio
    loop (hypercorn); yields its base URL and the executor (what it was asked to cancel)."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    executor = EchoExecutor()
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.graceful_timeout = 0.5
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        started.set()
        loop.run_until_complete(serve(reference_app(url, executor), config, shutdown_trigger=stop.wait, mode="asgi"))  # type: ignore[arg-type]

    thread = threading.Thread(target=run, name="a2a-reference", daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield url, executor
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
