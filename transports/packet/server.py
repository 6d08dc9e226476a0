"""Threads and portals of the Packet dialect: sync callers in, the kernel's loop out.

* :class:`BackendServer` (the document's object) runs a kernel on its own event
  loop (asyncio by default, trio selectable) in a backend thread and hands packets
  to it through an anyio blocking portal. Any number of caller threads may
  ``send`` at once; each request is a separate task in the loop.
* :class:`PacketTransport` (``gateway serve --transport packet``) exposes a running
  gateway's kernel to synchronous code in the same process: :func:`connect`
  returns a BackendServer-like handle bound to it.

Both share :class:`PortalServer`: ``send`` blocks the caller until the answer or
the timeout; a timed-out request is cancelled in the loop (its run interrupted)
and the caller gets ``{"success": false, "error": "timeout"}``.
"""

from __future__ import annotations

import abc
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal

from kernel import Kernel
from kernel.settings import OpenAISettings, Settings, load_settings

from . import codec
from .backend import PacketBackend
from .codec import Answer, Packet

log = logging.getLogger("gateway.packet")

DEFAULT_DB_PATH = "graph_memory.db"
# The document's defaults, used when neither the config file nor the environment
# configures an API key, a base URL or a model.
DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODEL = "deepseek-chat"
KernelFactory = Callable[[Settings], Kernel]


class PortalServer(abc.ABC):
    """Sync ``send`` / ``process_message`` / ``shutdown`` over a backend in another thread."""

    timeout_s: float = 30.0

    @abc.abstractmethod
    def _target(self) -> tuple[BlockingPortal, PacketBackend] | Answer:
        """The portal and backend to use now, or the answer explaining why there is none."""

    def _submit(self, packet_type: Any, body: Any, timeout: float | None) -> Answer:
        target = self._target()
        if isinstance(target, Answer):
            return target
        portal, backend = target
        try:
            future = portal.start_task_soon(backend.handle, packet_type, body)
        except RuntimeError:  # the portal stopped between the lookup and now
            return codec.fail(codec.SHUT_DOWN)
        try:
            return future.result(self.timeout_s if timeout is None else timeout)
        except concurrent.futures.TimeoutError:
            if future.cancel() or not future.done():
                return codec.fail(codec.TIMEOUT)
            return future.result()
        except concurrent.futures.CancelledError:
            return codec.fail(codec.SHUT_DOWN)

    def send(self, packet: Any, timeout: float | None = None) -> Packet:
        """Answer a packet (of any class with ``id``, ``type``, ``body``): a Packet with the
        same id and type whose body is the uniform answer."""
        if codec.packet_kind(packet.type) == "shutdown":
            answer = self._shutdown_answer()
        else:
            answer = self._submit(packet.type, getattr(packet, "body", None), timeout)
        return Packet(id=packet.id, type=packet.type, body=answer)

    def process_message(self, text: str, timeout: float | None = None) -> Answer:
        return self._submit("process_message", {"user_input": text}, timeout)

    @abc.abstractmethod
    def shutdown(self) -> None:
        """End this handle (and, for the owner, the backend thread)."""

    def _shutdown_answer(self) -> Answer:
        self.shutdown()
        return codec.ok({"status": "shutdown"})


