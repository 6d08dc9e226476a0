"""JSON log lines from a real ``gateway serve --log-format json``, and the live log views (the
console's ``/v1/logs`` and OpenFang's ``/api/logs/stream``) showing the same records."""

from __future__ import annotations

import json
import logging
import re
import secrets
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from kernel import LOG_RING
from kernel.testing import running_kernel
from plugins.telemetry.logs import JsonFormatter
from tests.subprocess_gateway import gateway_env, gateway_process
from tests.transports.http._helpers import SSEParser, client, http_server

pytestmark = pytest.mark.anyio

TRACE_ID = secrets.token_hex(16)


async def stderr_lines(stream: Any) -> AsyncIterator[str]:
    buffer = b""
    while True:
        while b"\n" not in buffer:
            buffer += await stream.receive()
        line, _, buffer = buffer.partition(b"\n")
        yield line.decode()


async def test_gateway_serve_writes_one_json_object_per_line_with_the_runs_context(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('log_level = "debug"\n')
    args = ["serve", "-t", "http", "--port", "0", "--log-format", "json", "--config", str(config)]  # no --quiet: no banner either
    async with gateway_process(args, gateway_env(tmp_path / "gw.db")) as gateway:
        assert gateway.process.stderr is not None
        lines: list[dict[str, Any]] = []
        url = None
        run_line = None
        with anyio.fail_after(30):
            async for raw in stderr_lines(gateway.process.stderr):
                entry = json.loads(raw)  # every line is one JSON object
                assert {"ts", "level", "logger", "msg"} <= entry.keys(), entry
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["ts"])
                lines.append(entry)
                found = re.search(r"transport http ready on (http://\S+)", entry["msg"])
                if found and url is None:
                    url = found.group(1)
                    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                        created = await http.post("/v1/sessions", json={"session_id": "s-json-log"})
                        assert created.status_code in (200, 201)
                        done = await http.post(
                            "/v1/sessions/s-json-log/prompt", json={"text": "hello there"},
                            headers={"accept": "application/json", "traceparent": f"00-{TRACE_ID}-{secrets.token_hex(8)}-01"},
                        )
                        assert done.status_code == 200, done.text
                        run_id = done.json()["run_id"]
                if entry["logger"] == "gateway.runs":
                    run_line = entry
                    break
        assert run_line is not None and url is not None
        assert {k: run_line.get(k) for k in ("transport", "session_id", "run_id", "trace_id", "level")} == {
            "transport": "http", "session_id": "s-json-log", "run_id": run_id, "trace_id": TRACE_ID, "level": "DEBUG",
        }
        assert "completed" in run_line["msg"]
        gateway.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await gateway.process.wait() == 0


def test_the_json_format_escapes_newlines_and_carries_extra_context() -> None:
    record = logging.LogRecord("gateway.test", logging.ERROR, __file__, 1, "two\nlines %s", ("here",), None)
    record.__dict__["transport"] = "openfang"
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert json.loads(line) | {"ts": "x"} == {"ts": "x", "level": "ERROR", "logger": "gateway.test", "msg": "two\nlines here", "transport": "openfang"}


@pytest.fixture
def log_ring() -> Any:
    """The kernel's ring installed on the root logger, as ``gateway serve`` installs it."""
    root = logging.getLogger()
    level = root.level
    root.addHandler(LOG_RING)
    root.setLevel(logging.INFO)
    yield LOG_RING
    root.removeHandler(LOG_RING)
    root.setLevel(level)


async def _sse_data(response: httpx.Response, wanted: int, predicate: Any) -> list[dict[str, Any]]:
    """The first ``wanted`` events (JSON data) matching ``predicate``."""
    parser = SSEParser()
    out: list[dict[str, Any]] = []
    async for line in response.aiter_lines():
        event = parser.feed(line)
        if event is not None:
            data = json.loads(event.data)
            if predicate(data):
                out.append(data)
                if len(out) == wanted:
                    return out
    raise AssertionError(f"stream ended after {out}")


async def test_the_console_log_feed_sends_the_backlog_then_live_lines(log_ring: Any) -> None:
    marker = secrets.token_hex(6)
    logging.getLogger("gateway.test").warning("before the stream %s", marker)
    async with running_kernel() as kernel, http_server(kernel) as url, client(url) as http:
        async with http.stream("GET", "/v1/logs") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            logged = False

            def mine(data: dict[str, Any]) -> bool:
                nonlocal logged
                if not logged:  # the backlog arrived: now log a live line
                    logged = True
                    logging.getLogger("gateway.test").error("while streaming %s", marker)
                return marker in data["msg"]

            with anyio.fail_after(10):
                before, during = await _sse_data(response, 2, mine)
        assert (before["level"], before["logger"], before["msg"]) == ("WARNING", "gateway.test", f"before the stream {marker}")
        assert (during["level"], during["msg"]) == ("ERROR", f"while streaming {marker}")
        assert during["seq"] > before["seq"]


async def test_a_token_guards_the_log_feed(log_ring: Any) -> None:
    async with running_kernel() as kernel, http_server(kernel, token="s3cret-token") as url, client(url) as http:
        assert (await http.get("/v1/logs")).status_code == 401
