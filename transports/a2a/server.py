"""The A2A transport: agent cards, the JSON-RPC binding and the HTTP+JSON binding.

Every agent is served at ``/agents/{agent_id}`` (card, JSON-RPC endpoint, REST paths), the
configured default agent also at the root. A task is a kernel run (``transports.shared``'s
:class:`TaskBook`: the task id names the session, ``contextId``); the methods of both bindings
share one implementation working in A2A 1.0's shapes, and a JSON-RPC request without
``A2A-Version: 1.0`` is answered in 0.3's names and shapes. Streams follow the run with the
kernel's followers, so a stream — and SubscribeToTask — works on any instance of a cluster.
The shared router applies the token, Origin, size and rate limits to every route but the cards.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import anyio
import msgspec
from anyio.abc import TaskStatus

from kernel import Kernel, KernelError, http_headers
from kernel import model as m
from transports.base import BannerLine
from transports.shared import (
    ConfigError,
    HttpError,
    Request,
    Response,
    Router,
    RunTask,
    TaskBook,
    TaskFollower,
    add_health_routes,
    add_metrics_route,
    format_sse,
    json_response,
    open_sse,
    serve_http,
    session_of,
    write_frames,
)

from . import codec
from . import wire as w
from .config import A2AConfig
from .push import Pusher, PushRefused, check_url

log = logging.getLogger("gateway.a2a")

#: The name this transport gives its followers and its commands' caller.
CLIENT = "a2a"
POLICY_DENIAL = "declined by the a2a transport's tool_approval policy"
VERSION_HEADER = "a2a-version"
#: ListTasks pages: the default and the largest size, and how many sessions one listing reads.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
MAX_SESSIONS_LISTED = 100
CANCEL_WAIT_S = 30.0

_encoder = msgspec.json.Encoder()


class A2AFail(Exception):
    def __init__(self, failure: codec.Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _fail(failure: codec.Failure) -> NoReturn:
    raise A2AFail(failure)


def view_of(task: RunTask) -> codec.TaskView:
    return codec.TaskView(
        task_id=task.task_id, context_id=task.session_id, state=task.state, text=task.text, prompt=task.prompt,
        question=task.question, error=task.error, updated_at=task.updated_at,
    )


class _Run:
    """One request's stream of a task: the run's events (a TaskFollower) as A2A stream events."""

    def __init__(self, feed: TaskFollower, *, fresh: bool = False) -> None:
        self.feed = feed
        self.task = feed.task
        self.encoder = codec.StreamEncoder(self.task.task_id, self.task.session_id, sent_text=bool(self.task.chunks) and not fresh)

    def first(self) -> list[w.StreamResponse]:
        """The Task as it stands (every stream begins with it); the stream is done at once
        when the task already waits for input."""
        if self.task.state != "working":
            self.encoder.done = True
        return [w.StreamResponse(task=codec.task_out(view_of(self.task)))]

    async def next(self) -> list[w.StreamResponse]:
        out: list[w.StreamResponse] = []
        for event in await self.feed.next():
            out += self.encoder.feed(event, view_of(self.task))
        return out


class A2AApi:
    def __init__(self, kernel: Kernel, config: A2AConfig, *, token: str | None) -> None:
        self.kernel = kernel
        self.config = config
        self.token = token
        self.policy = m.approval_policy(config.tool_approval, reason=POLICY_DENIAL)
        try:
            self.agent_id = kernel.agent(config.agent).agent_id()
        except KernelError as exc:
            raise ConfigError(f"agent: {exc.message}") from None
        # The cards are public: the tools they list are read as the transport itself.
        self.card_caller = m.Caller(transport=CLIENT)
        self.book = TaskBook(kernel, client=CLIENT, capacity=config.max_tasks)
        self.pusher = Pusher(config.push_allow, timeout_s=config.push_timeout_s, retries=config.push_retries, max_tasks=config.max_tasks)
        self.book.listeners.append(self._push)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self.book.run)
            await tg.start(self.pusher.run)
            task_status.started()

    # ---------------------------------------------------------- routes

    def register(self, router: Router) -> None:
        for card in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
            router.get(card, auth=False)(self.card)
            router.get(f"/agents/{{agent_id}}{card}", auth=False)(self.card)
        for prefix in ("", "/agents/{agent_id}"):
            router.post(prefix or "/")(self.jsonrpc)
            rest: list[tuple[str, str, Callable[..., Awaitable[Any]]]] = [
                ("POST", "/message:send", self._rest_send),
                ("POST", "/message:stream", self._rest_stream),
                ("GET", "/tasks/{task_id}:subscribe", self._rest_subscribe),
                ("POST", "/tasks/{task_id}:subscribe", self._rest_subscribe),
                ("POST", "/tasks/{task_id}:cancel", self._rest_cancel),
                ("POST", "/tasks/{task_id}/pushNotificationConfigs", self._rest_push_create),
                ("GET", "/tasks/{task_id}/pushNotificationConfigs", self._rest_push_list),
                ("GET", "/tasks/{task_id}/pushNotificationConfigs/{config_id}", self._rest_push_get),
                ("DELETE", "/tasks/{task_id}/pushNotificationConfigs/{config_id}", self._rest_push_delete),
                ("GET", "/tasks/{task_id}", self._rest_get),
                ("GET", "/tasks", self._rest_list),
                ("GET", "/extendedAgentCard", self._rest_card),
            ]
            for method, path, handler in rest:
                router.route(method, prefix + path, self._rest(handler))

    def _agent(self, request: Request) -> str:
        ref = request.path_params.get("agent_id")
        if ref is None:
            return self.agent_id
        try:
            return self.kernel.agent(ref).agent_id()
        except KernelError:
            raise HttpError(404, f"No agent {ref!r}", code="not_found") from None

    def _url(self, request: Request, agent_id: str) -> str:
        base = (self.config.public_url or f"http://{request.headers.get('host', f'127.0.0.1:{self.config.port}')}").rstrip("/")
        return f"{base}/agents/{agent_id}" if "agent_id" in request.path_params else f"{base}/"

    async def _card(self, request: Request) -> w.AgentCard:
        agent_id = self._agent(request)
        settings = self.kernel.agent(agent_id)
        info = self.kernel.agent_info(settings)
        listed = await self.kernel.execute(m.ListTools(), self.card_caller)
        assert isinstance(listed, m.ToolList)
        tools = [t for t in listed.tools if t.name in info.tools] if info.tools else []
        required = await self._credentials_required()
        return codec.agent_card(
            info, url=self._url(request, agent_id), version=self.kernel.version, tools=tools, token_required=required, push=bool(self.pusher.allow)
        )

    async def _credentials_required(self) -> bool:
        """Whether a client must authenticate: an admin token is set, or API keys exist."""
        return self.token is not None or await self.kernel.keys_required()

    async def card(self, request: Request) -> Response:
        return json_response(200, await self._card(request))

    # ---------------------------------------------------------- the methods (1.0 shapes)

    async def _execute(self, command: m.Command, caller: m.Caller) -> m.Reply:
        try:
            return await self.kernel.execute(command, caller)
        except KernelError as exc:
            _fail(codec.from_kernel(exc.info()))

    async def _task(self, task_id: str, caller: m.Caller) -> RunTask:
        try:
            task = await self.book.get(task_id, caller)
        except KernelError as exc:
            _fail(codec.from_kernel(exc.info()))
        if task is None:
            _fail(codec.task_not_found(f"Task not found: {task_id!r}"))
        return task

    async def _send(self, request: Request, params: w.SendMessageRequest, *, follow: bool) -> tuple[RunTask, _Run | None]:
        """Start a task, or answer the question a task waits on; with ``follow`` a _Run that
        has seen every event since (for a stream, or for a blocking answer)."""
        message = params.message
        if message is None:
            _fail(codec.invalid_params("SendMessage needs a message"))
        config = params.configuration or w.SendMessageConfiguration()
        push = config.task_push_notification_config
        refused = codec.output_modes_problem(config.accepted_output_modes)
        if refused is not None:
            _fail(refused)
        if push is not None:
            self._check_push(push.url)
        if message.task_id:
            task, run = await self._continue(message, request.caller, follow=follow)
            if push is not None:
                self.pusher.add(msgspec.structs.replace(push, task_id=task.task_id), config_id=push.id or uuid.uuid4().hex)
            return task, run
        context_id = message.context_id or None
        if context_id is not None and session_of(f"{context_id}~x") is None:
            _fail(codec.invalid_params(f"A contextId is 1-128 letters, digits, '.', '_' or '-': {context_id!r}"))
        parts = codec.prompt_parts(message.parts)
        if isinstance(parts, codec.Failure):
            _fail(parts)
        prompt = m.Prompt(session_id=context_id, agent_id=self._agent(request), parts=parts, options=m.PromptOptions(approval=self.policy))
        try:
            task, feed = await self.book.start(prompt, request.caller, follow=follow)
        except KernelError as exc:
            _fail(codec.from_kernel(exc.info()))
        if push is not None:
            self.pusher.add(msgspec.structs.replace(push, task_id=task.task_id), config_id=push.id or uuid.uuid4().hex)
        return task, (_Run(feed, fresh=True) if feed is not None else None)

    async def _continue(self, message: w.Message, caller: m.Caller, *, follow: bool) -> tuple[RunTask, _Run | None]:
        task_id = message.task_id or ""
        session_id = session_of(task_id)
        if message.context_id and session_id is not None and message.context_id != session_id:
            _fail(codec.invalid_params(f"Task {task_id!r} belongs to context {session_id!r}, not {message.context_id!r}"))
        task = await self._task(task_id, caller)
        if task.terminal:
            _fail(codec.unsupported_operation(f"Task {task_id!r} is in a terminal state ({task.state})"))
        if task.state != "input_required":
            _fail(codec.unsupported_operation(f"Task {task_id!r} is working; a message on it answers a question (state input-required)"))
        answer = codec.answer_of(message.parts)
        if answer is None:
            _fail(codec.invalid_params('The task waits for an answer: the text "approve" or "reject", or a data part {"approved": true|false}'))
        feed = await self._follow(task, caller) if follow else None
        try:
            await self.book.answer(task, answer[0], answer[1], caller)
        except KernelError as exc:
            if feed is not None:
                feed.follower.close()
            _fail(codec.from_kernel(exc.info()))
        if feed is None:
            return task, None
        feed.task.state, feed.task.question = "working", None
        return task, _Run(feed)

    async def _follow(self, task: RunTask, caller: m.Caller) -> TaskFollower:
        try:
            return await self.book.follow(task, caller)
        except KernelError as exc:
            _fail(codec.from_kernel(exc.info()))

    async def send_message(self, request: Request, params: w.SendMessageRequest) -> w.StreamResponse:
        config = params.configuration or w.SendMessageConfiguration()
        task, run = await self._send(request, params, follow=not config.return_immediately)
        if run is None:
            return w.StreamResponse(task=codec.task_out(view_of(task), history_length=config.history_length))
        async with run.feed:
            await run.feed.settle()
        return w.StreamResponse(task=codec.task_out(view_of(run.task), history_length=config.history_length))

    async def open_stream(self, request: Request, params: w.SendMessageRequest) -> tuple[_Run, list[w.StreamResponse]]:
        _, run = await self._send(request, params, follow=True)
        assert run is not None
        return run, run.first()

    async def subscribe(self, task_id: str, caller: m.Caller) -> tuple[_Run, list[w.StreamResponse]]:
        task = await self._task(task_id, caller)
        if task.terminal:
            _fail(codec.unsupported_operation(f"Task {task_id!r} is in a terminal state ({task.state}): there is nothing to subscribe to"))
        run = _Run(await self._follow(task, caller))
        return run, run.first()

    async def get_task(self, params: w.GetTaskRequest, caller: m.Caller) -> w.Task:
        return codec.task_out(view_of(await self._task(params.id, caller)), history_length=params.history_length)

    async def cancel_task(self, task_id: str, caller: m.Caller) -> w.Task:
        task = await self._task(task_id, caller)
        if task.terminal:
            _fail(codec.task_not_cancelable(f"Task {task_id!r} is already {task.state}"))
        async with await self._follow(task, caller) as feed:
            try:
                await self.book.cancel(task, caller)
            except KernelError:  # it ended meanwhile
                return codec.task_out(view_of(await self._task(task_id, caller)))
            with anyio.move_on_after(CANCEL_WAIT_S):
                while not feed.task.terminal:
                    await feed.next()
        return codec.task_out(view_of(feed.task))

    async def list_tasks(self, params: w.ListTasksRequest, caller: m.Caller) -> w.ListTasksResponse:
        size = min(params.page_size or PAGE_SIZE, MAX_PAGE_SIZE)
        try:
            if params.context_id:
                tasks = await self.book.list(params.context_id, caller)
            else:
                listed = await self._execute(m.ListSessions(), caller)
                assert isinstance(listed, m.SessionList)
                tasks = []
                for info in listed.sessions[:MAX_SESSIONS_LISTED]:
                    tasks += await self.book.list(info.session_id, caller)
        except KernelError as exc:
            _fail(codec.from_kernel(exc.info()))
        views = sorted((view_of(t) for t in tasks), key=lambda v: v.updated_at, reverse=True)
        if params.status and params.status != "TASK_STATE_UNSPECIFIED":
            views = [v for v in views if codec.state_of(v.state) == params.status]
        if params.status_timestamp_after:
            after = codec.parse_timestamp(params.status_timestamp_after)
            if isinstance(after, codec.Failure):
                _fail(after)
            views = [v for v in views if int(v.updated_at * 1000) > round(after * 1000)]  # timestamps are to the millisecond
        start = int(params.page_token) if params.page_token and params.page_token.isdigit() else 0
        page = views[start : start + size]
        more = start + size < len(views)
        return w.ListTasksResponse(
            tasks=[codec.task_out(v, history_length=params.history_length, artifacts=bool(params.include_artifacts)) for v in page],
            next_page_token=str(start + size) if more else "", page_size=size, total_size=len(views),
        )

    def _check_push(self, url: str) -> None:
        if not self.pusher.allow:
            _fail(codec.push_not_supported("Push notifications are off on this server (its push_allow list is empty)"))
        try:
            check_url(url, self.pusher.allow)
        except PushRefused as exc:
            _fail(codec.invalid_params(str(exc)))

    async def push_create(self, config: w.TaskPushNotificationConfig, caller: m.Caller) -> w.TaskPushNotificationConfig:
        await self._task(config.task_id, caller)
        self._check_push(config.url)
        try:
            return self.pusher.add(config, config_id=config.id or uuid.uuid4().hex)
        except PushRefused as exc:
            _fail(codec.invalid_params(str(exc)))

    async def push_get(self, params: w.PushConfigRequest, caller: m.Caller) -> w.TaskPushNotificationConfig:
        await self._task(params.task_id, caller)
        configs = self.pusher.configs.get(params.task_id, {})
        found = configs.get(params.id or "") if params.id else next(iter(configs.values()), None)
        if found is None:
            _fail(codec.task_not_found(f"No push notification config {params.id!r} for task {params.task_id!r}"))
        return found

    async def push_list(self, params: w.PushConfigRequest, caller: m.Caller) -> w.ListPushConfigsResponse:
        await self._task(params.task_id, caller)
        return w.ListPushConfigsResponse(configs=list(self.pusher.configs.get(params.task_id, {}).values()))

    async def push_delete(self, params: w.PushConfigRequest, caller: m.Caller) -> None:
        await self._task(params.task_id, caller)
        self.pusher.configs.get(params.task_id, {}).pop(params.id or "", None)

    async def extended_card(self, request: Request) -> w.AgentCard:
        if not await self._credentials_required():
            _fail(codec.extended_card_not_configured("This server has no extended agent card (it requires no token)"))
        return await self._card(request)

    async def _push(self, task: RunTask) -> None:
        view = view_of(task)
        update = w.TaskStatusUpdateEvent(task_id=task.task_id, context_id=task.session_id, status=codec.status_of(view))
        self.pusher.notify(task.task_id, w.StreamResponse(status_update=update))

    # ---------------------------------------------------------- JSON-RPC binding

    async def jsonrpc(self, request: Request) -> Response | None:
        version = codec.version_of(request.headers.get(VERSION_HEADER))
        if isinstance(version, codec.Failure):
            return json_response(200, codec.rpc_error(version, None))
        call = codec.decode_call(await request.body(), version)
        if isinstance(call, tuple):
            return json_response(200, codec.rpc_error(*call))

        def shape(result: Any) -> Any:
            return codec.to_v03(result) if version == "0.3" else result

        try:
            if call.method in codec.STREAMING:
                if call.method == "SubscribeToTask":
                    run, first = await self.subscribe(call.params.id, request.caller)
                else:
                    run, first = await self.open_stream(request, call.params)
                await self._pump(request, run, first, lambda r: _encoder.encode(w.RpcResult(id=call.id, result=shape(r))))
                return None
            result = await self._call(request, call.method, call.params)
        except A2AFail as exc:
            return json_response(200, codec.rpc_error(exc.failure, call.id))
        return json_response(200, w.RpcResult(id=call.id, result=shape(result)))

    async def _call(self, request: Request, method: str, params: Any) -> Any:
        if method == "SendMessage":
            return await self.send_message(request, params)
        if method == "GetTask":
            return await self.get_task(params, request.caller)
        if method == "ListTasks":
            return await self.list_tasks(params, request.caller)
        if method == "CancelTask":
            return await self.cancel_task(params.id, request.caller)
        if method == "CreateTaskPushNotificationConfig":
            return await self.push_create(params, request.caller)
        if method == "GetTaskPushNotificationConfig":
            return await self.push_get(params, request.caller)
        if method == "ListTaskPushNotificationConfigs":
            return await self.push_list(params, request.caller)
        if method == "DeleteTaskPushNotificationConfig":
            await self.push_delete(params, request.caller)
            return None
        return await self.extended_card(request)

    async def _pump(self, request: Request, run: _Run, frames: list[w.StreamResponse], encode: Callable[[w.StreamResponse], bytes]) -> None:
        """Write the stream until the task is terminal or waits for input; then close it."""
        send_timeout_s = self.kernel.settings.session.lag_grace_s
        async with run.feed, open_sse(request, keepalive_interval_s=self.config.sse_keepalive_s, send_timeout_s=send_timeout_s) as stream:
            pending = frames
            while True:
                last = run.encoder.done  # the write that ends the task's stream ends the response with it
                if pending and not await write_frames(stream, [format_sse(encode(f)) for f in pending], last=last):
                    break
                if last:
                    break
                pending = await run.next()

    # ---------------------------------------------------------- HTTP+JSON binding

    def _rest(self, handler: Callable[[Request], Awaitable[Any]]) -> Callable[[Request], Awaitable[Response | None]]:
        async def route(request: Request) -> Response | None:
            try:
                result = await handler(request)
            except A2AFail as exc:
                failure = exc.failure
                headers = failure.headers or http_headers(m.ErrorInfo(code=failure.kernel_code, message=failure.message))  # Retry-After
                return json_response(failure.http_status, codec.rest_error(failure), headers=headers)
            if result is None or isinstance(result, Response):
                return result
            return json_response(200, result)

        return route

    async def _body(self, request: Request, shape: type[Any]) -> Any:
        parsed = codec.decode_body(await request.body(), shape)
        if isinstance(parsed, codec.Failure):
            _fail(parsed)
        return parsed

    async def _rest_send(self, request: Request) -> Any:
        return await self.send_message(request, await self._body(request, w.SendMessageRequest))

    async def _rest_stream(self, request: Request) -> None:
        run, first = await self.open_stream(request, await self._body(request, w.SendMessageRequest))
        await self._pump(request, run, first, _encoder.encode)

    async def _rest_subscribe(self, request: Request) -> None:
        run, first = await self.subscribe(request.path_params["task_id"], request.caller)
        await self._pump(request, run, first, _encoder.encode)

    async def _rest_get(self, request: Request) -> Any:
        length = request.query.get("historyLength")
        return await self.get_task(w.GetTaskRequest(id=request.path_params["task_id"], history_length=int(length) if length and length.isdigit() else None), request.caller)

    async def _rest_list(self, request: Request) -> Any:
        try:
            params = msgspec.convert(dict(request.query), w.ListTasksRequest, strict=False)
        except msgspec.ValidationError as exc:
            _fail(codec.invalid_params(f"Invalid query: {exc}"))
        return await self.list_tasks(params, request.caller)

    async def _rest_cancel(self, request: Request) -> Any:
        return await self.cancel_task(request.path_params["task_id"], request.caller)

    async def _rest_push_create(self, request: Request) -> Any:
        config = await self._body(request, w.TaskPushNotificationConfig)
        return await self.push_create(msgspec.structs.replace(config, task_id=request.path_params["task_id"]), request.caller)

    def _push_params(self, request: Request) -> w.PushConfigRequest:
        return w.PushConfigRequest(task_id=request.path_params["task_id"], id=request.path_params.get("config_id"))

    async def _rest_push_get(self, request: Request) -> Any:
        return await self.push_get(self._push_params(request), request.caller)

    async def _rest_push_list(self, request: Request) -> Any:
        return await self.push_list(self._push_params(request), request.caller)

    async def _rest_push_delete(self, request: Request) -> Any:
        await self.push_delete(self._push_params(request), request.caller)
        return json_response(200, {})

    async def _rest_card(self, request: Request) -> Any:
        return await self.extended_card(request)


def error_body(error: HttpError) -> Any:
    """The shared plumbing's errors (token, Origin, size, rate, unknown path) as google.rpc.Status."""
    return codec.rest_error(codec.http_failure(error.status, error.code, error.message))


