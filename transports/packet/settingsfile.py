"""TrulyMEM's JSON settings file, the ``config_file`` of its ``BackendServer``.

A flat JSON object (``~/.trulymem/config.json`` by default): the model's ``api_key``,
``base_url`` and ``model``, the application's ``message_timeout`` (how long a request
waits, in seconds), ``enable_web``, ``enable_tui`` and ``web_port``, and the per-run tool
limits (``persona_update_max``, ``task_query_max``, …). A program's server reads it when
it starts and writes it when it is missing and after every ``set_settings``, so the
file may not exist yet. Here its API and limit keys become the gateway's settings, the
application keys are kept (and shown by ``get_settings``), and every other key stays
in the file as it was given.

It holds an API key: it is written with mode 0600, atomically (a crash leaves the old
file or the new one). An empty ``api_key`` or ``base_url`` is "not set here", so a key
from the environment or the gateway's TOML file applies and is never copied to disk.

TrulyMEM's web app gives each user a settings file and a database of their own,
recorded in its user table (``~/.trulymem/trulymem.db``); :func:`user_paths` reads
them, so ``BackendServer(username=...)`` opens that user's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import msgspec

from kernel import Settings, decode_json
from kernel import model as m

from . import codec
from .wire import Answer, SetSettingsBody

log = logging.getLogger("gateway.packet")

#: Where TrulyMEM's server keeps the file when it is given no path, and its user table.
DEFAULT_DIR_NAME = ".trulymem"
DEFAULT_FILE_NAME = "config.json"
USERS_DB_NAME = "trulymem.db"
#: The application settings a new file starts with: TrulyMEM's, but the document's 30 s wait.
APP_DEFAULTS: dict[str, Any] = {"message_timeout": 30, "enable_web": False, "enable_tui": True, "web_port": 4096}
#: A settings file is a few hundred bytes; anything this big is not one.
MAX_FILE_BYTES = 1_048_576


class SettingsFileError(ValueError):
    """The settings file exists but cannot be used; the message names the file and why."""


def default_path() -> Path:
    """``~/.trulymem/config.json``, as TrulyMEM's server uses when given no path."""
    return Path.home() / DEFAULT_DIR_NAME / DEFAULT_FILE_NAME


def user_paths(username: str) -> tuple[str | None, str | None]:
    """``(config_path, db_path)`` of ``username`` in TrulyMEM's user table; ``None`` for
    what it does not record (no table, no such user: the default paths apply, as there)."""
    users = Path.home() / DEFAULT_DIR_NAME / USERS_DB_NAME
    if not username or not users.is_file():
        return None, None
    try:
        with contextlib.closing(sqlite3.connect(f"{users.as_uri()}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT config_path, db_path FROM web_users WHERE username = ?", (username,)).fetchone()
    except sqlite3.Error as exc:
        log.warning("packet: cannot read the user %r from %s (%s); using the default paths", username, users, exc)
        return None, None
    if row is None:
        return None, None
    return row[0] or None, row[1] or None


def _is_limit(key: str) -> bool:
    return key.endswith("_query_max") or key.endswith("_update_max")


class SettingsFile:
    """One settings file: what it held when last read or written (``values``), how that
    becomes a settings update, and what to write after one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        #: The file's content; replaced as a whole, so other threads read one version.
        self.values: dict[str, Any] = {}
        self.existed = False

    # -------------------------------------------------------------- reading

    def read(self) -> codec.SettingsUpdate:
        """Load the file (nothing when it does not exist yet) as the update it asks for."""
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            self.values, self.existed = {}, False
            return codec.SettingsUpdate(command=m.UpdateSettings())
        except OSError as exc:
            raise SettingsFileError(f"settings file {self.path}: cannot be read: {exc.strerror or exc}") from None
        if len(data) > MAX_FILE_BYTES:
            raise SettingsFileError(f"settings file {self.path}: over {MAX_FILE_BYTES} bytes; not a settings file")
        try:
            values = decode_json(data)
        except msgspec.DecodeError as exc:
            hint = " (a gateway TOML file is given as gateway_config=)" if self.path.suffix == ".toml" else ""
            raise SettingsFileError(f"settings file {self.path}: not valid JSON: {exc}{hint}") from None
        if not isinstance(values, dict):
            raise SettingsFileError(f"settings file {self.path}: expected a JSON object, got {type(values).__name__}")
        update = self._update(values)
        self.values, self.existed = values, True
        return update

    def _update(self, values: dict[str, Any]) -> codec.SettingsUpdate:
        """The file's API settings, limits and ``message_timeout``, checked like a ``set_settings``."""
        api = {k: values[k] for k in codec.API_KEYS if values.get(k) not in (None, "")}
        if "message_timeout" in values:
            api["message_timeout"] = values["message_timeout"]
        limits = {k: v for k, v in values.items() if _is_limit(k)}
        update = codec.settings_update(SetSettingsBody(api_config=api, tool_limits=limits))
        if isinstance(update, Answer):
            error = str(update.get("error")).removeprefix("api_config.").removeprefix("tool_limits.")
            raise SettingsFileError(f"settings file {self.path}: {error}")
        return update

    def message_timeout(self) -> float:
        """How long a request waits for its answer (checked when read or set)."""
        return float(self.values.get("message_timeout", APP_DEFAULTS["message_timeout"]))

    def app_settings(self) -> dict[str, Any]:
        """The application settings, for ``get_settings`` and ``get_status``."""
        return {key: self.values.get(key, default) for key, default in APP_DEFAULTS.items()}

    # -------------------------------------------------------------- writing

    def content(self, settings: Settings, changes: dict[str, Any], app: dict[str, Any]) -> dict[str, Any]:
        """What the file holds once ``changes`` (a kernel settings change just applied)
        and ``app`` are: the effective model settings and limits; the API key only as
        given through the file, ``start()`` or ``set_settings``; every other key kept."""
        given = changes.get("provider", {}).get("openai", {})
        openai = settings.provider.openai
        content = dict(self.values)
        content["api_key"] = (given["api_key"] if "api_key" in given else self.values.get("api_key")) or ""
        content["base_url"] = openai.base_url or ""
        content["model"] = openai.model
        for key, default in APP_DEFAULTS.items():
            content.setdefault(key, default)
        content.update(app)
        content.update(settings.tools.limits)
        return content

    def save(self, content: dict[str, Any]) -> None:
        """Write ``content`` (mode 0600, replacing the file in one step); then it is ``values``."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:12]}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(msgspec.json.format(msgspec.json.encode(content), indent=2) + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        self.values, self.existed = content, True
