"""OpenFang 0.6's own A2A routes on the openfang transport's port (its apps call them):
``GET /.well-known/agent.json``, ``GET /a2a/agents``, ``POST /a2a/tasks/send``,
``GET /a2a/tasks/{id}``, ``POST /a2a/tasks/{id}/cancel`` — and ``POST /a2a``, the card's URL,
where OpenFang's own A2A client sends JSON-RPC ``tasks/send`` / ``tasks/get`` / ``tasks/cancel``.

A task is a kernel run through ``transports.shared``'s :class:`TaskBook` (the same mapping as
the a2a transport: the task id names the session). ``tasks/send`` answers once the run has
ended (OpenFang's is blocking), under the transport's REST approval policy (nobody can be
asked); a run that did not end whole is ``failed`` or ``cancelled``, never ``completed``.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

from kernel import Kernel, KernelError, decode_json
from kernel import model as m
from kernel.errors import http_status
from transports.shared import HttpError, Request, Response, Router, RunTask, TaskBook, json_response

from . import a2a_codec as codec
from .config import OpenFangConfig

CLIENT = "openfang"
CANCEL_WAIT_S = 30.0


class OpenFangA2A:
    def __init__(self, kernel: Kernel, config: OpenFangConfig) -> None:
        self.kernel = kernel
        self.policy = config.rest_policy
        self.book = TaskBook(kernel, client=CLIENT)
        # The card and the agent list are public: read as the transport itself.
        self.public = m.Caller(transport=CLIENT)

    def register(self, router: Router) -> None:
        router.get("/.well-known/agent.json", auth=False)(self.card)
        router.get("/a2a/agents")(self.agents)
        router.post("/a2a")(self.jsonrpc)
        router.post("/a2a/tasks/send")(self.send)
        router.get("/a2a/tasks/{task_id}")(self.get)
        router.post("/a2a/tasks/{task_id}/cancel")(self.cancel)

    def _base(self, request: Request) -> str:
        return f"http://{request.headers.get('host', '127.0.0.1')}"

    async def card(self, request: Request) -> Response:
        info = self.kernel.agent_info(self.kernel.agent(None))
        return json_response(200, codec.agent_card(info, self._base(request)))

    async def agents(self, request: Request) -> Response:
        listed = await self.kernel.execute(m.ListAgents(), self.public)
        cards = [codec.agent_card(agent, self._base(request)) for agent in listed.agents]
        return json_response(200, {"agents": cards, "total": len(cards)})

    # ---------------------------------------------------------- tasks

    def _json(self, task: RunTask) -> dict[str, Any]:
        prompt = m.parts_text(task.prompt) if task.prompt else ""
        return codec.task_json(task.task_id, task.session_id, task.state, prompt=prompt, text=task.text, error=task.error)

    async def _send(self, params: codec.SendParams, caller: m.Caller) -> RunTask:
        text, session_id = codec.send_input(params)
        if session_id is not None and len(session_id) > 128:
            raise HttpError(400, "sessionId is at most 128 characters", code="invalid_request")
        prompt = m.Prompt(session_id=session_id, text=text, options=m.PromptOptions(approval=self.policy))
        try:
            _, feed = await self.book.start(prompt, caller, follow=True, track=False)
        except KernelError as exc:
            raise HttpError(http_status(exc.code), exc.message, code=exc.code) from None
        assert feed is not None
        async with feed:
            await feed.settle()
        return feed.task

    async def _task(self, task_id: str, caller: m.Caller) -> RunTask | None:
        try:
            return await self.book.get(task_id, caller)
        except KernelError:
            return None

    async def _cancel(self, task: RunTask, caller: m.Caller) -> RunTask:
        if task.terminal:
            return task
        async with await self.book.follow(task, caller) as feed:
            try:
                await self.book.cancel(task, caller)
            except KernelError:  # it ended meanwhile
                return await self._task(task.task_id, caller) or task
            with anyio.move_on_after(CANCEL_WAIT_S):
                while not feed.task.terminal:
                    await feed.next()
        return feed.task

    def _answer(self, task: RunTask) -> Response:
        status = http_status(task.error.code) if task.state == "failed" and task.error is not None else 200
        return json_response(status, self._json(task))

    async def send(self, request: Request) -> Response:
        body = await request.json(codec.SendRequest)
        return self._answer(await self._send(body.params, request.caller))

    async def get(self, request: Request) -> Response:
        task = await self._task(request.path_params["task_id"], request.caller)
        if task is None:
            return self._missing(request.path_params["task_id"])
        return json_response(200, self._json(task))

    async def cancel(self, request: Request) -> Response:
        task = await self._task(request.path_params["task_id"], request.caller)
        if task is None:
            return self._missing(request.path_params["task_id"])
        return json_response(200, self._json(await self._cancel(task, request.caller)))

    def _missing(self, task_id: str) -> Response:
        return json_response(http_status("not_found"), {"error": f"Task '{task_id}' not found"})

    async def jsonrpc(self, request: Request) -> Response:
        """OpenFang's A2A client: JSON-RPC at the card's URL, the task in ``result``."""
        try:
            call = decode_json(await request.body(), codec.RpcCall)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return json_response(200, codec.rpc_error(None, -32700, f"Malformed request: {exc}"))
        try:
            if call.method == "tasks/send":
                params = msgspec.json.decode(call.params, type=codec.SendParams)
                return json_response(200, codec.rpc_result(call.id, self._json(await self._send(params, request.caller))))
            if call.method in ("tasks/get", "tasks/cancel"):
                task_id = msgspec.json.decode(call.params, type=codec.TaskIdParams).id
                task = await self._task(task_id, request.caller)
                if task is None:
                    return json_response(200, codec.rpc_error(call.id, -32001, f"Task '{task_id}' not found"))
                if call.method == "tasks/cancel":
                    task = await self._cancel(task, request.caller)
                return json_response(200, codec.rpc_result(call.id, self._json(task)))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return json_response(200, codec.rpc_error(call.id, -32602, f"Invalid params: {exc}"))
        except HttpError as exc:
            return json_response(200, codec.rpc_error(call.id, -32603, exc.message))
        return json_response(200, codec.rpc_error(call.id, -32601, f"Method not found: {call.method!r}"))
