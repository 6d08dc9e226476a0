"""In-process embedding: the document's ``BackendServer``, a composition root of its own.

A synchronous program (a TUI, a Flask app) gets the whole gateway in a backend
thread: this module loads the settings (with the document's DeepSeek defaults),
builds the kernel from the installed plugins (:func:`default_kernel_factory`, through
:mod:`gateway.app`), runs it on its own event loop and serves the packet dialect to
the program's threads through a :class:`~transports.packet.server.PortalServer`.
Callers import it as ``from transports.packet import BackendServer`` (docs/packet.md).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal

from gateway.app import build_kernel, load_registry
from kernel import Kernel, OpenAISettings, Settings, load_settings
from kernel import model as m
from transports.packet import codec
from transports.packet.backend import PacketBackend
from transports.packet.config import approval_policy
from transports.packet.server import Endpoint, PortalServer
from transports.packet.wire import Answer

log = logging.getLogger("gateway.packet")

DEFAULT_DB_PATH = "graph_memory.db"
# The document's defaults, used when neither the config file nor the environment
# configures an API key, a base URL or a model.
DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODEL = "deepseek-chat"
KernelFactory = Callable[[Settings], Kernel]


def default_kernel_factory(settings: Settings) -> Kernel:
    """The gateway's kernel with every installed plugin (providers, tools, commands)."""
    registry = load_registry()
    for problem in registry.problems:
        log.info("plugin %s: %s", problem.plugin, problem.reason)
    return build_kernel(settings, registry)


class BackendServer(PortalServer):
    """The gateway kernel on its own event loop in a backend thread.

    ``kernel_factory(settings) -> Kernel`` builds the (not yet entered) kernel in the
    backend thread; by default :func:`default_kernel_factory`. ``tool_approval``
    answers the approval questions nobody can be asked here (``[transports.packet]
    tool_approval``: ``"reject"``, ``"approve"`` or an :class:`~kernel.ApprovalPolicy`).
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
        tool_approval: m.ApprovalSetting = "reject",
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
        self.policy = approval_policy(tool_approval)
        self.kernel_factory = kernel_factory or default_kernel_factory
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

    def _target(self) -> Endpoint | Answer:
        portal, backend = self._portal, self._backend
        if portal is None or backend is None:
            return codec.fail(codec.SHUT_DOWN if self._stopped else "the backend is not started: call start() first")
        return Endpoint(portal, backend, self.timeout_s)

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
        async with self.kernel_factory(settings) as kernel:
            if overrides:
                await kernel.execute(m.UpdateSettings(changes={"provider": {"openai": overrides}}))
            backend = PacketBackend(kernel, policy=self.policy, session_id=self.session_id, agent=self.agent, facts=self._facts)
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
