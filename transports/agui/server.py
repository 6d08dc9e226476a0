"""The AG-UI transport: ``POST {path}`` runs, ``GET {path}/threads/{id}/events`` reconnects.

A run is a kernel run in the thread's session, followed by the kernel's run follower
under the configured policy. With ``ask``, a tool approval (or the turn limit) ends the
SSE stream with an interrupt while the kernel run waits — the follower leaves the
question open — and the client's next run, whose ``resume`` answers it, follows the same
kernel run on. A client that goes away does not stop the run (it can reconnect: its
events are kept, and every SSE event's id is their kernel seq); ``POST
{path}/threads/{id}/interrupt`` stops it. A reconnect with ``Last-Event-ID`` gets the
thread's latest run from there on; without one, a live run from its start, and else (or
when the run's events are gone) the thread's messages as a snapshot.

The server only pumps: the codec (:mod:`.codec`) turns requests into commands, the
encoder (:mod:`.events`) kernel events into AG-UI events; the shared router applies the
security policy (token, Origin/CORS, size and per-IP rate limits) to every route.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn, TypeVar

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Follower, Kernel, KernelError, RunFollower
from kernel import model as m
from transports.base import BannerLine
from transports.shared import (
    ConfigError,
    HttpError,
    Request,
    Response,
    Router,
    add_health_routes,
    add_metrics_route,
    format_sse,
    json_response,
    open_sse,
    serve_http,
    write_frames,
)

from . import codec
from .config import AguiConfig
from .events import Frame, RunEncoder, RunIndex, RunRecord, Segment, snapshot_messages
from .wire import RunAgentInput

log = logging.getLogger("gateway.agui")
T = TypeVar("T")

#: The name this transport gives its followers (``SessionInfo.clients``).
CLIENT = "agui"
#: What the model is told when the configured policy (not the user) declines a tool call.
POLICY_DENIAL = "declined by the agui transport's tool_approval policy"


def _refuse(error: codec.AguiError) -> NoReturn:
    raise HttpError(error.status, error.message, code=error.code, headers=error.headers)


class AguiApi:
    def __init__(self, kernel: Kernel, config: AguiConfig) -> None:
        self.kernel = kernel
        self.config = config
        self.policy = m.approval_policy(config.tool_approval, reason=POLICY_DENIAL)
        try:
            self.agent_id = kernel.agent(config.agent).agent_id() if config.agent else None
        except KernelError as exc:
            raise ConfigError(f"agent: {exc.message}") from None
        self.runs = RunIndex()

    def _agent_prompt(self, agent_id: str) -> str:
        """The system prompt of the thread's agent, which the client's own instructions extend."""
        try:
            return self.kernel.agent(agent_id).system_prompt
        except KernelError:
            return ""

    def register(self, router: Router) -> None:
        path = self.config.path
        router.post(path)(self.run)
        router.post(f"{path}/")(self.run)  # the endpoint's URL as a base URL, with its slash
        router.get(f"{path}/threads/{{thread_id}}/events")(self.events)
        router.post(f"{path}/threads/{{thread_id}}/interrupt")(self.interrupt)

    async def _execute(self, call: Awaitable[T]) -> T:
        """Await a kernel call; a refusal becomes AG-UI's error answer."""
        try:
            return await call
        except KernelError as exc:
            _refuse(codec.from_kernel(exc.info()))

    async def _thread(self, request: Request) -> m.SessionInfo:
        thread_id = request.path_params["thread_id"]
        if not codec.valid_thread_id(thread_id):
            _refuse(codec.bad_request(f"Not a thread id: {thread_id!r}"))
        return (await self._execute(self.kernel.execute(m.GetSession(session_id=thread_id), request.caller))).session

    # ---------------------------------------------------------- runs

    async def run(self, request: Request) -> Response | None:
        parsed = codec.decode_input(await request.body())
        if isinstance(parsed, codec.AguiError):
            _refuse(parsed)
        known = await self._execute(self.kernel.find_session(parsed.thread_id, request.caller))  # None: a new thread
        if parsed.resume:
            return await self._resume(request, parsed, known or m.SessionInfo(session_id=parsed.thread_id, agent_id=""))
        if known is not None and known.state in ("awaiting_tool_approval", "awaiting_turn_confirmation"):
            _refuse(codec.AguiError(status=409, code="busy", message=f"Thread {known.session_id!r} waits for the answer to an interrupt: send it in resume."))
        history = (await self._execute(self.kernel.execute(m.GetHistory(session_id=known.session_id), request.caller))).messages if known is not None and known.message_count else ()
        agent_id = known.agent_id if known is not None else self.kernel.agent(self.agent_id).agent_id()
        plan = codec.plan_run(parsed, history, agent_prompt=self._agent_prompt(agent_id))
        if isinstance(plan, codec.AguiError):
            _refuse(plan)
        # The thread is created once its first run is known to be a good one.
        opened = await self._execute(self.kernel.execute(m.OpenSession(session_id=parsed.thread_id, agent_id=self.agent_id), request.caller))
        info = opened.session
        save, command = codec.run_commands(plan, info.session_id, parsed.run_id)
        if save is not None:
            await self._execute(self.kernel.execute(save, request.caller))
        first = Segment(run_id=parsed.run_id, parent_run_id=parsed.parent_run_id)
        if command is None:
            encoder = RunEncoder(RunRecord(info.session_id, "", first, after_seq=info.last_seq))
            frames = encoder.sync(snapshot_messages(info.session_id, (await self._execute(self.kernel.execute(m.GetHistory(session_id=info.session_id), request.caller))).messages))
            return await self._stream(request, encoder, _no_events, frames)
        try:
            run = await RunFollower.start(
                self.kernel, command, policy=self.policy, stop_on_loss=True, client=CLIENT, decline_on_close=False, caller=request.caller
            )
        except KernelError as exc:
            _refuse(codec.from_kernel(exc.info()))
        assert run.run_id is not None  # a run has its id once accepted
        record = RunRecord(info.session_id, run.run_id, first, after_seq=info.last_seq)
        self.runs.remember(record)
        async with run:
            return await self._stream(request, RunEncoder(record), run.next_batch)

    async def _resume(self, request: Request, parsed: RunAgentInput, info: m.SessionInfo) -> Response | None:
        """Answer the interrupt the thread's run waits on, then follow that run on."""
        plan = codec.plan_resume(parsed, info)
        if isinstance(plan, codec.AguiError):
            _refuse(plan)
        assert info.run_id is not None  # a thread waiting on a question has an active run
        segment = Segment(run_id=parsed.run_id, parent_run_id=parsed.parent_run_id)
        record = self.runs.latest(info.session_id)
        replay = await self._replay(record, request.caller) if record is not None and record.kernel_run_id == info.run_id else None
        after = codec.interrupt_seq(plan.interrupt_id)
        if record is None or replay is None:  # a run started elsewhere, or its start is gone: follow it from here
            record, after = RunRecord(info.session_id, info.run_id, segment, after_seq=info.last_seq), None
            self.runs.remember(record)
            replay = (await self._follow(info.session_id, info.last_seq, request.caller), [])
        record.resumed[plan.interrupt_id] = segment
        follower, events = replay
        async with follower:  # subscribed before the answer: nothing it causes is missed
            await self._execute(self.kernel.execute(plan.answer, request.caller))
            encoder = RunEncoder(record, after=after)
            return await self._stream(request, encoder, follower.next_batch, encoder.feed(events), answered=plan.interrupt_id)

    async def interrupt(self, request: Request) -> Response:
        info = await self._thread(request)
        await self._execute(self.kernel.execute(m.Interrupt(session_id=info.session_id), request.caller))
        return json_response(200, {"threadId": info.session_id, "interrupted": True})

    # ---------------------------------------------------------- reconnect

    async def events(self, request: Request) -> Response | None:
        info = await self._thread(request)
        after = codec.resume_after(request.headers.get("last-event-id"))
        if isinstance(after, codec.AguiError):
            _refuse(after)
        record = self.runs.latest(info.session_id)
        # Without Last-Event-ID a client has nothing of the run: a finished run is in the
        # thread's messages (a snapshot); a live one is replayed from its start.
        live = record is not None and record.kernel_run_id == info.run_id
        replay = await self._replay(record, request.caller) if record is not None and (after is not None or live) else None
        if record is None or replay is None:
            return await self._snapshot(request, info)
        follower, events = replay
        async with follower:
            encoder = RunEncoder(record, after=after)
            return await self._stream(request, encoder, follower.next_batch, encoder.feed(events))

    async def _replay(self, record: RunRecord, caller: m.Caller) -> tuple[Follower, list[m.Event]] | None:
        """Follow the thread from the run's start, with the events ready now; None when
        the run's first events are no longer kept."""
        follower = await self._follow(record.thread_id, record.after_seq, caller)
        ready = await follower.next_batch(deadline=anyio.current_time())
        if ready and isinstance(ready[0], m.SubscriberLagged):
            follower.close()
            return None
        return follower, ready

    async def _snapshot(self, request: Request, info: m.SessionInfo) -> Response | None:
        """The thread's messages, then the active run's events from now (if one is running)."""
        messages = snapshot_messages(info.session_id, (await self._execute(self.kernel.execute(m.GetHistory(session_id=info.session_id), request.caller))).messages)
        record = RunRecord(info.session_id, info.run_id or "", Segment(run_id=f"{info.session_id}:{info.last_seq}"), after_seq=info.last_seq)
        encoder = RunEncoder(record)
        if info.run_id is None:
            return await self._stream(request, encoder, _no_events, encoder.sync(messages))
        follower = await self._follow(info.session_id, info.last_seq, request.caller)
        async with follower:
            return await self._stream(request, encoder, follower.next_batch, encoder.open_with(messages))

    async def _follow(self, thread_id: str, after_seq: int, caller: m.Caller) -> Follower:
        try:
            # A stream resumable by Last-Event-ID must have no hole: it ends at a gap.
            return await Follower.open(self.kernel, thread_id, after_seq, stop_on_loss=True, client=CLIENT, caller=caller)
        except KernelError as exc:
            _refuse(codec.from_kernel(exc.info()))

    # ---------------------------------------------------------- the stream

    async def _stream(
        self,
        request: Request,
        encoder: RunEncoder,
        next_batch: Callable[[], Awaitable[list[m.Event]]],
        frames: Sequence[Frame] = (),
        *,
        answered: str | None = None,
    ) -> Response | None:
        """Pump the run's events to the client until its AG-UI run ends: the kernel run's
        end, or an interrupt the client must answer (not ``answered``, the one this request
        just answered). None: the response was streamed."""
        send_timeout_s = self.kernel.settings.session.lag_grace_s
        headers = {"x-thread-id": encoder.record.thread_id}
        async with open_sse(request, keepalive_interval_s=self.config.sse_keepalive_s, headers=headers, send_timeout_s=send_timeout_s) as stream:
            pending = list(frames)
            while True:
                # The write that ends the AG-UI run ends the response with it.
                last = encoder.ended or (encoder.waiting is not None and encoder.waiting != answered)
                if pending and not await write_frames(stream, [format_sse(data, id=id) for data, id in pending], last=last):
                    break
                if last:
                    break
                batch = await next_batch()
                pending = encoder.feed(batch)
                if not batch:
                    pending += encoder.give_up("internal", "the thread was closed before its run ended")
                elif isinstance(batch[-1], m.SubscriberLagged) and not encoder.ended:
                    pending += encoder.give_up(batch[-1].end_code, f"events of the run were lost: {batch[-1].error.message}; reconnect")
        return None


