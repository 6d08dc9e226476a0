"""TrulyMEM's own program: its ``BackendServer`` call and its JSON settings file.

TrulyMEM (``core/server.py`` of JianFeeeee/TrulyMEM-TrueHumanMEM) constructs
``BackendServer(db_path="graph_memory.db", use_embedded_db=True, config_file=None,
username="")`` and keeps its settings in a flat JSON file that need not exist yet: read
when present, written with defaults on first start and after every ``SET_SETTINGS``.
The programs below make those calls (their import line aside) on a backend thread
running asyncio or trio; the model is the fake OpenAI server standing in for DeepSeek.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.settings import DEFAULT_TOOL_LIMITS
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_openai_server
from transports.packet import BackendClient, BackendServer, SettingsFileError
from transports.packet.settingsfile import SettingsFile

from . import example_core
from ._support import run_program

FIRST_START = '''
from core import BackendServer, BackendClient

server = BackendServer(db_path="graph_memory.db", use_embedded_db=True, config_file=CONFIG, username="")
server.start()
client = BackendClient(server)
reply = client.process_message("你好")
settings = client.get_settings()
'''

# TrulyMEM's web settings page: read the settings, change one field, post them all back.
SETTINGS_PAGE = '''
current = client.get_settings()
api_config = current["data"]["api_config"]
api_config["enable_tui"] = False
page = client.update_settings(api_config, current["data"]["tool_limits"])
'''

SET_SETTINGS = '''
result = client.update_settings(
    api_config={"api_key": "sk-trulymem-0123456789abcdef", "model": "deepseek-reasoner", "message_timeout": 120},
    tool_limits={"memory_query_max": 7},
)
status = client.get_status()
answer = client.process_message("再见")
server.shutdown()
'''

RESTART = '''
from core import BackendServer, BackendClient

server = BackendServer(db_path="graph_memory.db", use_embedded_db=True, config_file=CONFIG, username="")
server.start()
client = BackendClient(server)
settings = client.get_settings()
status = client.get_status()
answer = client.process_message("又见面了")
server.shutdown()
'''

DEFAULTS = {
    "api_key": "",
    "base_url": "https://api.deepseek.com",
    "model": "deepseek-chat",
    "message_timeout": 30,
    "enable_web": False,
    "enable_tui": True,
    "web_port": 4096,
    **DEFAULT_TOOL_LIMITS,
}
KEY = "sk-trulymem-0123456789abcdef"


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def deepseek(program_loop: str) -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server in place of api.deepseek.com (as a DNS override would)."""
    with start_blocking_portal(program_loop) as portal, portal.wrap_async_context_manager(fake_openai_server([Reply(text="好的")])) as fake:
        example_core.UPSTREAM = fake.base_url
        yield fake


def test_a_new_settings_file_is_created_rewritten_and_read_back(deepseek: FakeOpenAIServer, tmp_path: Path) -> None:
    config = tmp_path / "settings" / "config.json"  # neither the file nor its directory exists yet
    ns = run_program(FIRST_START, CONFIG=str(config))
    # First start: written with the defaults, readable by its owner only; no key yet, so the echo model.
    assert read(config) == DEFAULTS and mode(config) == 0o600
    assert ns["reply"]["data"]["content"] == "echo: 你好" and deepseek.requests == []
    assert ns["settings"]["data"]["api_config"] == {"api_key": None, **{k: DEFAULTS[k] for k in ("base_url", "model", "message_timeout", "enable_web", "enable_tui", "web_port")}}

    run_program(SETTINGS_PAGE, client=ns["client"])
    assert read(config) == {**DEFAULTS, "enable_tui": False}

    ns = run_program(SET_SETTINGS, client=ns["client"], server=ns["server"])
    assert ns["result"] == {"success": True, "data": {"status": "settings_updated"}}
    written = read(config)
    assert written == {**DEFAULTS, "api_key": KEY, "model": "deepseek-reasoner", "message_timeout": 120, "enable_tui": False, "memory_query_max": 7}
    assert mode(config) == 0o600
    # The key is in the file (the program needs it back) but never in an answer.
    config_seen = ns["status"]["data"]["config"]
    assert config_seen["api_key"] == "sk-…cdef" and KEY not in json.dumps(ns["status"])
    assert (config_seen["message_timeout"], config_seen["timeout_s"], config_seen["config_file"]) == (120, 120.0, str(config))
    assert ns["answer"]["data"]["content"] == "好的"
    assert deepseek.headers[-1]["authorization"] == f"Bearer {KEY}" and deepseek.requests[-1]["model"] == "deepseek-reasoner"

    # Restart: the file is read; a hand edit made meanwhile wins over what the database remembers.
    config.write_text(json.dumps({**written, "model": "deepseek-chat", "task_query_max": 9}), encoding="utf-8")
    ns = run_program(RESTART, CONFIG=str(config))
    api_config = ns["settings"]["data"]["api_config"]
    assert api_config["api_key"] == "sk-…cdef" and api_config["model"] == "deepseek-chat" and api_config["enable_tui"] is False
    assert ns["settings"]["data"]["tool_limits"] == {**DEFAULT_TOOL_LIMITS, "memory_query_max": 7, "task_query_max": 9}
    assert ns["status"]["data"]["config"]["timeout_s"] == 120.0
    assert ns["answer"]["data"]["content"] == "好的" and deepseek.requests[-1]["model"] == "deepseek-chat"
    assert read(config)["task_query_max"] == 9 and KEY not in json.dumps(ns["settings"])


