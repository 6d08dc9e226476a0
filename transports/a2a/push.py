"""Push notifications: a task's webhook configs get a POST of each status change.

A push URL is a request the *caller* makes this server send, so it is held to an allow-list
(``push_allow``: URL prefixes); a URL whose host resolves to a loopback, private or link-local
address is refused unless an allow-list entry names that very host (a caller must not reach
the gateway's own neighbours through it). Each delivery is retried with backoff a bounded
number of times; deliveries never hold up the run. The POST is made with a few lines of
HTTP/1.1 over anyio (plain ``http://`` and ``https://``), which runs on asyncio and trio alike.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from urllib.parse import urlsplit

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from . import wire as w

log = logging.getLogger("gateway.a2a.push")

TOKEN_HEADER = "X-A2A-Notification-Token"
MAX_CONFIGS_PER_TASK = 8


class PushRefused(ValueError):
    """A push URL this server will not call; the message says why."""


def _allow_entry(url: str, allow: list[str]) -> str | None:
    return next((entry for entry in allow if url.startswith(entry)), None)


def check_url(url: str, allow: list[str]) -> None:
    """Refuse a URL that is malformed, or not under an allow-list entry (static checks)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PushRefused(f"a push URL must be http:// or https:// with a host: {url!r}")
    if _allow_entry(url, allow) is None:
        raise PushRefused(f"push URL {url!r} is not allowed (the server's push_allow list does not include it)")


async def check_addresses(url: str, allow: list[str]) -> None:
    """At send time: a host that resolves to an inner address is refused unless named."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    entry = _allow_entry(url, allow) or ""
    named = urlsplit(entry).hostname == host
    infos = await anyio.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80))
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if (address.is_loopback or address.is_private or address.is_link_local or address.is_unspecified) and not named:
            raise PushRefused(f"push URL {url!r} resolves to the inner address {address}; list its host in push_allow to allow it")


async def post_json(url: str, body: bytes, headers: dict[str, str], *, timeout_s: float) -> int:
    """POST ``body`` and return the response status (the body is not read beyond the head)."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc}", "Content-Type: application/json", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with anyio.fail_after(timeout_s):
        host = parts.hostname or ""
        stream = await (anyio.connect_tcp(host, port, ssl_context=ssl.create_default_context()) if https else anyio.connect_tcp(host, port))
        async with stream:
            await stream.send(request)
            head = b""
            while b"\r\n" not in head and len(head) < 8192:
                head += await stream.receive()
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise OSError(f"not an HTTP answer: {head[:40]!r}")
    return int(status_line[1])


class Pusher:
    """Delivers notifications in its own task group (started by the server)."""

    def __init__(self, allow: list[str], *, timeout_s: float = 10.0, retries: int = 3, backoff_s: float = 0.5, max_tasks: int = 10_000) -> None:
        self.allow = allow
        self.max_tasks = max_tasks  # the configs of this many tasks are kept, the oldest dropped
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.configs: dict[str, dict[str, w.TaskPushNotificationConfig]] = {}
        self.delivered = 0
        self.failed = 0
        self._group: TaskGroup | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as group:
            self._group = group
            task_status.started()
            await anyio.sleep_forever()

    def add(self, config: w.TaskPushNotificationConfig, *, config_id: str) -> w.TaskPushNotificationConfig:
        check_url(config.url, self.allow)
        mine = self.configs.setdefault(config.task_id, {})
        while len(self.configs) > self.max_tasks:
            del self.configs[next(iter(self.configs))]
        if config_id not in mine and len(mine) >= MAX_CONFIGS_PER_TASK:
            raise PushRefused(f"a task has at most {MAX_CONFIGS_PER_TASK} push configs")
        stored = msgspec.structs.replace(config, id=config_id)
        mine[config_id] = stored
        return stored

    def notify(self, task_id: str, payload: w.StreamResponse) -> None:
        """Send ``payload`` to each of the task's webhooks (in the background)."""
        configs = list(self.configs.get(task_id, {}).values())
        if not configs or self._group is None:
            return
        body = msgspec.json.encode(payload)
        for config in configs:
            self._group.start_soon(self._deliver, config, body)

    async def _deliver(self, config: w.TaskPushNotificationConfig, body: bytes) -> None:
        headers: dict[str, str] = {}
        if config.token:
            headers[TOKEN_HEADER] = config.token
        auth = config.authentication
        if auth is not None and auth.scheme and auth.credentials:
            headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                await check_addresses(config.url, self.allow)
                status = await post_json(config.url, body, headers, timeout_s=self.timeout_s)
                if 200 <= status < 300:
                    self.delivered += 1
                    return
                reason = f"HTTP {status}"
            except PushRefused as exc:
                log.warning("push for task %s refused: %s", config.task_id, exc)
                self.failed += 1
                return
            except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            if attempt < self.retries:
                await anyio.sleep(delay)
                delay *= 2
        self.failed += 1
        log.warning("push for task %s to %s failed after %d attempts: %s", config.task_id, config.url, self.retries + 1, reason)
