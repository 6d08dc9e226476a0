"""OpenAI Responses routes: ``POST /v1/responses``, ``GET`` / ``DELETE /v1/responses/{id}``.

A response is one kernel run, followed by the kernel's run follower under the
transport's OpenAI approval policy (nobody can answer a question on this API). Where
it runs:

* ``store`` (the default): in a kernel session, which other dialects can see and
  continue (its id is the response's ``conversation.id`` and the ``x-session-id``
  header); ``previous_response_id`` continues that session where the response left it
  (in place when it is still the latest turn, else in a new session holding the
  conversation up to it) and ``conversation`` continues a session as it is now;
* ``store: false``: in an ephemeral session (a copy, when it continues one), deleted
  when the answer is out: nothing is written.

Stored responses are kept in a bounded map of this process (``stored.py``); an
``item_reference`` input names an output item of one of them. A client that disconnects
interrupts the run; its response ends ``cancelled``. Streams hold their headers until the
run's first output or the upstream's acceptance (``model_responding``), so that a failure
before that keeps its HTTP status (a rate limit, as OpenAI answers it); after that an answer
that is not whole (a failure, an interrupt, a drain) is ``response.failed``. Hosted tools
(``web_search`` …) are left out, logged once per type. Reasoning items are sealed with a key
of the gateway's (``sealed.py``).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from kernel import Kernel, KernelError, RunFollower
from kernel import model as m
from transports.shared import ClientWatch, Request, Response, Router, format_sse, json_response, watching

from ..openai.codec import client_gone, from_error_info, run_timeout
from ..openai.wire import OpenAIError
from ..runs import Unanswered, answer_run, read_run, write_run
from . import codec
from . import wire as w
from .codec import Frame, ResponseBuilder, ResponsePlan
from .stored import ResponseStore, StoredResponse

log = logging.getLogger("gateway.http")

#: The label of the sessions this API creates (it unloads them between requests).
SESSION_LABEL = "openai responses"
#: How long a run interrupted because its client left may take to record its end.
SETTLE_S = 5.0


class _Refused(Exception):
    """A request refused while its conversation is looked up, with OpenAI's error."""

    def __init__(self, error: OpenAIError) -> None:
        super().__init__(error.message)
        self.error = error


def _error(error: OpenAIError) -> Response:
    return json_response(error.status, error.body(), headers=error.headers)