def test_a_settings_file_that_cannot_be_written_is_reported(program_loop: str, tmp_path: Path) -> None:
    config = tmp_path / "conf" / "config.json"
    with example_core.BackendServer(config_file=config) as server:
        client = BackendClient(server)
        config.unlink()
        config.parent.rmdir()
        config.parent.write_text("a file where the directory was", encoding="utf-8")
        answer = client.update_settings(tool_limits={"memory_query_max": 4})
        assert answer["success"] is False and answer["error"].startswith(f"settings applied, but not saved to {config}: ")
        assert client.get_settings()["data"]["tool_limits"]["memory_query_max"] == 4  # the kernel has it
        assert client.process_message("still fine")["data"]["content"] == "echo: still fine"


# TrulyMEM's web app: ``BackendServer(username=username)`` and ``start()``, the key in the default file.
WEB_APP = '''
from core import BackendServer, BackendClient

backend_server = BackendServer(username=USERNAME)
backend_server.start()
backend_client = BackendClient(backend_server)
db_path = backend_server._db_path
status = backend_client.get_status()
answer = backend_client.process_message("hello")
'''

#: TrulyMEM's user table, as its web app creates it (``core/embedded_db.py``).
WEB_USERS = """
CREATE TABLE IF NOT EXISTS web_users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    username TEXT UNIQUE NOT NULL,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL DEFAULT 'user',
    config_path TEXT,
    db_path TEXT,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
)
"""


def test_the_default_file_of_an_existing_installation_is_used(deepseek: FakeOpenAIServer, tmp_path: Path) -> None:
    config = tmp_path / ".trulymem" / "config.json"
    config.parent.mkdir()
    # As TrulyMEM writes it (its own limit defaults, a 10-minute timeout), plus a key of the user's.
    existing = {
        "api_key": KEY, "base_url": "https://api.deepseek.com", "model": "deepseek-v4-flash", "message_timeout": 600,
        "enable_web": True, "enable_tui": True, "web_port": 4096,
        "persona_update_max": 1, "task_update_max": 20, "task_query_max": 30, "memory_query_max": 30, "memory_update_max": 15,
        "theme": {"name": "dark"},
    }
    config.write_text(json.dumps(existing), encoding="utf-8")
    config.chmod(0o644)
    ns = run_program(WEB_APP, USERNAME="alice")  # not in a user table: the default paths
    assert ns["db_path"] == "graph_memory.db" and (tmp_path / "graph_memory.db").exists()
    status = ns["status"]["data"]
    assert status["client_initialized"] is True and status["config"]["username"] == "alice"
    assert (status["config"]["config_file"], status["config"]["timeout_s"], status["config"]["enable_web"]) == (str(config), 600.0, True)
    assert status["config"]["tool_limits"] == {**DEFAULT_TOOL_LIMITS, "task_update_max": 20, "task_query_max": 30, "memory_query_max": 30, "memory_update_max": 15}
    assert ns["answer"]["data"]["content"] == "好的" and deepseek.headers[-1]["authorization"] == f"Bearer {KEY}"
    assert deepseek.requests[-1]["model"] == "deepseek-v4-flash"
    # Rewritten once to what is in use (the gateway's persona_query_max added): 0600, nothing lost.
    assert read(config) == {**existing, "persona_query_max": 1} and mode(config) == 0o600


