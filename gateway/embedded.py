"""In-process embedding: the document's ``BackendServer``, a composition root of its own.

A synchronous program (a TUI, a Flask app) gets the whole gateway in a backend
thread: this module loads the settings (with the document's DeepSeek defaults, an
optional gateway TOML file, and the program's own JSON settings file, TrulyMEM's
``config_file``), builds the kernel from the installed plugins
(:func:`default_kernel_factory`, through :mod:`gateway.app`), runs it on its own event
loop and serves the packet dialect to the program's threads through a
:class:`~transports.packet.server.PortalServer`. Callers import it as
``from transports.packet import BackendServer`` (docs/packet.md).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from anyio.from_thread import BlockingPortal

from gateway.app import build_kernel, load_registry
from kernel import Kernel, OpenAISettings, Settings, load_settings
from kernel import model as m
from transports.packet import codec
from transports.packet.backend import PacketBackend
from transports.packet.config import approval_policy
from transports.packet.server import Endpoint, PortalServer
from transports.packet.settingsfile import SettingsFile, default_path, user_paths
from transports.packet.wire import Answer

log = logging.getLogger("gateway.packet")

DEFAULT_DB_PATH = "graph_memory.db"
# The document's defaults, used when neither the gateway TOML file nor the environment
# configures an API key, a base URL or a model (a settings file's values win over them).
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

    The first four parameters are TrulyMEM's (``core/server.py``): ``db_path`` the
    SQLite store (None: the gateway settings' ``[store] path``), ``use_embedded_db``
    (reported; the store is always embedded), ``config_file`` its flat JSON settings
    file (None: ``~/.trulymem/config.json``; created when missing), ``username``
    (whose own settings file and database TrulyMEM's user table may record; they are
    used then). A gateway TOML file comes as ``gateway_config``.
    ``kernel_factory(settings) -> Kernel`` builds the (not yet entered) kernel in the
    backend thread; by default :func:`default_kernel_factory`. ``tool_approval``
    answers the approval questions nobody can be asked here (``[transports.packet]
    tool_approval``: ``"reject"``, ``"approve"`` or an :class:`~kernel.ApprovalPolicy`).
    ``timeout_s`` (None: the settings file's ``message_timeout``) is how long a request waits.
    """

    def __init__(
        self,
        db_path: str | None = DEFAULT_DB_PATH,
        use_embedded_db: bool = True,
        config_file: str | os.PathLike[str] | None = None,
        username: str = "",
        *,
        gateway_config: str | Path | None = None,
        backend: str = "asyncio",
        backend_options: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        session_id: str = "packet",
        agent: str | None = None,
        tool_approval: m.ApprovalSetting = "reject",
        kernel_factory: KernelFactory | None = None,
        shutdown_grace_s: float = 5.0,
    ) -> None:
        self.db_path = db_path
        self.use_embedded_db = use_embedded_db
        self.settings_file = SettingsFile(default_path() if config_file is None else config_file)
        self.config_file = str(self.settings_file.path)
        self.username = username
        self.gateway_config = gateway_config
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

    @property
    def _db_path(self) -> str:
        """The store in use once started: TrulyMEM's web app reads this (private, there)
        attribute to open its own tables in the same SQLite file."""
        return self._db or (self.db_path or "")

    def start(self, api_key: str | None = None, base_url: str | None = None, model: str | None = None) -> None:
        """Start the backend thread; returns once the kernel is ready. The settings file
        is read first (a broken one is an error here); arguments given (empty ones are
        ignored, as in TrulyMEM) then apply like a ``set_settings`` of ``api_config``,
        and the file is written if it was missing or they changed it."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("this BackendServer is already started")
            user_config, user_db = user_paths(self.username)
            if user_config is not None:  # TrulyMEM's user table records the user's own files
                self.settings_file = SettingsFile(user_config)
                self.config_file = str(self.settings_file.path)
            settings = self.settings()
            if user_db is not None:
                settings.store.path = user_db
            from_file = self.settings_file.read()
            self._db = settings.store.path
            given = {"api_key": api_key, "base_url": base_url, "model": model}
            overrides = {k: v for k, v in given.items() if v}
            ready: concurrent.futures.Future[tuple[BlockingPortal, PacketBackend, anyio.Event]] = concurrent.futures.Future()
            startup = (settings, from_file.command.changes, overrides, ready)
            thread = threading.Thread(target=self._thread_main, args=startup, name="packet-backend", daemon=True)
            thread.start()
            try:
                self._portal, self._backend, self._stop = ready.result()
            except BaseException:
                thread.join()
                raise
            self._thread = thread
            self._stopped = False

    def settings(self) -> Settings:
        """Defaults, ``gateway_config``, the environment; the document's API defaults; ``db_path``."""
        settings = load_settings(self.gateway_config)
        if self.db_path is not None:
            settings.store.path = self.db_path
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

    def _wait_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else self.settings_file.message_timeout()

    def _target(self) -> Endpoint | Answer:
        portal, backend = self._portal, self._backend
        if portal is None or backend is None:
            return codec.fail(codec.SHUT_DOWN if self._stopped else "the backend is not started: call start() first")
        return Endpoint(portal, backend, self._wait_s())

    def _facts(self) -> dict[str, Any]:
        return {
            **self.settings_file.app_settings(),
            "db_path": self._db,
            "use_embedded_db": self.use_embedded_db,
            "config_file": self.config_file,
            "gateway_config": None if self.gateway_config is None else str(self.gateway_config),
            "username": self.username,
            "event_loop": self.backend,
            "session_id": self.session_id,
            "timeout_s": self._wait_s(),
        }

    def _thread_main(
        self, settings: Settings, from_file: dict[str, Any], overrides: dict[str, str], ready: concurrent.futures.Future[Any]
    ) -> None:
        try:
            anyio.run(self._main, settings, from_file, overrides, ready, backend=self.backend, backend_options=self.backend_options)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.exception("packet backend thread failed")

    async def _main(self, settings: Settings, from_file: dict[str, Any], overrides: dict[str, str], ready: concurrent.futures.Future[Any]) -> None:
        async with self.kernel_factory(settings) as kernel:
            await self._apply_settings(kernel, from_file, overrides)
            backend = PacketBackend(
                kernel, policy=self.policy, session_id=self.session_id, agent=self.agent, facts=self._facts, settings_file=self.settings_file
            )
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

    async def _apply_settings(self, kernel: Kernel, from_file: dict[str, Any], overrides: dict[str, str]) -> None:
        """The settings file over what the kernel loaded, ``start()``'s arguments over both;
        then the file is written when it was missing or no longer says what is in use."""
        start_changes = {"provider": {"openai": overrides}} if overrides else {}
        for changes in (from_file, start_changes):
            if changes:
                await kernel.execute(m.UpdateSettings(changes=changes))
        content = self.settings_file.content(kernel.settings, start_changes, {})
        if not self.settings_file.existed or content != self.settings_file.values:
            await anyio.to_thread.run_sync(self.settings_file.save, content)

    def __enter__(self) -> BackendServer:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
