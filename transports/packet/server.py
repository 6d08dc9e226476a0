"""Portals of the Packet dialect: sync callers in, the kernel's event loop out.

* :class:`PortalServer` — ``send`` / ``process_message`` / ``shutdown`` for callers in
  any thread: a packet becomes a task in the kernel's loop (through an anyio blocking
  portal) and the caller blocks until the answer or the timeout; a timed-out request
  is cancelled in the loop (its run interrupted) and answered
  ``{"success": false, "error": "timeout"}``. ``gateway.embedded.BackendServer``
  (the document's object, with its own thread and loop) is one.
* :class:`PacketTransport` (``gateway serve --transport packet``) exposes a running
  gateway's kernel to synchronous code in the same process: it publishes an
  :class:`Endpoint` in :data:`ENDPOINTS`, the transport's in-process carrier, where
  :func:`connect` finds it and returns a :class:`ConnectedServer` bound to it.
"""

from __future__ import annotations

import abc
import concurrent.futures
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal

from kernel import Kernel
from transports.shared import local_caller

from . import codec
from .backend import PacketBackend
from .config import PacketConfig, approval_policy
from .wire import Answer, Packet


@dataclass(frozen=True)
class Endpoint:
    """Where packets go: a backend, the portal into its loop, the default wait."""

    portal: BlockingPortal
    backend: PacketBackend
    timeout_s: float


class PortalServer(abc.ABC):
    """Sync ``send`` / ``process_message`` / ``shutdown`` over a backend in another thread."""

    @abc.abstractmethod
    def _target(self) -> Endpoint | Answer:
        """The endpoint to use now, or the answer explaining why there is none."""

    def _submit(self, packet_type: Any, body: Any, timeout: float | None) -> Answer:
        target = self._target()
        if isinstance(target, Answer):
            return target
        try:
            future = target.portal.start_task_soon(target.backend.handle, packet_type, body)
        except RuntimeError:  # the portal stopped between the lookup and now
            return codec.fail(codec.SHUT_DOWN)
        try:
            return future.result(target.timeout_s if timeout is None else timeout)
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


# ---------------------------------------------------------------- inside `gateway serve`


class Endpoints:
    """The endpoints served in this process, by name: what :func:`connect` looks up.

    Thread-safe: the transport publishes from the kernel's loop, callers look up and
    wait from their own threads. A name is reserved (None) until its portal runs.
    """

    def __init__(self) -> None:
        self._served: dict[str, Endpoint | None] = {}
        self._changed = threading.Condition()

    def reserve(self, name: str) -> None:
        with self._changed:
            if name in self._served:
                raise RuntimeError(f"packet endpoint {name!r} is already served in this process")
            self._served[name] = None

    def publish(self, name: str, endpoint: Endpoint) -> None:
        with self._changed:
            self._served[name] = endpoint
            self._changed.notify_all()

    def release(self, name: str) -> None:
        with self._changed:
            self._served.pop(name, None)

    def get(self, name: str) -> Endpoint | None:
        return self._served.get(name)

    def wait(self, name: str, wait_s: float) -> None:
        """Return once ``name`` is served; LookupError after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        with self._changed:
            while self._served.get(name) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LookupError(f"no packet endpoint {name!r} is being served in this process")
                self._changed.wait(left)


ENDPOINTS = Endpoints()


class PacketTransport:
    name = "packet"
    description = "in-process queue API for synchronous Python code (BackendServer/BackendClient via connect())"
    Config = PacketConfig

    async def serve(self, kernel: Kernel, config: PacketConfig, *, task_status: TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED) -> None:
        facts = {"endpoint": config.endpoint, "session_id": config.session_id, "timeout_s": config.timeout_s, "db_path": kernel.settings.store.path}
        policy = approval_policy(config.tool_approval)
        caller = await local_caller(kernel, config.api_key, self.name)  # the admin, unless a key is configured
        backend = PacketBackend(
            kernel, policy=policy, session_id=config.session_id, agent=config.agent, facts=lambda: dict(facts), caller=caller
        )
        await backend.open()
        ENDPOINTS.reserve(config.endpoint)
        try:
            async with BlockingPortal() as portal:
                ENDPOINTS.publish(config.endpoint, Endpoint(portal, backend, config.timeout_s))
                try:
                    task_status.started(None)
                    await anyio.sleep_forever()
                finally:
                    backend.closing = True
                    with anyio.CancelScope(shield=True):
                        await portal.stop(cancel_remaining=True)
        finally:
            ENDPOINTS.release(config.endpoint)


class ConnectedServer(PortalServer):
    """A BackendServer-like handle on a packet endpoint of a running gateway. It looks
    the endpoint up at each request, so it follows a gateway that restarts."""

    def __init__(self, endpoint: str = "packet", timeout_s: float | None = None) -> None:
        self.endpoint = endpoint
        self._timeout = timeout_s
        self._closed = False

    def _target(self) -> Endpoint | Answer:
        found = None if self._closed else ENDPOINTS.get(self.endpoint)
        if found is None:
            return codec.fail(codec.SHUT_DOWN if self._closed else f"no packet endpoint {self.endpoint!r} is being served")
        return found if self._timeout is None else replace(found, timeout_s=self._timeout)

    def shutdown(self) -> None:
        """Detach this handle; the gateway (which owns the kernel) keeps serving."""
        self._closed = True

    def _shutdown_answer(self) -> Answer:
        self.shutdown()
        return codec.ok({"status": "shutdown", "detached": True})


def connect(endpoint: str = "packet", *, wait_s: float = 0.0, timeout_s: float | None = None) -> ConnectedServer:
    """A handle on the packet transport of a gateway served in this process (waits up to
    ``wait_s`` for it to start); wrap it in :class:`BackendClient` like a BackendServer."""
    ENDPOINTS.wait(endpoint, wait_s)
    return ConnectedServer(endpoint, timeout_s)
