"""What a piece of work leaves for the garbage collector: objects in reference cycles.

The gateway frees what a request, a turn or a connection made by reference counting when it
ends. Garbage in cycles makes the collector run more often, and a full collection of the
gateway's heap stops every stream for 10-35 ms (docs/performance.md, issue 27, thirteenth pass).
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Awaitable, Callable


async def garbage_of(work: Callable[[], Awaitable[None]]) -> Counter[str]:
    """The objects ``work()`` left in reference cycles, by type: an empty counter when none.
    ``work`` runs twice, the first time to fill first-use caches (codecs, compiled patterns),
    which are not garbage; the collector is off during the second."""
    await work()
    gc.collect()
    gc.disable()
    try:
        await work()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return Counter(type(thing).__qualname__ for thing in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
