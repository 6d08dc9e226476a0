"""Stored responses (``store: true``): what ``GET`` / ``DELETE /v1/responses/{id}``,
``previous_response_id`` and ``item_reference`` need, in a map bounded in count and bytes.

The map lives in this process only: a restart forgets the responses (their
conversations stay, as kernel sessions in the store). The oldest response is
dropped first; one larger than the byte bound is not kept at all. Pure, so it is
tested on plain values.
"""

from __future__ import annotations

from collections import OrderedDict

import msgspec


class StoredResponse(msgspec.Struct, frozen=True, kw_only=True):
    response_id: str
    #: The kernel session holding the conversation.
    session_id: str
    #: The ``response`` object as JSON, as GET answers it.
    body: bytes
    #: False while its run goes on.
    done: bool = False
    #: When the conversation's last message was stamped as the response ended: where
    #: ``previous_response_id`` continues (see ``codec.history_until``).
    last_message_at: float | None = None
    #: The client's function calls it made: call id -> name (their results name them).
    calls: dict[str, str] = {}
    #: The ids of its output items, which ``item_reference`` inputs may name.
    item_ids: tuple[str, ...] = ()


class ResponseStore:
    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        #: Output item id -> the response holding it.
        self._owners: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._items)

    def get(self, response_id: str) -> StoredResponse | None:
        return self._items.get(response_id)

    def holding(self, item_id: str) -> StoredResponse | None:
        """The stored response one of whose output items is ``item_id``."""
        owner = self._owners.get(item_id)
        return None if owner is None else self._items.get(owner)

    def put(self, record: StoredResponse) -> None:
        """Add or update a response (an update keeps its place), then drop the oldest
        ones while the bounds are exceeded."""
        if len(record.body) > self.max_bytes:
            self.delete(record.response_id)
            return
        old = self._items.get(record.response_id)
        if old is not None:
            self._forget(old)
        self._items[record.response_id] = record
        self.bytes += len(record.body)
        self._owners.update(dict.fromkeys(record.item_ids, record.response_id))
        while self._items and (len(self._items) > self.max_count or self.bytes > self.max_bytes):
            _, dropped = self._items.popitem(last=False)
            self._forget(dropped)

    def delete(self, response_id: str) -> bool:
        record = self._items.pop(response_id, None)
        if record is None:
            return False
        self._forget(record)
        return True

    def _forget(self, record: StoredResponse) -> None:
        self.bytes -= len(record.body)
        for item_id in record.item_ids:
            if self._owners.get(item_id) == record.response_id:
                del self._owners[item_id]
