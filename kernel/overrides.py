"""Settings changed at run time (``update_settings``), kept in the store across restarts.

The configuration file gives the base settings; what clients change over ``UpdateSettings``
is kept as a partial overlay under one store key, merged again at start-up. Changes are
applied one at a time (each reads the settings the previous one left), so concurrent
changes all survive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from .model import KernelError
from .settings import Settings, check_depth, drop_masked_secrets, merge, to_data, validate
from .store import Store

log = logging.getLogger("gateway.kernel")

#: The store key of the overlay (also what a readiness check reads to see the store answer).
SETTINGS_KEY = "settings.overrides"


class SettingsOverrides:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._overrides: dict[str, Any] = {}
        self._lock = anyio.Lock()

    async def load(self, base: Settings) -> Settings:
        """The base settings with the stored overlay applied (an overlay that no longer
        validates against the base is ignored, with a warning)."""
        stored = await self._store.get_value(SETTINGS_KEY)
        if not stored:
            return base
        self._overrides = msgspec.json.decode(stored, type=dict[str, Any])
        try:
            return validate(merge(to_data(base), self._overrides))
        except KernelError as exc:
            log.warning("ignoring stored settings overrides: %s", exc.message)
            return base

    async def apply(self, changes: dict[str, Any], current: Callable[[], Settings], install: Callable[[Settings], None]) -> None:
        """Validate a partial update against the ``current`` settings, persist it and
        ``install`` the result, all under one lock. Masked secrets sent back (``sk-…abcd``)
        leave the real ones as they are."""
        check_depth(changes)
        async with self._lock:  # read-modify-write: concurrent changes all survive
            base = current()
            changes = drop_masked_secrets(changes, to_data(base))
            new = validate(merge(to_data(base), changes))
            overrides = merge(self._overrides, changes)
            await self._store.set_value(SETTINGS_KEY, msgspec.json.encode(overrides))
            self._overrides = overrides
            install(new)
