"""``gateway keys create|list|revoke``: API keys in the store the running gateway uses.

The command opens the same store as ``gateway serve`` with the same ``--config`` / ``--db``
(a SQLite file, or PostgreSQL for a cluster), so a key created or revoked here holds at once
for every instance: the gateway looks keys up in the store on every request and command.
The secret is printed once, on stdout (for ``export ANTHROPIC_API_KEY=$(gateway keys create
…)``); only its SHA-256 is stored. docs/security.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
from typing import Any

import anyio
import msgspec

from kernel import Keyring, KeyView, Settings

from . import app

_DURATION = re.compile(r"^(\d+)([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def add_parser(sub: Any) -> None:
    keys = sub.add_parser("keys", help="create, list and revoke API keys (in the store the gateway uses)")
    keys.add_argument("--config", "-c", metavar="FILE", help="a gateway.toml file (its [store] is used)")
    keys.add_argument("--db", metavar="PATH", help="the store: a SQLite file or a postgresql:// URL (default from the config)")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create = actions.add_parser("create", help="a new key; its secret is printed once, on stdout")
    create.add_argument("name", help="the key's name (what sessions record as their owner; never secret)")
    create.add_argument("--scopes", action="append", metavar="LIST", help="read, prompt, approve, admin (comma-separated or repeated; default read,prompt,approve)")
    create.add_argument("--agents", action="append", metavar="LIST", help="the agents (ids) the key may use (default: all)")
    create.add_argument("--rpm", type=int, default=0, metavar="N", help="runs started per minute (0: no limit)")
    create.add_argument("--concurrent", type=int, default=0, metavar="N", help="runs at the same time (0: no limit)")
    create.add_argument("--tokens-per-day", type=int, default=0, metavar="N", help="model tokens per UTC day (0: no limit)")
    create.add_argument("--expires", metavar="WHEN", help="30d, 12h, 2w, or a date/time (ISO 8601, UTC unless it says)")
    listing = actions.add_parser("list", help="the keys: name, scopes, limits, created, last used (never a secret)")
    listing.add_argument("--usage", action="store_true", help="with today's and all-time requests and tokens")
    listing.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    revoke = actions.add_parser("revoke", help="refuse a key from now on, on every instance")
    revoke.add_argument("name")


def parse_expiry(text: str, now: float) -> float:
    """``30d`` / ``12h`` / ``2w`` / ``90m`` from now, or an ISO 8601 date or time (UTC by default)."""
    match = _DURATION.match(text.strip())
    if match:
        return now + int(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise SystemExit(f"gateway: --expires {text!r}: give 30d, 12h, 2w, 90m or an ISO 8601 date") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    if when.timestamp() <= now:
        raise SystemExit(f"gateway: --expires {text!r} is in the past")
    return when.timestamp()


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.db:
        settings.store.path = args.db
    return anyio.run(_run, args, settings)


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    app.setup_logging(settings.log_level, settings.log_format)  # the audit lines go to stderr
    store = app.build_store(settings.store.path, app.load_registry())
    await store.open()
    try:
        keys = Keyring(store, settings.auth)
        if args.keys_command == "create":
            record, secret = await keys.create(
                args.name, scopes=args.scopes or ("read", "prompt", "approve"), agents=_split(args.agents),
                rpm=args.rpm, concurrent=args.concurrent, tokens_per_day=args.tokens_per_day,
                expires_at=parse_expiry(args.expires, time.time()) if args.expires else None,
            )
            print(secret)
            print(f"gateway: key {record.name!r} created (scopes {','.join(record.scopes)}); the secret above is shown only now", file=sys.stderr)
        elif args.keys_command == "revoke":
            await keys.revoke(args.name)
            print(f"gateway: key {args.name!r} revoked")
        else:
            views = await keys.views()
            if args.json:
                print(json.dumps(msgspec.to_builtins(views)))
            else:
                print(_table(views, usage=args.usage))
    finally:
        await store.close()
    return 0


def _split(values: list[str] | None) -> list[str]:
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def _when(stamp: float | None) -> str:
    return "-" if stamp is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(stamp))


def _table(views: list[KeyView], *, usage: bool) -> str:
    head = ["name", "scopes", "agents", "rpm", "concurrent", "tokens/day", "created", "last used", "state"]
    if usage:
        head += ["requests today", "tokens today", "requests", "tokens"]
    rows = [head]
    now = time.time()
    for v in views:
        state = "revoked" if v.revoked_at is not None else "expired" if v.expires_at is not None and v.expires_at <= now else v.source
        row = [
            v.name, ",".join(v.scopes), ",".join(v.agents) or "*", str(v.rpm or "-"), str(v.concurrent or "-"),
            str(v.tokens_per_day or "-"), _when(v.created_at or None), _when(v.last_used_at), state,
        ]
        if usage:
            row += [str(v.requests_today), str(v.tokens_today), str(v.requests_total), str(v.tokens_total)]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows)
