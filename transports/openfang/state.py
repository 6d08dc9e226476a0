"""What the OpenFang transport remembers between requests (server side, shared by
its sockets and its REST handlers).

* :class:`Agents`: agents by their stable UUID, with OpenFang's 400/404 answers.
* :class:`ActiveSessions`: OpenFang's REST model — each agent has one *active*
  session that ``/session``, ``/sessions``, ``/switch`` and sockets use (unless a
  frame names a ``session_id``), restored from the store on first use; the
  sessions used through this transport, which ``/stop`` interrupts; and the way
  from a public (UUID) session id back to the kernel's (``sessionids.py``).
* :class:`UploadStore`: attachments in memory, bounded by total size and age.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

import anyio

from kernel import Kernel
from kernel import model as m
from transports.shared import HttpError

from .codec import Upload
from .sessionids import canonical_uuid, new_session_id, public_session_id


class Agents:
    """Configured agents, addressed by id the way OpenFang addresses them."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def resolve(self, raw_id: str) -> str:
        """The agent id for a path id: 400 ``Invalid agent ID`` unless a UUID, 404 if unknown."""
        ids = [agent.agent_id() for agent in self.kernel.settings.agents]
        if raw_id in ids:
            return raw_id
        try:
            wanted = str(uuid.UUID(raw_id))
        except ValueError:
            raise HttpError(400, "Invalid agent ID", code="invalid_request") from None
        for agent_id in ids:
            if agent_id.lower() == wanted:
                return agent_id
        raise HttpError(404, "Agent not found", code="not_found")

    def infos(self) -> list[m.AgentInfo]:
        return [self.kernel.agent_info(agent) for agent in self.kernel.settings.agents]


class ActiveSessions:
    """The active session of each agent (OpenFang keeps one per agent) — per key: each
    principal has its own active session of an agent, among its own sessions, so two keys
    on one gateway never land in each other's conversation."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self._active: dict[tuple[str, str], str] = {}
        self._touched: dict[tuple[str, str], set[str]] = {}
        self._lock = anyio.Lock()

    @staticmethod
    def _key(caller: m.Caller, agent_id: str) -> tuple[str, str]:
        return caller.principal.name, agent_id

    async def get(self, agent_id: str, caller: m.Caller) -> str:
        """The agent's active session id for the caller: its newest stored one, or a new one."""
        key = self._key(caller, agent_id)
        current = self._active.get(key)
        if current is not None:
            return current
        async with self._lock:
            current = self._active.get(key)
            if current is None:
                listing = await self.kernel.execute(m.ListSessions(agent_id=agent_id), caller)
                if listing.sessions:
                    current = max(listing.sessions, key=lambda s: s.created_at).session_id
                else:
                    current = (await self.create(agent_id, caller)).session_id
                self.switch(agent_id, current, caller)
            return current

    async def open_active(self, agent_id: str, caller: m.Caller) -> m.SessionInfo:
        """The agent's active session, live (made anew if it was deleted elsewhere)."""
        opened = await self.kernel.execute(m.OpenSession(session_id=await self.get(agent_id, caller), agent_id=agent_id), caller)
        return opened.session

    async def create(self, agent_id: str, caller: m.Caller, label: str | None = None) -> m.SessionInfo:
        """A new session for the agent, which becomes the caller's active one."""
        opened = await self.kernel.execute(m.OpenSession(session_id=new_session_id(), agent_id=agent_id, label=label), caller)
        self.switch(agent_id, opened.session.session_id, caller)
        return opened.session

    def switch(self, agent_id: str, session_id: str, caller: m.Caller) -> None:
        self._active[self._key(caller, agent_id)] = session_id
        self.touch(agent_id, session_id, caller)

    async def find(self, public_id: str, caller: m.Caller, agent_id: str | None = None) -> m.SessionInfo | None:
        """The session shown as ``public_id`` (a canonical UUID), None if there is none (or it
        is another key's).

        Usually the session of that very id; else the one it is the public id of (a
        non-UUID or 32-hex id), looked for among ``agent_id``'s sessions (all without).
        """
        found = await self.kernel.find_session(public_id, caller)
        if found is not None:
            return found
        listing = await self.kernel.execute(m.ListSessions(agent_id=agent_id), caller)
        return next((info for info in listing.sessions if public_session_id(info.session_id) == public_id), None)

    async def named(self, agent_id: str, name: str, caller: m.Caller) -> str:
        """The kernel id of the session a body or frame names (our ``session_id`` extension).

        A UUID is a public id: the session shown as it (made under it when there is none).
        Any other name is the kernel's id itself, as every dialect spells it (stdio's
        ``notes``, the seed's ``session_123``): OpenFang clients are shown its alias.
        """
        wanted = canonical_uuid(name)
        if wanted is None:
            return name
        found = await self.find(wanted, caller, agent_id)
        return found.session_id if found is not None else wanted

    def active_ids(self, caller: m.Caller) -> set[str]:
        """The sessions that are one of the caller's agents' active one now."""
        name = caller.principal.name
        return {session_id for (owner, _), session_id in self._active.items() if owner == name}

    def touch(self, agent_id: str, session_id: str, caller: m.Caller) -> None:
        """Remember that this transport prompted ``session_id`` for the agent (see ``used``)."""
        self._touched.setdefault(self._key(caller, agent_id), set()).add(session_id)

    def used(self, agent_id: str, caller: m.Caller) -> list[str]:
        """The agent's sessions the caller used through this transport.

        ``POST /stop`` interrupts these: runs of the same agent started through other
        transports (another user's Agent-CLI session, say), or by another key, are not ours
        to stop.
        """
        return list(self._touched.get(self._key(caller, agent_id), ()))

    def forget(self, agent_id: str, session_id: str) -> None:
        """A session that no longer exists (deleted): not ours to stop, nor active any more."""
        for key, touched in self._touched.items():
            if key[1] == agent_id:
                touched.discard(session_id)
        for key in [key for key, active in self._active.items() if key[1] == agent_id and active == session_id]:
            del self._active[key]


class UploadStore:
    """Uploaded files in memory: oldest evicted beyond ``max_bytes``, expired after ``ttl_s``."""

    def __init__(self, *, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, Upload]] = OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, upload: Upload) -> str:
        self._expire()
        file_id = str(uuid.uuid4())
        self._items[file_id] = (self._clock(), upload)
        self._size += len(upload.data)
        while self._size > self.max_bytes and len(self._items) > 1:
            _, (_, old) = self._items.popitem(last=False)
            self._size -= len(old.data)
        return file_id

    def get(self, file_id: str) -> Upload | None:
        self._expire()
        item = self._items.get(file_id)
        return item[1] if item else None

    def snapshot(self) -> dict[str, Upload]:
        """A plain mapping for the (pure) codec."""
        self._expire()
        return {key: upload for key, (_, upload) in self._items.items()}

    def _expire(self) -> None:
        horizon = self._clock() - self.ttl_s
        while self._items:
            key, (stamp, upload) = next(iter(self._items.items()))
            if stamp > horizon:
                break
            del self._items[key]
            self._size -= len(upload.data)