async def _no_events() -> list[m.Event]:
    return []


class AguiApp:
    """The ASGI application: the API behind the shared router."""

    def __init__(self, kernel: Kernel, config: AguiConfig) -> None:
        # The router's Origin allow-list is ServerConfig.allowed_origins: give it ours.
        router_config = msgspec.structs.replace(config, allowed_origins=list(config.cors_origins))
        self.router = Router(router_config, error_body=codec.error_body, cors=bool(config.cors_origins), keys=kernel, transport=AguiTransport.name)
        self.api = AguiApi(kernel, config)
        self.api.register(self.router)
        add_health_routes(self.router, kernel)
        add_metrics_route(self.router, kernel.observers.metrics)


class AguiTransport:
    name = "agui"
    description = "AG-UI for web front-ends (CopilotKit, @ag-ui/client): POST RunAgentInput, SSE events, interrupts, resume"
    Config = AguiConfig

    async def serve(self, kernel: Kernel, config: AguiConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        app = AguiApp(kernel, config)  # a bad agent or policy is refused before anything is bound
        await serve_http(
            app.router, config, lag_grace_s=kernel.settings.session.lag_grace_s, error_body=app.router.error_body,
            connections=(kernel.observers, self.name), task_status=task_status,
        )

    def banner(self, kernel: Kernel, config: AguiConfig, address: str | None, command: str) -> list[BannerLine]:
        """The endpoint an AG-UI client (``HttpAgent({url})``) posts its runs to."""
        return [BannerLine("agui", f"{address}{config.path}")]
