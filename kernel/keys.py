"""API keys: who may use the gateway, with which scopes, agents and limits.

A key is a name and a secret (``gw-`` + 256 random bits). Only the secret's SHA-256 is kept
(in the store, so every instance of a cluster shares the keys, or in ``[[auth.keys]]`` with
the secret read from an environment variable, for read-only setups): a high-entropy secret
needs no slow hash, and a leaked store row gives nobody a working key. Keys are looked up in
the store on every authentication and before every command of a key (no cache), so a
revocation by ``gateway keys revoke`` — another process, perhaps on another machine — holds
at once on every instance.

The admin token (``--token`` / ``GATEWAY_TOKEN``) is not a key: transports compare it
themselves and pass :data:`~kernel.model.ADMIN`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, get_args

import msgspec

from .model import ADMIN, KernelError, Principal, Scope, Usage

if TYPE_CHECKING:
    from .settings import AuthSettings
    from .store import Store

#: Audit lines (key created, revoked, access refused) go here: never a secret, only names.
audit = logging.getLogger("gateway.audit")

SECRET_PREFIX = "gw-"
SCOPES: tuple[Scope, ...] = get_args(Scope)
#: Scopes of a key created without ``--scopes``: use the gateway, not administer it.
DEFAULT_SCOPES: tuple[Scope, ...] = ("read", "prompt", "approve")
KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
#: How often a key's ``last_used_at`` is written (a store write per request would be waste).
TOUCH_EVERY_S = 60.0
#: How long "do keys exist?" is remembered. It is asked by every request that presents no
#: credentials to a gateway without a token (one person on loopback: the default), so it must
#: not cost a store query each time; a first key made by another process is seen within this.
REQUIRED_TTL_S = 1.0


class KeyRecord(msgspec.Struct, kw_only=True):
    """A key as the store keeps it. ``0`` for a limit means none. The usage counters are for
    ``usage_day`` (UTC) only; the totals run since the key was created."""

    name: str
    secret_hash: str
    scopes: tuple[Scope, ...] = DEFAULT_SCOPES
    agents: tuple[str, ...] = ()
    rpm: int = 0
    concurrent: int = 0
    tokens_per_day: int = 0
    created_at: float = 0.0
    expires_at: float | None = None
    revoked_at: float | None = None
    last_used_at: float | None = None
    usage_day: str = ""
    requests_today: int = 0
    tokens_today: int = 0
    requests_total: int = 0
    tokens_total: int = 0

    def principal(self) -> Principal:
        return Principal(name=self.name, scopes=self.scopes, agents=self.agents)

    def live(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def tokens_on(self, day: str) -> int:
        return self.tokens_today if self.usage_day == day else 0


class KeyView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A key as ``gateway keys list`` and ``GET /v1/keys`` show it: never the secret nor its hash."""

    name: str
    scopes: tuple[str, ...]
    agents: tuple[str, ...] = ()
    rpm: int = 0
    concurrent: int = 0
    tokens_per_day: int = 0
    created_at: float = 0.0
    expires_at: float | None = None
    revoked_at: float | None = None
    last_used_at: float | None = None
    source: str = "store"
    requests_today: int = 0
    tokens_today: int = 0
    requests_total: int = 0
    tokens_total: int = 0


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def utc_day(now: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(now))


def parse_scopes(values: Sequence[str]) -> tuple[Scope, ...]:
    """``["read,prompt", "approve"]`` -> the scopes, each known, in the table's order."""
    wanted = {part.strip() for value in values for part in value.split(",") if part.strip()}
    unknown = wanted - set(SCOPES)
    if unknown:
        raise KernelError("invalid_request", f"unknown scope(s) {sorted(unknown)}: the scopes are {', '.join(SCOPES)}")
    if not wanted:
        raise KernelError("invalid_request", "a key needs at least one scope")
    return tuple(scope for scope in SCOPES if scope in wanted)


def check_name(name: str) -> str:
    if not KEY_NAME.match(name):
        raise KernelError("invalid_request", f"invalid key name {name!r}: 1-64 letters, digits, '_', '.', '@', '-'")
    if name in (ADMIN.name, "anonymous"):
        raise KernelError("invalid_request", f"{name!r} is reserved (the admin token's, or unauthenticated callers'); choose another")
    return name


def view(record: KeyRecord, *, source: str = "store", now: float | None = None) -> KeyView:
    day = utc_day(time.time() if now is None else now)
    today = record.usage_day == day
    return KeyView(
        name=record.name, scopes=record.scopes, agents=record.agents, rpm=record.rpm, concurrent=record.concurrent,
        tokens_per_day=record.tokens_per_day, created_at=record.created_at, expires_at=record.expires_at,
        revoked_at=record.revoked_at, last_used_at=record.last_used_at, source=source,
        requests_today=record.requests_today if today else 0, tokens_today=record.tokens_today if today else 0,
        requests_total=record.requests_total, tokens_total=record.tokens_total,
    )


