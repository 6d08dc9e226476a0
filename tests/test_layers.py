"""The layer rules of docs/architecture.md, enforced on the source.

* ``kernel`` imports only the standard library, anyio and msgspec; ``kernel.model`` only
  the standard library and msgspec; no kernel module needs another to be imported first
  (no import cycle), whatever the order.
* Outside the kernel (``transports/``, ``plugins/``, ``gateway/``, the example plugins), code
  uses the kernel's public surface only: ``import kernel``, ``kernel.model`` and ``kernel.errors``, names without
  a leading underscore, and on a kernel object only the attributes in ``KERNEL_SURFACE``.
  Sessions are reached through commands, events and the followers, never as objects.
* A transport never imports another transport or the composition root (``gateway``);
  a dialect's ``codec.py``, ``*_codec.py`` and ``wire.py``, and the other pure modules
  (``PURE_MODULES``), import no server (no anyio, no hypercorn). A plugin imports nothing
  of the transports but ``transports.base`` (for types).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL_MODULES = sorted(f"kernel.{p.stem}" for p in (ROOT / "kernel").glob("*.py") if p.stem != "__init__")
OUTER = ["transports", "plugins", "gateway", "docs/examples"]

#: What code outside the kernel may use on a ``Kernel`` (``kernel.X``, ``self.kernel.X``, ``ctx.kernel.X``).
KERNEL_SURFACE = frozenset(
    {
        "execute",  # every command
        "find_session",  # GetSession, None when there is no such session
        "settings",  # read-only configuration
        "settings_view",
        "version",
        "started_at",
        "agent",  # an agent's settings by id or name
        "agent_info",
        "provider_name",
        "tools",  # the registries, read-only
        "commands",
        "workspace_files",
        "observers",  # telemetry: connections opened and closed, the metrics a scrape reads
        "session_states",  # how many live sessions are in each state (the sessions gauge)
        "all_tools",  # every tool a session can be offered (tool sources' included), read-only
        "interrupt_all",  # the composition root's shutdown
        "wait_idle",
        "drain",  # SIGTERM: the composition root's drain (docs/operations.md)
        "start_draining",
        "end_followed_runs",
        "stopping",  # set once the drain is over and the gateway stops
        "readiness",  # what /readyz reports
        "authenticate",  # an API key -> its principal (the transports' shared resolver)
        "keys_required",  # whether credentials are needed even without an admin token
        "list_keys",  # the keys and their usage (admin only): GET /v1/keys
    }
)
#: Compatibility names: ``transports.packet`` re-exports the embedding API of ``gateway.embedded``.
UPWARD_ALLOWED = {"transports/packet/__init__.py"}
#: The kernel modules a codec may import by name: pure, loading msgspec only (the model, and
#: the one HTTP meaning of each error code, which every HTTP dialect's codec uses).
PURE_KERNEL = ("kernel.model", "kernel.errors")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_every_kernel_module_imports_alone_and_in_either_order() -> None:
    for module in KERNEL_MODULES:
        _run(f"import {module}")
    forward = "; ".join(f"import {m}" for m in KERNEL_MODULES)
    backward = "; ".join(f"import {m}" for m in reversed(KERNEL_MODULES))
    _run(forward)
    _run(backward)


def _third_party_after(statement: str) -> set[str]:
    code = (
        "import sys; before = set(sys.modules); "
        f"{statement}; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "std = set(sys.stdlib_module_names); "
        "print(' '.join(sorted(m for m in new if m not in std and not m.startswith('_'))))"
    )
    return set(_run(code).split())


def test_kernel_model_loads_msgspec_only() -> None:
    assert _third_party_after("import kernel.model") <= {"kernel", "msgspec", "typing_extensions"}  # msgspec needs the last


def test_the_kernel_loads_only_anyio_and_msgspec() -> None:
    loaded = _third_party_after("; ".join(f"import {m}" for m in KERNEL_MODULES))
    assert loaded - {"kernel", "msgspec", "anyio", "sniffio", "idna", "exceptiongroup", "typing_extensions"} == set()


#: Modules beside the codecs that are pure in the same way (wire shapes, translation, no I/O).
PURE_MODULES = [
    "kernel.jsonwire",
    "transports.agui.events",
    "transports.acp.jsonrpc",
    "transports.acp.session_meta",
    "transports.openfang.sessionids",
    "transports.shared.coalesce",
    "plugins.providers.openai_wire",
]


def _dialect_modules() -> list[str]:
    found = []
    for path in sorted((ROOT / "transports").rglob("*.py")):
        if path.name in ("codec.py", "wire.py") or path.name.endswith("_codec.py"):
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found + PURE_MODULES


@pytest.mark.parametrize("module", _dialect_modules())
def test_a_codec_or_wire_module_imports_no_server(module: str) -> None:
    loaded = _third_party_after(f"import {module}")
    assert not loaded & {"anyio", "hypercorn", "wsproto", "trio", "h11", "openai", "pluggy"}, loaded


def _sources() -> list[Path]:
    """The outer layers' source files (the example plugins' own tests aside)."""
    files = [p for top in OUTER for p in (ROOT / top).rglob("*.py")]
    return [p for p in files if not {"tests", "__pycache__", "build"} & set(p.relative_to(ROOT).parts)]


def _kernel_attribute(node: ast.Attribute) -> bool:
    """``kernel.X`` or ``<anything>.kernel.X``: an attribute of the kernel object."""
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "kernel") or (isinstance(owner, ast.Attribute) and owner.attr == "kernel")


def _violations(path: Path) -> list[str]:
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(), filename=rel)
    package = rel.split("/")[1] if rel.startswith("transports/") else None
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module in ("kernel", *PURE_KERNEL):
                found += [f"{rel}:{node.lineno}: private name {a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            names = []
        for name in names:
            if name.startswith("kernel.") and name not in PURE_KERNEL:
                found.append(f"{rel}:{node.lineno}: imports {name} (use `kernel`, `kernel.model` or `kernel.errors`)")
            if package is not None and rel not in UPWARD_ALLOWED and name.split(".")[0] == "gateway":
                found.append(f"{rel}:{node.lineno}: a transport imports the composition root ({name})")
            parts = name.split(".")
            if rel.startswith("plugins/") and parts[0] == "transports" and name != "transports.base":
                found.append(f"{rel}:{node.lineno}: a plugin imports a transport's code ({name}; only transports.base, for types)")
            if package is not None and parts[0] == "transports" and len(parts) > 1 and parts[1] not in (package, "shared", "base"):
                found.append(f"{rel}:{node.lineno}: imports another transport ({name})")
        if isinstance(node, ast.Attribute):
            if _kernel_attribute(node) and node.attr not in KERNEL_SURFACE:
                found.append(f"{rel}:{node.lineno}: kernel.{node.attr} is not on the kernel's public surface")
            if isinstance(node.value, ast.Name) and node.value.id == "m" and node.attr.startswith("_"):
                found.append(f"{rel}:{node.lineno}: private model name m.{node.attr}")
    return found


def test_outer_layers_use_only_the_public_kernel_surface() -> None:
    problems = [problem for path in _sources() for problem in _violations(path)]
    assert problems == []


def test_the_kernel_imports_no_outer_layer() -> None:
    for path in (ROOT / "kernel").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names] if isinstance(node, ast.Import) else []
            assert not [n for n in names if n.split(".")[0] in ("transports", "plugins", "gateway")], f"{path.name}:{node.lineno}"


LAZY_PACKAGES = sorted(
    str(p.parent.relative_to(ROOT))
    for top in ("kernel", "transports", "plugins", "gateway")
    for p in (ROOT / top).glob("**/__init__.py")
    if "lazy_exports(__name__" in p.read_text()
)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_no_lazy_export_is_named_like_a_module_of_its_package(package: str) -> None:
    """Once ``package.name`` is imported as a module, Python sets it on the package, and the
    module hides the export of the same name (``from kernel import beside`` got the module
    ``kernel/beside.py`` after another kernel module had imported it)."""
    import importlib

    directory = ROOT / package
    modules = {p.stem for p in directory.glob("*.py") if p.stem != "__init__"} | {p.parent.name for p in directory.glob("*/__init__.py")}
    exported = set(importlib.import_module(package.replace("/", ".")).__all__)
    assert sorted(exported & modules) == []
