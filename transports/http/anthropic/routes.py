"""Anthropic Messages routes: ``POST /v1/messages`` (``?beta=true`` and any other query
ignored), ``POST /v1/messages/count_tokens``, ``GET /v1/models[/{id}]`` in Anthropic's shape
(the server sends a request here when it carries ``anthropic-version``).

A message is one kernel run in a throw-away session (``runs.ephemeral_run``), as an OpenAI
chat completion: Anthropic's clients send the whole conversation every time, with blocks
only they keep (signed thinking, tool ids), so the request is the conversation's record
and a kernel session kept between requests would only be a stale copy of it. The run is
followed under the transport's OpenAI approval policy (nobody here can answer a question).

Non-stream answers wait for the run's end (bounded by ``run_timeout_s``; a client that
disconnects interrupts the run). Streams hold their headers until the run's first output
or the upstream's acceptance (``model_responding``), so a failure before that keeps its real
HTTP status; after it, a failure — or a run that was interrupted or cut short for any reason
(``kernel.model.run_end_error``) — is an ``event: error`` and never a ``message_stop``.
Quiet streams get ``event: ping``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence

from kernel import Kernel, KernelError, RunFollower
from kernel import model as m
from transports.shared import ClientWatch, Request, Response, Router, format_sse, json_response, watching

from ..runs import Unanswered, answer_run, ephemeral_run, read_run, write_run
from . import codec, reply_codec
from .codec import MessagesPlan
from .reply_codec import Frame, StreamEncoder
from .wire import AnthropicError, TokenCount

log = logging.getLogger("gateway.http")

#: The label of the throw-away session of each request.
EPHEMERAL_LABEL = "anthropic messages (ephemeral)"
_PING = format_sse(reply_codec.PING, event="ping")


def _error(error: AnthropicError, request_id: str | None = None) -> Response:
    headers = dict(error.headers)
    if request_id is not None:
        headers["request-id"] = request_id
    return json_response(error.status, error.body(request_id), headers=headers)


def _sse(frames: Sequence[Frame]) -> list[bytes]:
    """Every frame with its ``event:`` line (a data-only stream shows Anthropic's SDKs nothing)."""
    return [format_sse(data, event=name) for name, data in frames]


class AnthropicApi:
    def __init__(
        self, kernel: Kernel, *, keepalive_s: float, run_timeout_s: float, policy: m.ApprovalPolicy, signing_key: bytes
    ) -> None:
        self.kernel = kernel
        self.keepalive_s = keepalive_s
        self.run_timeout_s = run_timeout_s
        self.policy = policy
        self.signing_key = signing_key
        self._hosted_logged: set[str] = set()

    def register(self, router: Router) -> None:
        router.post("/v1/messages")(self.messages)
        router.post("/v1/messages/count_tokens")(self.count_tokens)
        router.get("/v1/models")(self.models)
        router.get("/v1/models/{model}")(self.model)

    def _agents(self) -> list[m.AgentInfo]:
        return [self.kernel.agent_info(agent) for agent in self.kernel.settings.agents]

    async def models(self, request: Request) -> Response:
        page = codec.model_page(self._agents(), int(self.kernel.started_at), dict(request.query))
        return _error(page) if isinstance(page, AnthropicError) else json_response(200, page)

    async def model(self, request: Request) -> Response:
        found = codec.find_model(self._agents(), int(self.kernel.started_at), request.path_params["model"])
        return _error(found) if isinstance(found, AnthropicError) else json_response(200, found)

    async def count_tokens(self, request: Request) -> Response:
        parsed = codec.decode_count_request(await request.body())
        if isinstance(parsed, AnthropicError):
            return _error(parsed)
        return json_response(200, TokenCount(input_tokens=codec.estimate_tokens(parsed.system, parsed.messages, parsed.tools)))

    async def messages(self, request: Request) -> Response | None:
        request_id = f"req_{secrets.token_hex(16)}"
        parsed = codec.decode_request(await request.body())
        if isinstance(parsed, AnthropicError):
            return _error(parsed, request_id)
        plan = codec.plan_messages(
            parsed, self._agents(), context_limit=self.kernel.settings.session.history_cap, signing_key=self.signing_key
        )
        if isinstance(plan, AnthropicError):
            return _error(plan, request_id)
        self._log_hosted(plan.hosted_tools)
        message_id = f"msg_{secrets.token_hex(16)}"

        def command(session_id: str) -> m.Prompt | m.Continue:
            return m.conversation_turn(session_id, message_id, plan.prompt_parts, plan.options, continuation=plan.continuation)

        try:
            async with ephemeral_run(
                self.kernel, agent_id=plan.agent_id, label=EPHEMERAL_LABEL, history=plan.history, command=command,
                policy=self.policy, caller=request.caller,
            ) as run:
                # The prompt's size for ``message_start`` (the upstream's count comes with the
                # end), estimated while the upstream works: a Claude Code request's (system
                # blocks, 20 tools' schemas, its history) takes 44 µs, not spent before the model call.
                estimate = codec.estimate_tokens(parsed.system, parsed.messages, parsed.tools)
                if plan.stream:
                    return await self._stream(request, run, plan, estimate, message_id, request_id)
                await self._complete(request, run, plan, estimate, message_id, request_id)
                return None
        except KernelError as exc:
            return _error(codec.from_error_info(exc.info()), request_id)

    def _log_hosted(self, names: Sequence[str]) -> None:
        """Server tools (web search, code execution…) are not offered to the model: said once each."""
        for name in names:
            if name not in self._hosted_logged and len(self._hosted_logged) < 256:
                self._hosted_logged.add(name)
                log.info("anthropic: server tool %r is not offered to the model (the gateway cannot run it)", name)

    async def _unanswered(self, run: RunFollower, why: Unanswered, request_id: str) -> Response:
        await run.interrupt("client" if why == "gone" else "timeout")
        return _error(codec.client_gone() if why == "gone" else codec.run_timeout(self.run_timeout_s), request_id)

    async def _complete(
        self, request: Request, run: RunFollower, plan: MessagesPlan, estimate: int, message_id: str, request_id: str
    ) -> None:
        async def answer(seen: list[m.Event], why: Unanswered | None) -> Response:
            if why is not None:
                return await self._unanswered(run, why, request_id)
            end = run.end
            assert end is not None
            failure = m.run_end_error(end)
            if failure is not None or not isinstance(end, m.RunFinished):
                return _error(codec.from_error_info(failure or m.ErrorInfo(code="internal", message="the run ended without an answer")), request_id)
            body = reply_codec.message(
                message_id=message_id, model=plan.response_model, finished=end, events=seen, key=self.signing_key,
                show_thinking=plan.show_thinking, input_estimate=estimate,
            )
            return json_response(200, body, headers={"request-id": request_id})

        await answer_run(request, run, timeout_s=self.run_timeout_s, answer=answer)

    async def _stream(
        self, request: Request, run: RunFollower, plan: MessagesPlan, estimate: int, message_id: str, request_id: str
    ) -> Response | None:
        async with watching(request) as watch:  # one watch of the client: the wait, then the stream
            pending, why = await read_run(
                run, timeout_s=self.run_timeout_s, until=lambda event: isinstance(event, reply_codec.OUTPUT), watch=watch
            )
            if why is not None:
                return await self._unanswered(run, why, request_id)
            early = reply_codec.failed_before_output(run.end, pending)
            if early is not None:
                return _error(codec.from_error_info(early), request_id)
            encoder = StreamEncoder(
                message_id=message_id, model=plan.response_model, key=self.signing_key,
                show_thinking=plan.show_thinking, input_estimate=estimate,
            )
            await self._write_stream(request, run, encoder, pending, request_id, watch)
        return None

    async def _write_stream(
        self, request: Request, run: RunFollower, encoder: StreamEncoder, pending: list[m.Event], request_id: str, watch: ClientWatch
    ) -> None:
        send_timeout_s = self.kernel.settings.session.lag_grace_s  # a reader that stopped is let go

        async def frames(batch: list[m.Event]) -> tuple[bytes, bool]:
            out = [frame for event in batch for frame in encoder.event(event)]
            end = run.end
            if end is not None:
                failure = m.run_end_error(end)
                if failure is not None or not isinstance(end, m.RunFinished):
                    out += encoder.failure(codec.from_error_info(failure or m.ErrorInfo(code="internal", message="the run ended without an answer")))
                else:
                    out += encoder.closing(end)
            return b"".join(_sse(out)), end is not None

        await write_run(
            request, run, pending, frames, watch=watch, opening=b"".join(_sse(encoder.opening())),
            keepalive_interval_s=self.keepalive_s, keepalive_frame=_PING, headers={"request-id": request_id}, send_timeout_s=send_timeout_s,
        )