class Keyring:
    """The keys of one kernel: those of the store and those of the configuration."""

    def __init__(self, store: Store, auth: AuthSettings, environ: dict[str, str] | None = None) -> None:
        self.store = store
        env = os.environ if environ is None else environ
        self.configured: dict[str, KeyRecord] = {}
        for key in auth.keys:
            secret = env.get(key.secret_env)
            if not secret:
                raise KernelError("invalid_request", f"auth.keys {key.name!r}: the environment variable {key.secret_env} is not set")
            self.configured[key.name] = KeyRecord(
                name=key.name, secret_hash=hash_secret(secret), scopes=parse_scopes(key.scopes), agents=tuple(key.agents),
                rpm=key.rpm, concurrent=key.concurrent, tokens_per_day=key.tokens_per_day,
            )
        self._touched: dict[str, float] = {}
        self._required: tuple[bool, float] | None = None  # (keys exist, until when: monotonic)

    async def authenticate(self, secret: str | None) -> Principal | None:
        """The principal of a presented key, or None (unknown, revoked or expired)."""
        if not secret or not await self.required():
            # No key exists (the count is cached for a second): nothing to look up. An SDK
            # always sends some key, so this spares a store query per request of a gateway
            # without keys.
            return None
        digest = hash_secret(secret)
        for configured in self.configured.values():
            if hmac.compare_digest(configured.secret_hash, digest):
                return configured.principal()
        record = await self.store.find_key(digest)
        now = time.time()
        if record is None or not hmac.compare_digest(record.secret_hash, digest) or not record.live(now):
            return None
        if now - self._touched.get(record.name, 0.0) >= TOUCH_EVERY_S:
            self._touched[record.name] = now
            await self.store.touch_key(record.name, now)
        return record.principal()

    async def required(self) -> bool:
        """Whether any key exists: then a request without credentials is refused even where
        no admin token is set (a loopback gateway that people share)."""
        if self.configured:
            return True
        now = time.monotonic()
        if self._required is None or now >= self._required[1]:
            self._required = (await self.store.count_keys() > 0, now + REQUIRED_TTL_S)
        return self._required[0]

    async def current(self, principal: Principal) -> KeyRecord | None:
        """The key behind a principal as it is now (limits, usage); None for the admin token.
        A key revoked or expired since the principal was resolved is refused here, so a
        connection opened before ``keys revoke`` is refused at its next command."""
        if principal.name == ADMIN.name:
            return None
        record = self.configured.get(principal.name) or await self.store.get_key(principal.name)
        if record is None or not record.live(time.time()):
            audit.warning("refused: key %s is revoked, expired or unknown", principal.name)
            raise KernelError("unauthorized", "this API key is revoked or expired")
        return record

    async def record_run(self, name: str, usage: Usage) -> None:
        """A key's run ended: one request and its tokens count towards today's window."""
        if name == ADMIN.name or name in self.configured:
            if name in self.configured:
                self._count_configured(self.configured[name], usage)
            return
        await self.store.add_key_usage(name, utc_day(time.time()), 1, usage.input_tokens + usage.output_tokens)

    @staticmethod
    def _count_configured(record: KeyRecord, usage: Usage) -> None:
        day = utc_day(time.time())
        if record.usage_day != day:
            record.usage_day, record.requests_today, record.tokens_today = day, 0, 0
        tokens = usage.input_tokens + usage.output_tokens
        record.requests_today += 1
        record.tokens_today += tokens
        record.requests_total += 1
        record.tokens_total += tokens

    # ---------------------------------------------------------- administration

    async def create(
        self,
        name: str,
        *,
        scopes: Sequence[str] = DEFAULT_SCOPES,
        agents: Sequence[str] = (),
        rpm: int = 0,
        concurrent: int = 0,
        tokens_per_day: int = 0,
        expires_at: float | None = None,
    ) -> tuple[KeyRecord, str]:
        """A new key and its secret — the only time the secret exists outside the client."""
        check_name(name)
        if name in self.configured:
            raise KernelError("invalid_request", f"key {name!r} is defined in the configuration ([[auth.keys]])")
        for label, value in (("rpm", rpm), ("concurrent", concurrent), ("tokens-per-day", tokens_per_day)):
            if value < 0:
                raise KernelError("invalid_request", f"{label} must be >= 0 (0: no limit)")
        secret = new_secret()
        record = KeyRecord(
            name=name, secret_hash=hash_secret(secret), scopes=parse_scopes(list(scopes)), agents=tuple(agents),
            rpm=rpm, concurrent=concurrent, tokens_per_day=tokens_per_day, created_at=time.time(), expires_at=expires_at,
        )
        if not await self.store.insert_key(record):
            raise KernelError("invalid_request", f"a key named {name!r} exists already (revoke it first, or choose another name)")
        self._required = None
        audit.info("key created: %s scopes=%s agents=%s", name, ",".join(record.scopes), ",".join(record.agents) or "*")
        return record, secret

    async def revoke(self, name: str) -> None:
        if name in self.configured:
            raise KernelError("invalid_request", f"key {name!r} is defined in the configuration: remove it there")
        if not await self.store.revoke_key(name, time.time()):
            raise KernelError("not_found", f"no live key named {name!r}")
        self._required = None
        audit.info("key revoked: %s", name)

    async def views(self) -> list[KeyView]:
        now = time.time()
        return [view(r, source="config", now=now) for r in self.configured.values()] + [
            view(r, now=now) for r in await self.store.list_keys()
        ]