class BackendServer(PortalServer):
    """The gateway kernel on its own event loop in a backend thread.

    ``kernel_factory(settings) -> Kernel`` builds the (not yet entered) kernel in the
    backend thread. By default it is :func:`default_kernel_factory`, which loads the
    installed plugins through the gateway's composition root.
    """

    def __init__(
        self,
        db_path: str | None = None,
        use_embedded_db: bool = True,
        config_file: str | None = None,
        *,
        backend: str = "asyncio",
        backend_options: dict[str, Any] | None = None,
        timeout_s: float = 30.0,
        session_id: str = "packet",
        agent: str | None = None,
        kernel_factory: KernelFactory | None = None,
        shutdown_grace_s: float = 5.0,
    ) -> None:
        self.db_path = db_path
        self.use_embedded_db = use_embedded_db
        self.config_file = config_file
        self.backend = backend
        self.backend_options = backend_options
        self.timeout_s = timeout_s
        self.session_id = session_id
        self.agent = agent
        self.kernel_factory = kernel_factory
        self.shutdown_grace_s = shutdown_grace_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._portal: BlockingPortal | None = None
        self._backend: PacketBackend | None = None
        self._stop: anyio.Event | None = None
        self._stopped = False
        self._db: str = ""

    @property
    def running(self) -> bool:
        return self._portal is not None

    def start(self, api_key: str | None = None, base_url: str | None = None, model: str | None = None) -> None:
        """Start the backend thread; returns once the kernel is ready. Arguments given
        here are saved like a ``set_settings`` of ``api_config``."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("this BackendServer is already started")
            settings = self.settings()
            self._db = settings.store.path
            given = {"api_key": api_key, "base_url": base_url, "model": model}
            overrides = {k: v for k, v in given.items() if v is not None}
            ready: concurrent.futures.Future[tuple[BlockingPortal, PacketBackend, anyio.Event]] = concurrent.futures.Future()
            thread = threading.Thread(target=self._thread_main, args=(settings, overrides, ready), name="packet-backend", daemon=True)
            thread.start()
            try:
                self._portal, self._backend, self._stop = ready.result()
            except BaseException:
                thread.join()
                raise
            self._thread = thread
            self._stopped = False

    def settings(self) -> Settings:
        """Defaults, the config file, the environment; the document's API defaults; ``db_path``."""
        settings = load_settings(self.config_file)
        if self.db_path is not None or self.config_file is None:
            settings.store.path = self.db_path or DEFAULT_DB_PATH
        openai = settings.provider.openai
        if openai.api_key is None and openai.base_url is None and openai.model == OpenAISettings().model:
            openai.base_url, openai.model = DEFAULT_BASE_URL, DEFAULT_MODEL
        return settings

    def shutdown(self) -> None:
        """Interrupt what runs, answer what waits, close the kernel and end the thread."""
        with self._lock:
            thread, portal, stop = self._thread, self._portal, self._stop
            self._portal = self._backend = self._stop = None
            self._stopped = True
        if portal is not None and stop is not None:
            try:
                portal.call(stop.set)
            except RuntimeError:
                pass
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            if self._thread is thread:
                self._thread = None

    def _target(self) -> tuple[BlockingPortal, PacketBackend] | Answer:
        portal, backend = self._portal, self._backend
        if portal is None or backend is None:
            return codec.fail(codec.SHUT_DOWN if self._stopped else "the backend is not started: call start() first")
        return portal, backend

    def _facts(self) -> dict[str, Any]:
        return {
            "db_path": self._db,
            "use_embedded_db": self.use_embedded_db,
            "config_file": self.config_file,
            "event_loop": self.backend,
            "session_id": self.session_id,
            "timeout_s": self.timeout_s,
        }

    def _thread_main(self, settings: Settings, overrides: dict[str, str], ready: concurrent.futures.Future[Any]) -> None:
        try:
            anyio.run(self._main, settings, overrides, ready, backend=self.backend, backend_options=self.backend_options)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.exception("packet backend thread failed")

    async def _main(self, settings: Settings, overrides: dict[str, str], ready: concurrent.futures.Future[Any]) -> None:
        kernel = (self.kernel_factory or default_kernel_factory)(settings)
        async with kernel:
            if overrides:
                await kernel.update_settings({"provider": {"openai": overrides}})
            agent_id = kernel.agent(self.agent).agent_id() if self.agent else None
            backend = PacketBackend(kernel, session_id=self.session_id, agent_id=agent_id, facts=self._facts)
            await backend.open()
            stop = anyio.Event()
            async with BlockingPortal() as portal:
                ready.set_result((portal, backend, stop))
                await stop.wait()
                backend.closing = True
                kernel.interrupt_all()
                if not await backend.wait_idle(self.shutdown_grace_s):
                    log.warning("packet: requests still running after %.1fs; cancelling them", self.shutdown_grace_s)
                await portal.stop(cancel_remaining=True)

    def __enter__(self) -> BackendServer:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def default_kernel_factory(settings: Settings) -> Kernel:
    """The transport's one composition point: the gateway's plugins, imported lazily so
    that a sync program that only imports ``transports.packet`` gets the whole gateway."""
    from gateway.app import build_kernel, load_registry

    registry = load_registry()
    for problem in registry.problems:
        log.info("plugin %s: %s", problem.plugin, problem.reason)
    return build_kernel(settings, registry)


