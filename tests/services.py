"""What a test needs from outside Python: a browser, Node, PostgreSQL, Redis.

A test that cannot get what it needs is skipped with one clear line, naming what is
missing — unless ``GATEWAY_REQUIRE_SERVICES`` is set (``.ci/run`` sets it), when the
same line fails it instead: in CI a missing service is a broken setup, not a pass.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REQUIRE_ENV = "GATEWAY_REQUIRE_SERVICES"


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0", "false", "no")


def unavailable(what: str) -> None:
    """Skip (or, with ``GATEWAY_REQUIRE_SERVICES``, fail) the test: ``what`` is missing."""
    if required():
        pytest.fail(f"{what} ({REQUIRE_ENV} is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(what)


# ------------------------------------------------------------------ PostgreSQL and Redis

POSTGRES_ENV = "GATEWAY_TEST_POSTGRES_URL"
REDIS_ENV = "GATEWAY_TEST_REDIS_URL"
_started: dict[str, str] = {}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _as_postgres_user(args: list[str]) -> list[str]:
    """initdb and pg_ctl refuse to run as root: run them as the ``postgres`` user then."""
    if os.geteuid() == 0 and shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *args]
    return args


class OwnPostgres:
    """A PostgreSQL server of the test's own (``initdb`` + ``pg_ctl``, trust auth, 127.0.0.1),
    that the test may stop and start again — never the machine's."""

    def __init__(self) -> None:
        if not (shutil.which("initdb") and shutil.which("pg_ctl")):
            unavailable("initdb and pg_ctl are not on PATH: no PostgreSQL server of the test's own can be started")
        self.data_dir = Path(tempfile.mkdtemp(prefix="gateway-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "postgres", "postgres")
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        subprocess.run(_as_postgres_user(["initdb", "-D", str(self.data_dir), "-A", "trust", "-U", "postgres"]), check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.data_dir} -c fsync=off"
        done = subprocess.run(
            _as_postgres_user(["pg_ctl", "-D", str(self.data_dir), "-o", options, "-l", str(self.data_dir / "server.log"), "-w", "-t", "60", "start"]),
            capture_output=True, timeout=90, check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.decode(errors='replace')}")

    def stop(self) -> None:
        subprocess.run(_as_postgres_user(["pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop"]), capture_output=True, timeout=60, check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


@contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    server = OwnPostgres()
    server.start()
    try:
        yield server
    finally:
        server.remove()


def postgres_url() -> str:
    """The test PostgreSQL: ``GATEWAY_TEST_POSTGRES_URL`` (the machine's, by default), or one
    started from ``PATH`` for this test run; else skipped (or failed, when required)."""
    url = os.environ.get(POSTGRES_ENV, "postgresql://postgres@127.0.0.1:5432/test")
    if "postgres" in _started:
        return _started["postgres"]
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if _reachable(parts.hostname or "127.0.0.1", parts.port or 5432):
        return url
    if shutil.which("initdb") and shutil.which("pg_ctl"):
        server = OwnPostgres()
        server.start()
        atexit.register(server.remove)
        _started["postgres"] = server.url
        return server.url
    unavailable(f"PostgreSQL is not reachable at {parts.hostname}:{parts.port or 5432} ({POSTGRES_ENV}) and none could be started")
    raise AssertionError("unreachable")


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A store URL on a schema of this test's own, dropped afterwards."""
    import psycopg

    base = postgres_url()
    schema = f"gw_test_{uuid.uuid4().hex[:12]}"
    joiner = "&" if "?" in base else "?"
    try:
        yield f"{base}{joiner}schema={schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def start_redis(port: int, data_dir: Path) -> subprocess.Popen[bytes]:
    """A Redis server of our own on 127.0.0.1 (nothing kept on disk)."""
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(data_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not _reachable("127.0.0.1", port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)
    return process


def redis_url() -> str:
    """The test Redis: ``GATEWAY_TEST_REDIS_URL`` (the machine's, by default), or one started
    from ``PATH`` for this test run; else skipped (or failed, when required)."""
    url = os.environ.get(REDIS_ENV, "redis://127.0.0.1:6379/0")
    if "redis" in _started:
        return _started["redis"]
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if _reachable(parts.hostname or "127.0.0.1", parts.port or 6379):
        return url
    if shutil.which("redis-server"):
        port = free_port()
        process = start_redis(port, Path(tempfile.mkdtemp(prefix="gateway-redis-")))
        atexit.register(process.terminate)
        _started["redis"] = f"redis://127.0.0.1:{port}/0"
        return _started["redis"]
    unavailable(f"Redis is not reachable at {parts.hostname}:{parts.port or 6379} ({REDIS_ENV}) and redis-server is not installed")
    raise AssertionError("unreachable")
