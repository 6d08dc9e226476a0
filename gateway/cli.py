"""``gateway``: serve transports, list them and the tools, show the effective configuration."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
from functools import partial
from typing import Any

import anyio
import msgspec

from kernel import KernelError, Settings, gateway_version, load_settings, mask_secrets
from transports.base import config_type

from . import app, keys_cli
from .banner import Launch

log = logging.getLogger("gateway")


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="A pluggable transport gateway for AI agents.")
    parser.add_argument("--version", action="version", version=f"gateway {gateway_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the kernel and serve one or more transports")
    serve.add_argument("--transport", "-t", action="append", required=True, metavar="NAME", help="a transport to serve (repeatable)")
    serve.add_argument("--config", "-c", metavar="FILE", help="a gateway.toml file")
    serve.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio", help="the async backend (default asyncio)")
    serve.add_argument(
        "--loop", choices=("auto", "asyncio", "uvloop"), default="auto",
        help="the asyncio event loop: uvloop (pip install 'gateway[fast]'), asyncio's own, or auto = uvloop when installed",
    )
    serve.add_argument("--host", help="bind address for the network transports")
    serve.add_argument("--port", type=int, help="port for the network transport (0 = any free port)")
    serve.add_argument("--token", help="require this token from clients (else GATEWAY_TOKEN)")
    serve.add_argument("--db", metavar="PATH", help="the SQLite store (default from the config)")
    serve.add_argument("--quiet", "-q", action="store_true", help="no start-up banner (the addresses to connect to) on stderr")
    serve.add_argument(
        "--log-format", choices=("text", "json"), help="stderr logs as text, or one JSON object per line (default: log_format of the config)"
    )
    serve.add_argument(
        "--set", "-o", action="append", default=[], metavar="TRANSPORT.KEY=VALUE",
        help="override one transport setting, e.g. openfang.coalesce_ms=0 (value parsed as JSON when it can be)",
    )

    sub.add_parser("transports", help="list the installed transports with their default settings")
    tools = sub.add_parser("tools", help="list the tools a session can be offered, the configured MCP servers' included")
    tools.add_argument("--config", "-c", metavar="FILE", help="a gateway.toml file")
    config = sub.add_parser("config", help="print the effective configuration (secrets masked)")
    config.add_argument("--config", "-c", metavar="FILE")
    keys_cli.add_parser(sub)
    return parser


def event_loop(backend: str, loop: str) -> tuple[str, dict[str, Any]]:
    """anyio's backend and its options for ``--backend`` and ``--loop``: uvloop runs the kernel,
    every transport and hypercorn's asyncio worker (they all run on the loop anyio starts);
    ``auto`` takes it when it is installed; trio has no such choice."""
    if backend != "asyncio":
        if loop == "uvloop":
            raise SystemExit("gateway: --loop uvloop needs --backend asyncio")
        return backend, {}
    if loop == "asyncio":
        return backend, {}
    if importlib.util.find_spec("uvloop") is None:
        if loop == "uvloop":
            raise SystemExit("gateway: --loop uvloop: uvloop is not installed (pip install 'gateway[fast]')")
        return backend, {}
    return backend, {"use_uvloop": True}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "transports":
            return _transports()
        settings = load_settings(args.config)
        if args.command == "tools":
            return _tools(settings)
        if args.command == "keys":
            return keys_cli.run(args, settings)
        if args.command == "config":
            print(json.dumps(mask_secrets(msgspec.to_builtins(settings)), indent=2))
            return 0
        return _serve(args, settings)
    except (KernelError, app.StartupError) as exc:
        print(f"gateway: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2


def _transports() -> int:
    registry = app.load_registry()
    for name, cls in sorted(registry.transports.items()):
        defaults = msgspec.to_builtins(config_type(cls)())
        print(f"{name}\t{getattr(cls, 'description', '')}")
        print(f"\t[transports.{app.section_name(name)}] {json.dumps(mask_secrets(defaults))}")
    _report_problems(registry)
    return 0


def _tools(settings: Settings) -> int:
    """One line per tool: name, where it comes from, query/update (and whether it asks
    before it runs), description. Exit 1 when a configured MCP server did not start."""
    app.setup_logging("error")  # failures are reported below, once, by name
    registry = app.load_registry()
    _report_problems(registry)
    found, failures = anyio.run(app.installed_tools, settings, registry)
    for origin, tool in found:
        access = f"{tool.access}, asks first" if tool.requires_approval else tool.access
        summary = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
        print(f"{tool.name}\t{origin}\t{access}\t{summary}")
    for name, reason in failures.items():
        print(f"gateway: MCP server {name} did not start: {reason}", file=sys.stderr)
    return 1 if failures else 0


def _report_problems(registry: app.Registry) -> None:
    for problem in registry.problems:
        print(f"gateway: plugin {problem.plugin}: {problem.reason}", file=sys.stderr)


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    if args.log_format is not None:
        settings.log_format = args.log_format
    app.setup_logging(settings.log_level, settings.log_format)
    if args.db:
        settings.store.path = args.db
    overrides: dict[str, Any] = {}
    for key in ("host", "port", "token"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    for item in args.set:
        target, _, value = item.partition("=")
        transport, _, key = target.partition(".")
        if not key or not _:
            print(f"gateway: --set wants TRANSPORT.KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        section = settings.transports.setdefault(app.section_name(transport), {})
        section[key] = _parse_value(value)
    registry = app.load_registry()
    _report_problems(registry)
    configs = app.transport_configs(settings, registry, args.transport, overrides)
    # JSON logs: every line on stderr is a JSON object, so no banner (its addresses are in the
    # "transport NAME ready on URL" records).
    launch = None if args.quiet or settings.log_format == "json" else _launch(args)
    try:
        backend, options = event_loop(args.backend, args.loop)
        anyio.run(partial(app.serve, launch=launch), settings, registry, configs, backend=backend, backend_options=options)
    except KeyboardInterrupt:
        pass
    except app.StartupError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        for leaf in leaves:
            print(f"gateway: {leaf}" if isinstance(leaf, app.StartupError) else f"gateway: {type(leaf).__name__}: {leaf}", file=sys.stderr)
        return 2 if all(isinstance(e, app.StartupError) for e in leaves) else 1
    except (OSError, ValueError) as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 1
    return 0


def _launch(args: argparse.Namespace) -> Launch:
    """The options that start this gateway again (for the banner's pipe command lines)."""
    options: list[str] = []
    if args.config:
        options += ["--config", os.path.abspath(args.config)]
    if args.db:
        options += ["--db", os.path.abspath(os.path.expanduser(args.db))]
    if args.backend != "asyncio":
        options += ["--backend", args.backend]
    if args.loop != "auto":
        options += ["--loop", args.loop]
    return Launch(tuple(options))


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