class ResponsesApi:
    def __init__(
        self, kernel: Kernel, *, keepalive_s: float, run_timeout_s: float, policy: m.ApprovalPolicy, stored: ResponseStore, signing_key: bytes | None = None
    ) -> None:
        """``signing_key``: the http transport's key (``server.signing_key``: derived from the
        token, so sealed reasoning opens after a restart and on every instance sharing it;
        None: random). Reasoning is sealed under a key of its own derived from it."""
        self.kernel = kernel
        self.keepalive_s = keepalive_s
        self.run_timeout_s = run_timeout_s
        self.policy = policy
        self.stored = stored
        self.seal_key = hashlib.sha256(b"gateway responses sealed reasoning\0" + (signing_key or secrets.token_bytes(32))).digest()
        #: Hosted tool types already logged as left out.
        self._hosted_logged: set[str] = set()

    def register(self, router: Router) -> None:
        router.post("/v1/responses")(self.create)
        router.get("/v1/responses/{response_id}")(self.retrieve)
        router.delete("/v1/responses/{response_id}")(self.delete)

    # ---------------------------------------------------------- stored responses

    async def retrieve(self, request: Request) -> Response:
        if request.query.get("stream", "").lower() in ("1", "true"):
            return _error(codec.not_streamable())
        record = await self._visible(request.caller, self.stored.get(request.path_params["response_id"]))
        if record is None:
            return _error(codec.response_not_found(request.path_params["response_id"]))
        return Response(200, record.body, content_type="application/json")

    async def delete(self, request: Request) -> Response:
        """Forgets the response; its conversation stays (a kernel session: delete it there)."""
        response_id = request.path_params["response_id"]
        if await self._visible(request.caller, self.stored.get(response_id)) is None or not self.stored.delete(response_id):
            return _error(codec.response_not_found(response_id))
        return json_response(200, w.Deleted(id=response_id))

    async def _visible(self, caller: m.Caller, record: StoredResponse | None) -> StoredResponse | None:
        """A stored response is the caller's when its conversation (a kernel session) is:
        another key's response is answered as one that does not exist."""
        if record is None or caller.principal.is_admin:
            return record
        return record if await self.kernel.find_session(record.session_id, caller) is not None else None

    # ---------------------------------------------------------- create

    async def create(self, request: Request) -> Response | None:
        parsed = codec.decode_request(await request.body())
        if isinstance(parsed, OpenAIError):
            return _error(parsed)
        refused = codec.check_request(parsed)
        if refused is not None:
            return _error(refused)
        previous: StoredResponse | None = None
        if parsed.previous_response_id:
            previous = await self._visible(request.caller, self.stored.get(parsed.previous_response_id))
            if previous is None:
                return _error(codec.previous_not_found(parsed.previous_response_id))
            if not previous.done:
                return _error(codec.previous_in_progress(parsed.previous_response_id))
        references = await self._references(parsed, request.caller)
        if isinstance(references, OpenAIError):
            return _error(references)
        agents = [self.kernel.agent_info(agent) for agent in self.kernel.settings.agents]
        plan = codec.plan_response(
            parsed, agents, context_limit=self.kernel.settings.session.history_cap, known_calls=previous.calls if previous else None,
            references=references,
        )
        if isinstance(plan, OpenAIError):
            return _error(plan)
        self._log_hosted(plan.tools.hosted)
        response_id = f"resp_{secrets.token_hex(16)}"
        try:
            async with self._conversation(plan, previous, request.caller) as session_id:
                builder = ResponseBuilder(
                    response_id=response_id, created_at=int(time.time()), model=plan.response_model, echo=plan.echo,
                    client_tools={tool.name: plan.tools.targets[tool.name] for tool in plan.options.client_tools},
                    conversation_id=session_id if plan.store else None, seal_key=self.seal_key,
                )
                command = codec.run_command(plan, session_id, response_id)
                async with await RunFollower.start(self.kernel, command, policy=self.policy, client="http", caller=request.caller) as run:
                    if plan.store:
                        self.stored.put(StoredResponse(response_id=response_id, session_id=session_id, body=codec.encode(builder.snapshot())))
                    try:
                        if plan.stream:
                            return await self._stream(request, run, builder)
                        await self._complete(request, run, builder)
                        return None
                    finally:
                        await self._settle(run, builder, request.caller)
        except _Refused as exc:
            return _error(exc.error)
        except KernelError as exc:
            return _error(from_error_info(exc.info()))

    async def _complete(self, request: Request, run: RunFollower, builder: ResponseBuilder) -> None:
        """The whole answer; one that is not whole is ``status: "failed"`` with its error
        and the partial output — or, with no output at all, the error's HTTP status."""

        async def answer(seen: list[m.Event], why: Unanswered | None) -> Response:
            if why is not None:
                return await self._unanswered(run, why)
            for event in seen:
                builder.feed(event)
            end = run.end
            assert end is not None
            await self._finish(builder, end, request.caller)
            error = m.run_end_error(end)
            if error is not None and not builder.output:
                return _error(from_error_info(error))
            assert builder.final is not None
            return Response(200, codec.encode(builder.final), content_type="application/json", headers=self._headers(builder))

        await answer_run(request, run, timeout_s=self.run_timeout_s, answer=answer)

    async def _stream(self, request: Request, run: RunFollower, builder: ResponseBuilder) -> Response | None:
        async with watching(request) as watch:  # one watch of the client: the wait, then the stream
            return await self._watched_stream(request, run, builder, watch)

    async def _watched_stream(self, request: Request, run: RunFollower, builder: ResponseBuilder, watch: ClientWatch) -> Response | None:
        pending, why = await read_run(run, timeout_s=self.run_timeout_s, until=builder.shows, watch=watch)
        if why is not None:
            return await self._unanswered(run, why)
        error = m.run_end_error(run.end) if run.end is not None else None
        if run.end is not None and error is not None and not any(builder.shows(event) for event in pending):
            await self._finish(builder, run.end, request.caller)
            return _error(from_error_info(error))
        send_timeout_s = self.kernel.settings.session.lag_grace_s  # a reader that stopped is let go

        def sse(named: list[tuple[str, bytes]]) -> bytes:
            return b"".join(format_sse(data, event=name) for name, data in named)

        async def frames(batch: list[m.Event]) -> tuple[bytes, bool]:
            out = [frame for event in batch for frame in builder.feed(event)]
            end = run.end
            if end is not None:
                out += await self._finish(builder, end, request.caller)
            return sse(out), end is not None

        await write_run(
            request, run, pending, frames, watch=watch, opening=sse(builder.opening()),
            keepalive_interval_s=self.keepalive_s, headers=self._headers(builder), send_timeout_s=send_timeout_s,
        )
        return None

    async def _unanswered(self, run: RunFollower, why: Unanswered) -> Response:
        await run.interrupt("client" if why == "gone" else "timeout")
        return _error(client_gone() if why == "gone" else run_timeout(self.run_timeout_s))

    @staticmethod
    def _headers(builder: ResponseBuilder) -> dict[str, str]:
        headers = {"x-request-id": builder.response_id}
        if builder.conversation_id is not None:
            headers["x-session-id"] = builder.conversation_id
        return headers

    async def _finish(self, builder: ResponseBuilder, end: m.RunFinished | m.RunFailed, caller: m.Caller, *, client_left: bool = False) -> list[Frame]:
        """The response's last events; a stored response is recorded first, so that a
        client reading its end can continue from it at once."""
        frames = builder.finish(end, int(time.time()), client_left=client_left)
        stored = self.stored.get(builder.response_id)
        if stored is None or builder.final is None:  # not stored, or deleted or dropped meanwhile
            return frames
        try:
            latest = (await self.kernel.execute(m.GetHistory(session_id=stored.session_id, limit=1), caller)).messages
        except KernelError as exc:  # the conversation is gone: so is what continues it
            log.debug("recording response %s: %s", builder.response_id, exc.message)
            self.stored.delete(builder.response_id)
            return frames
        self.stored.put(
            StoredResponse(
                response_id=stored.response_id, session_id=stored.session_id, body=codec.encode(builder.final), done=True,
                last_message_at=latest[-1].created_at if latest else None, calls=dict(builder.calls),
                item_ids=tuple(item.id for item in builder.final.output),
            )
        )
        return frames

    async def _settle(self, run: RunFollower, builder: ResponseBuilder, caller: m.Caller) -> None:
        """After the answer: a run its client left (or whose wait ran out) is interrupted,
        and its end recorded."""
        if builder.final is not None:
            return
        with anyio.CancelScope(shield=True):
            await run.interrupt()
            with anyio.move_on_after(SETTLE_S):
                await run.wait()
            end = run.end or m.RunFailed(
                session_id=run.session_id, run_id=run.run_id or "", request_id=run.request_id,
                error=m.ErrorInfo(code="internal", message=f"the run did not end within {SETTLE_S:g}s of its interrupt"),
            )
            await self._finish(builder, end, caller, client_left=True)

    async def _references(self, request: w.ResponsesRequest, caller: m.Caller) -> dict[str, dict[str, Any]] | OpenAIError:
        """The stored items the request's ``item_reference`` inputs name (the caller's only)."""
        found: dict[str, dict[str, Any]] = {}
        opened: dict[str, dict[str, dict[str, Any]]] = {}  # response id -> its items: each checked and decoded once
        for index, item_id in codec.referenced_ids(request):
            record = self.stored.holding(item_id)
            items = opened.get(record.response_id) if record is not None else None
            if record is not None and items is None:
                visible = record.done and await self._visible(caller, record) is not None
                items = opened[record.response_id] = codec.stored_items(record.body) if visible else {}
            item = items.get(item_id) if items else None
            if item is None:
                return codec.unknown_reference(index, item_id)
            found[item_id] = item
        return found

    def _log_hosted(self, kinds: tuple[str, ...]) -> None:
        for kind in kinds:
            if kind not in self._hosted_logged and len(self._hosted_logged) < 64:  # clients choose the types: bounded
                self._hosted_logged.add(kind)
                log.info("responses: tools of type %r are run by OpenAI's servers, not by this gateway: not offered to the model", kind)

    # ---------------------------------------------------------- sessions

    @asynccontextmanager
    async def _conversation(self, plan: ResponsePlan, previous: StoredResponse | None, caller: m.Caller) -> AsyncIterator[str]:
        """The session the response runs in (the caller's), with the request's input saved as its history."""
        in_place, copied, agent_id = await self._source(plan, previous, caller)
        history = (*copied, *plan.history)
        if in_place is not None:
            session_id = in_place
        elif plan.store:
            session_id = (await self.kernel.execute(m.OpenSession(agent_id=agent_id, label=SESSION_LABEL), caller)).session.session_id
        else:  # opened with its history: one command (what Codex sends, ``store: false``, every turn)
            opened = await self.kernel.execute(m.OpenSession(agent_id=agent_id, label=SESSION_LABEL, ephemeral=True, history=history), caller)
            session_id, history = opened.session.session_id, ()
        try:
            if history:
                await self.kernel.execute(m.SaveHistory(session_id=session_id, messages=history), caller)
            yield session_id
        finally:
            with anyio.CancelScope(shield=True):
                await self._release(session_id, caller, ephemeral=not plan.store)

    async def _source(
        self, plan: ResponsePlan, previous: StoredResponse | None, caller: m.Caller
    ) -> tuple[str | None, tuple[m.Message, ...], str]:
        """Where the conversation comes from: a session to continue in place, or the
        messages to copy into a new one; and the agent."""
        if plan.conversation_id is not None:
            info = await self._session(plan.conversation_id, codec.conversation_not_found(plan.conversation_id), caller)
            self._check_agent(plan, info)
            if plan.store:
                return info.session_id, (), info.agent_id
            return None, (await self.kernel.execute(m.GetHistory(session_id=info.session_id), caller)).messages, info.agent_id
        if previous is not None:
            info = await self._session(previous.session_id, codec.previous_not_found(previous.response_id), caller)
            self._check_agent(plan, info)
            if plan.store:
                latest = (await self.kernel.execute(m.GetHistory(session_id=info.session_id, limit=1), caller)).messages
                if (latest[-1].created_at if latest else None) == previous.last_message_at:
                    return info.session_id, (), info.agent_id
            earlier = (await self.kernel.execute(m.GetHistory(session_id=info.session_id), caller)).messages
            copied = codec.history_until(earlier, previous.last_message_at)
            if copied is None:
                raise _Refused(codec.previous_gone(previous.response_id))
            return None, copied, info.agent_id
        return None, (), plan.agent_id

    async def _session(self, session_id: str, missing: OpenAIError, caller: m.Caller) -> m.SessionInfo:
        info = await self.kernel.find_session(session_id, caller)
        if info is None:
            raise _Refused(missing)
        return info

    def _check_agent(self, plan: ResponsePlan, info: m.SessionInfo) -> None:
        if plan.agent_named and info.agent_id != plan.agent_id:
            raise _Refused(codec.other_agent(plan.response_model))

    async def _release(self, session_id: str, caller: m.Caller, *, ephemeral: bool) -> None:
        """An ephemeral session is deleted; one this API created is unloaded while nobody
        follows it (it reloads from the store when continued), so that clients sending
        whole conversations do not keep a live session each."""
        try:
            if ephemeral:
                await self.kernel.execute(m.DeleteSession(session_id=session_id), caller)
                return
            reply = await self.kernel.execute(m.GetSession(session_id=session_id), caller)
            info = reply.session
            if info.label == SESSION_LABEL and info.subscribers == 0 and not info.busy:
                await self.kernel.execute(m.CloseSession(session_id=session_id, if_unwatched=True), caller)
        except KernelError as error:
            log.debug("releasing session %s: %s", session_id, error.message)