def test_a_user_of_the_web_app_gets_the_files_its_user_table_records(program_loop: str, tmp_path: Path) -> None:
    user_dir = tmp_path / ".trulymem" / "bob"
    user_dir.mkdir(parents=True)
    with contextlib.closing(sqlite3.connect(tmp_path / ".trulymem" / "trulymem.db")) as db:
        db.execute(WEB_USERS)
        db.execute(
            "INSERT INTO web_users (username, password_hash, config_path, db_path) VALUES (?, ?, ?, ?)",
            ("bob", "0" * 64, str(user_dir / "config.json"), str(user_dir / "bob_graph.db")),
        )
        db.commit()
    ns = run_program(WEB_APP, USERNAME="bob")
    assert ns["db_path"] == str(user_dir / "bob_graph.db") and (user_dir / "bob_graph.db").exists()
    assert ns["status"]["data"]["config"]["config_file"] == str(user_dir / "config.json")
    assert read(user_dir / "config.json") == DEFAULTS and mode(user_dir / "config.json") == 0o600
    assert ns["answer"]["data"]["content"] == "echo: hello"
    assert not (tmp_path / ".trulymem" / "config.json").exists() and not (tmp_path / "graph_memory.db").exists()


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{not json", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON: JSON nested too deeply"),
        ('["api_key"]', "expected a JSON object, got list"),
        ('{"task_query_max": 0}', "task_query_max must be an integer >= 1 (got 0)"),
        ('{"model": 5}', "model must be a string"),
        ('{"message_timeout": "600"}', "message_timeout must be a number of seconds"),
    ],
    ids=["not-json", "nested-too-deep", "not-an-object", "limit-below-1", "model-not-a-string", "timeout-not-a-number"],
)
def test_a_broken_settings_file_is_a_clear_error_and_left_alone(tmp_path: Path, content: str, error: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(content, encoding="utf-8")
    server = BackendServer(db_path=str(tmp_path / "g.db"), use_embedded_db=True, config_file=str(config), username="")
    with pytest.raises(SettingsFileError) as raised:
        server.start()
    assert str(raised.value).startswith(f"settings file {config}: ") and error in str(raised.value)
    assert not server.running and config.read_text(encoding="utf-8") == content


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
FILE_KEYS = st.sampled_from([*DEFAULTS, "theme", "plugin_query_max", "x_update_max"])


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(FILE_KEYS, JSON, max_size=6) | JSON)
def test_any_json_file_is_read_or_refused_with_a_clear_error(content: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_bytes(json.dumps(content).encode())
        settings_file = SettingsFile(path)
        try:
            update = settings_file.read()
        except SettingsFileError as exc:
            assert str(exc).startswith(f"settings file {path}: ")
        else:
            assert settings_file.existed and settings_file.values == content
            assert set(update.command.changes) <= {"provider", "tools"}
            assert 0 < settings_file.message_timeout() <= 86_400


def test_a_gateway_toml_goes_to_gateway_config(program_loop: str, tmp_path: Path) -> None:
    toml = tmp_path / "gateway.toml"
    toml.write_text('[store]\npath = "from-toml.db"\n\n[provider.openai]\nmodel = "toml-model"\n\n[tools.limits]\nmemory_query_max = 3\n', encoding="utf-8")
    with pytest.raises(SettingsFileError, match=r"not valid JSON: .*\(a gateway TOML file is given as gateway_config=\)"):
        BackendServer(config_file=str(toml)).start()
    config = tmp_path / "app.json"
    with example_core.BackendServer(db_path=None, config_file=config, gateway_config=toml) as server:
        client = BackendClient(server)
        status, shown = client.get_status()["data"], client.get_settings()["data"]
    assert status["config"]["db_path"] == "from-toml.db" and (tmp_path / "from-toml.db").exists()
    assert status["config"]["gateway_config"] == str(toml)
    assert shown["api_config"]["model"] == "toml-model" and shown["tool_limits"]["memory_query_max"] == 3
    # The new settings file starts from what is in use: the TOML's model and limits (and no key).
    assert {k: read(config)[k] for k in ("api_key", "base_url", "model", "memory_query_max")} == {"api_key": "", "base_url": "", "model": "toml-model", "memory_query_max": 3}
