"""The gateway console: a web page at ``/`` that watches and steers every transport's
sessions through the native API (docs/console.md). Plain ES modules and CSS in
``static/``, no build step.

Names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import lazy_exports

_WHERE: dict[str, str] = {"ConsolePages": ".pages", "hosted_console": ".pages"}

__getattr__, __all__ = lazy_exports(__name__, _WHERE)

if TYPE_CHECKING:
    from .pages import ConsolePages, hosted_console
