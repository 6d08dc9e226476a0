"""OpenAI-compatible routes: ``POST /v1/chat/completions``, ``GET /v1/models[/{id}]``.

A chat completion is one kernel run in a throw-away session (``runs.ephemeral_run``):
the prior turns are saved as its history, the run is followed by the kernel's run
follower under the transport's approval policy (nobody can answer a question on this
API), and the session is deleted when the answer is out or the client went away.
Non-streamed answers wait for the run's end (bounded by ``run_timeout_s``; a client
that disconnects interrupts the run). Streamed answers hold the response headers back
until the run produces its first output or the upstream has accepted the request
(``model_responding``), so a failure before that (the usual case for an upstream rate
limit) still gets its real HTTP status; after that a failure is an in-stream
``{"error": ...}`` event, which the OpenAI SDKs raise.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable

from kernel import Kernel, KernelError, RunFollower
from kernel import model as m
from transports.shared import ClientWatch, Request, Response, Router, format_sse, json_response, watching

from ..runs import Unanswered, answer_run, ephemeral_run, read_run, write_run
from . import codec
from .codec import ChatPlan
from .wire import OpenAIError


def _error(error: OpenAIError) -> Response:
    return json_response(error.status, error.body(), headers=error.headers)


def _frames(payloads: Iterable[bytes]) -> list[bytes]:
    """The codec's event payloads as SSE frames (``data:`` lines only, as OpenAI sends)."""
    return [format_sse(payload) for payload in payloads]


class OpenAIApi:
    def __init__(self, kernel: Kernel, *, keepalive_s: float, run_timeout_s: float, policy: m.ApprovalPolicy) -> None:
        self.kernel = kernel
        self.keepalive_s = keepalive_s
        self.run_timeout_s = run_timeout_s
        self.policy = policy

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
        return json_response(200, codec.model_list(self._agents(), int(self.kernel.started_at)))

    async def model(self, request: Request) -> Response:
        found = codec.find_model(self._agents(), int(self.kernel.started_at), request.path_params["model"])
        return _error(found) if isinstance(found, OpenAIError) else json_response(200, found)

    async def chat_completions(self, request: Request) -> Response | None:
        parsed = codec.decode_chat_request(await request.body())
        if isinstance(parsed, OpenAIError):
            return _error(parsed)
        plan = codec.plan_chat(parsed, self._agents(), context_limit=self.kernel.settings.session.history_cap)
        if isinstance(plan, OpenAIError):
            return _error(plan)
        completion_id = f"chatcmpl-{secrets.token_hex(16)}"
        try:
            async with ephemeral_run(
                self.kernel, agent_id=plan.agent_id, label=codec.EPHEMERAL_LABEL, history=plan.history,
                command=lambda session_id: codec.run_command(plan, session_id, completion_id), policy=self.policy, caller=request.caller,
            ) as run:
                if plan.stream:
                    return await self._stream(request, run, plan, completion_id)
                await self._complete(request, run, plan, completion_id)
                return None
        except KernelError as exc:
            return _error(codec.from_error_info(exc.info()))

    async def _unanswered(self, run: RunFollower, why: Unanswered) -> Response:
        await run.interrupt("client" if why == "gone" else "timeout")
        return _error(codec.client_gone() if why == "gone" else codec.run_timeout(self.run_timeout_s))

    async def _complete(self, request: Request, run: RunFollower, plan: ChatPlan, completion_id: str) -> None:
        async def answer(seen: list[m.Event], why: Unanswered | None) -> Response:
            if why is not None:
                return await self._unanswered(run, why)
            end = run.end
            assert end is not None
            failed = codec.end_error(end)
            if failed is not None:
                return _error(failed)
            assert isinstance(end, m.RunFinished)
            body = codec.completion(
                completion_id=completion_id, created=int(time.time()), model=plan.response_model,
                finished=end, reasoning=codec.reasoning_text(seen), client_calls=end.pending_tool_calls,
            )
            return json_response(200, body)

        await answer_run(request, run, timeout_s=self.run_timeout_s, answer=answer)

    async def _stream(self, request: Request, run: RunFollower, plan: ChatPlan, completion_id: str) -> Response | None:
        async with watching(request) as watch:  # one watch of the client: the wait, then the stream
            pending, why = await read_run(
                run, timeout_s=self.run_timeout_s, until=lambda event: isinstance(event, codec.OUTPUT), watch=watch
            )
            if why is not None:
                return await self._unanswered(run, why)
            early = codec.failed_before_output(run.end, pending)
            if early is not None:
                return _error(early)
            await self._write_stream(request, run, plan, completion_id, pending, watch)
        return None

    async def _write_stream(
        self, request: Request, run: RunFollower, plan: ChatPlan, completion_id: str, pending: list[m.Event], watch: ClientWatch
    ) -> None:
        encoder = codec.ChunkEncoder(
            completion_id=completion_id, created=int(time.time()), model=plan.response_model, include_usage=plan.include_usage
        )

        async def frames(batch: list[m.Event]) -> tuple[bytes, bool]:
            payloads = [payload for payload in map(encoder.event, batch) if payload is not None]
            end = run.end
            failed = codec.end_error(end) if end is not None else None
            if failed is not None:
                payloads.append(encoder.failure(failed))
            elif isinstance(end, m.RunFinished):
                payloads.extend(encoder.closing(end, end.pending_tool_calls))
            return b"".join(_frames(payloads)), end is not None

        await write_run(
            request, run, pending, frames, watch=watch, opening=format_sse(encoder.opening()),
            keepalive_interval_s=self.keepalive_s, headers={"x-request-id": completion_id}, send_timeout_s=self.send_timeout_s,
        )
