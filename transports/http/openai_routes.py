"""OpenAI-compatible routes: ``POST /v1/chat/completions``, ``GET /v1/models[/{id}]``.

A chat completion is one kernel run in an ephemeral session (see ``ephemeral.py``).
Non-streamed answers wait for the run's end (bounded by ``run_timeout_s``; a client
that disconnects interrupts the run). Streamed answers hold the response headers back
until the run produces its first output, so a failure before that (the usual case for
an upstream rate limit) still gets its real HTTP status; after that a failure is an
in-stream ``{"error": ...}`` frame, which the OpenAI SDKs raise.
"""

from __future__ import annotations

import time
import uuid

import anyio

from kernel import Kernel, KernelError
from kernel import model as m
from transports.shared import Request, Response, Router, json_response, open_sse

from .ephemeral import EphemeralChat
from .openai_codec import (
    ChatPlan,
    OpenAIError,
    decode_chat_request,
    from_error_info,
    plan_chat,
)
from .openai_encode import ChunkEncoder, completion, find_model, model_list
from .sse import wait_disconnect, write_frames

_OUTPUT = (m.TextDelta, m.ReasoningDelta, m.RunFinished, m.RunFailed)


def _error(error: OpenAIError) -> Response:
    return json_response(error.status, error.body(), headers=error.headers)


def _client_gone() -> Response:
    return _error(OpenAIError(status=400, message="The client closed the request", code="client_closed"))


class OpenAIApi:
    def __init__(self, kernel: Kernel, *, keepalive_s: float, run_timeout_s: float, approve_tools: bool) -> None:
        self.kernel = kernel
        self.keepalive_s = keepalive_s
        self.run_timeout_s = run_timeout_s
        self.approve_tools = approve_tools

    @property
    def send_timeout_s(self) -> float:
        """A reader that takes no event for this long is let go: the kernel's lag grace."""
        return self.kernel.settings.session.lag_grace_s

    def register(self, router: Router) -> None:
        router.post("/v1/chat/completions")(self.chat_completions)
        router.get("/v1/models")(self.models)
        router.get("/v1/models/{model}")(self.model)

    def _agents(self) -> list[m.AgentInfo]:
        return [self.kernel.agent_info(agent) for agent in self.kernel.settings.agents]

    async def models(self, request: Request) -> Response:
        return json_response(200, model_list(self._agents(), int(self.kernel.started_at)))

    async def model(self, request: Request) -> Response:
        found = find_model(self._agents(), int(self.kernel.started_at), request.path_params["model"])
        return _error(found) if isinstance(found, OpenAIError) else json_response(200, found)

    async def chat_completions(self, request: Request) -> Response | None:
        parsed = decode_chat_request(await request.body())
        if isinstance(parsed, OpenAIError):
            return _error(parsed)
        plan = plan_chat(parsed, self._agents(), context_limit=self.kernel.settings.session.history_cap)
        if isinstance(plan, OpenAIError):
            return _error(plan)
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        try:
            async with EphemeralChat(self.kernel, plan, approve_tools=self.approve_tools, request_id=completion_id) as chat:
                await chat.start()
                if plan.stream:
                    return await self._stream(request, chat, plan, completion_id)
                return await self._complete(request, chat, plan, completion_id)
        except KernelError as exc:
            return _error(from_error_info(exc.info()))

    async def _until(self, request: Request, chat: EphemeralChat, *, first_output: bool) -> tuple[list[m.Event], str | None]:
        """Read the run's events until its end (or its first output); returns them and
        ``"gone"`` / ``"timeout"`` when the client left or time ran out first."""
        seen: list[m.Event] = []
        why: str | None = None
        with anyio.move_on_after(self.run_timeout_s) as timer:
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    nonlocal why
                    await wait_disconnect(request)
                    why = "gone"
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                while chat.end is None:
                    batch = await chat.next_batch()
                    seen.extend(batch)
                    if first_output and any(isinstance(event, _OUTPUT) for event in batch):
                        break
                tg.cancel_scope.cancel()
        if timer.cancelled_caught and why is None:
            why = "timeout"
        return seen, why

    def _timeout(self) -> Response:
        return _error(
            OpenAIError(
                status=504, type="server_error", code="timeout",
                message=f"The model did not answer within {self.run_timeout_s:g}s",
            )
        )

    async def _complete(self, request: Request, chat: EphemeralChat, plan: ChatPlan, completion_id: str) -> Response:
        _, why = await self._until(request, chat, first_output=False)
        if why is not None:
            chat.interrupt()
            return _client_gone() if why == "gone" else self._timeout()
        end = chat.end
        if isinstance(end, m.RunFailed):
            return _error(from_error_info(end.error))
        assert isinstance(end, m.RunFinished)
        body = completion(
            completion_id=completion_id, created=int(time.time()), model=plan.response_model,
            finished=end, reasoning="".join(chat.reasoning), client_calls=chat.client_calls,
        )
        return json_response(200, body)

    async def _stream(self, request: Request, chat: EphemeralChat, plan: ChatPlan, completion_id: str) -> Response | None:
        pending, why = await self._until(request, chat, first_output=True)
        if why is not None:
            chat.interrupt()
            return _client_gone() if why == "gone" else self._timeout()
        if isinstance(chat.end, m.RunFailed) and not any(isinstance(e, (m.TextDelta, m.ReasoningDelta)) for e in pending):
            return _error(from_error_info(chat.end.error))
        encoder = ChunkEncoder(
            completion_id=completion_id, created=int(time.time()), model=plan.response_model, include_usage=plan.include_usage
        )
        async with open_sse(request, keepalive_interval_s=self.keepalive_s, headers={"x-request-id": completion_id}, send_timeout_s=self.send_timeout_s) as stream:
            frames = [encoder.opening()]
            batch = pending
            while True:
                frames.extend(frame for frame in map(encoder.event, batch) if frame is not None)
                end = chat.end
                if isinstance(end, m.RunFinished):
                    frames.extend(encoder.closing(end, chat.client_calls))
                elif isinstance(end, m.RunFailed):
                    frames.append(encoder.failure(from_error_info(end.error)))
                if not await write_frames(stream, frames) or end is not None:
                    break
                frames = []
                batch = await chat.next_batch()
        return None