# ---------------------------------------------------------------- inside `gateway serve`


class _Endpoint(msgspec.Struct):
    portal: BlockingPortal
    backend: PacketBackend
    timeout_s: float


_endpoints: dict[str, _Endpoint | None] = {}
_endpoints_changed = threading.Condition()


class PacketConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    endpoint: str = "packet"
    session_id: str = "packet"
    agent: str | None = None
    timeout_s: float = 30.0


class PacketTransport:
    name = "packet"
    description = "in-process queue API for synchronous Python code (BackendServer/BackendClient via connect())"
    Config = PacketConfig

    async def serve(self, kernel: Kernel, config: PacketConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        agent_id = kernel.agent(config.agent).agent_id() if config.agent else None
        facts = {"endpoint": config.endpoint, "session_id": config.session_id, "timeout_s": config.timeout_s, "db_path": kernel.settings.store.path}
        backend = PacketBackend(kernel, session_id=config.session_id, agent_id=agent_id, facts=lambda: dict(facts))
        await backend.open()
        with _endpoints_changed:
            if config.endpoint in _endpoints:
                raise RuntimeError(f"packet endpoint {config.endpoint!r} is already served in this process")
            _endpoints[config.endpoint] = None  # reserved until the portal runs
        try:
            async with BlockingPortal() as portal:
                with _endpoints_changed:
                    _endpoints[config.endpoint] = _Endpoint(portal, backend, config.timeout_s)
                    _endpoints_changed.notify_all()
                try:
                    task_status.started(None)
                    await anyio.sleep_forever()
                finally:
                    backend.closing = True
                    with anyio.CancelScope(shield=True):
                        await portal.stop(cancel_remaining=True)
        finally:
            with _endpoints_changed:
                _endpoints.pop(config.endpoint, None)


class ConnectedServer(PortalServer):
    """A BackendServer-like handle on a packet endpoint of a running gateway. It looks
    the endpoint up at each request, so it follows a gateway that restarts."""

    def __init__(self, endpoint: str = "packet", timeout_s: float | None = None) -> None:
        self.endpoint = endpoint
        self._timeout = timeout_s
        self._closed = False

    @property
    def timeout_s(self) -> float:  # type: ignore[override]
        if self._timeout is not None:
            return self._timeout
        found = _endpoints.get(self.endpoint)
        return found.timeout_s if found else 30.0

    def _target(self) -> tuple[BlockingPortal, PacketBackend] | Answer:
        found = None if self._closed else _endpoints.get(self.endpoint)
        if found is None:
            return codec.fail(codec.SHUT_DOWN if self._closed else f"no packet endpoint {self.endpoint!r} is being served")
        return found.portal, found.backend

    def shutdown(self) -> None:
        """Detach this handle; the gateway (which owns the kernel) keeps serving."""
        self._closed = True

    def _shutdown_answer(self) -> Answer:
        self.shutdown()
        return codec.ok({"status": "shutdown", "detached": True})


def connect(endpoint: str = "packet", *, wait_s: float = 0.0, timeout_s: float | None = None) -> ConnectedServer:
    """A handle on the packet transport of a gateway served in this process (waits up to
    ``wait_s`` for it to start); wrap it in :class:`BackendClient` like a BackendServer."""
    deadline = time.monotonic() + wait_s
    with _endpoints_changed:
        while _endpoints.get(endpoint) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LookupError(f"no packet endpoint {endpoint!r} is being served in this process")
            _endpoints_changed.wait(left)
    return ConnectedServer(endpoint, timeout_s)
