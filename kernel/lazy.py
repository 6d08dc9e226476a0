"""Lazy package exports (PEP 562): a package names what it exports, each loads on first use.

So ``import kernel.model`` or a dialect's pure codec does not drag the rest of its package
(anyio, a server) in with it. One helper for every package that does this.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], list[str]]:
    """``__getattr__`` and ``__all__`` for ``package``; ``where`` maps an exported name to
    the module that defines it (relative to the package, or absolute)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        sys.modules[package].__dict__[name] = value  # found at once next time
        return value

    return __getattr__, sorted(where)