class A2AApp:
    """The ASGI application: the API behind the shared router."""

    def __init__(self, kernel: Kernel, config: A2AConfig) -> None:
        self.router = Router(config, error_body=error_body, keys=kernel, transport=CLIENT)
        self.api = A2AApi(kernel, config, token=self.router.token)
        self.api.register(self.router)
        add_health_routes(self.router, kernel)  # /livez, /readyz (docs/operations.md)
        add_metrics_route(self.router, kernel.observers.metrics)


class A2ATransport:
    name = "a2a"
    description = "A2A (Agent2Agent) 1.0 and 0.3: agent cards, JSON-RPC and HTTP+JSON, streaming, tasks, push notifications"
    Config = A2AConfig

    async def serve(self, kernel: Kernel, config: A2AConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        app = A2AApp(kernel, config)
        async with anyio.create_task_group() as tg:
            await tg.start(app.api.run)
            await serve_http(
                app.router, config, lag_grace_s=kernel.settings.session.lag_grace_s, connections=(kernel.observers, self.name), task_status=task_status
            )
            tg.cancel_scope.cancel()

    def banner(self, kernel: Kernel, config: A2AConfig, address: str | None, command: str) -> list[BannerLine]:
        """The agent card's URL (an A2A client starts there)."""
        return [BannerLine("a2a", f"{config.public_url or address}/.well-known/agent-card.json")]
