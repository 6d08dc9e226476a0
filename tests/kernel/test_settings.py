"""Settings: TOML, environment overrides, masking."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel import KernelError
from kernel.settings import Settings, load_settings, mask_secret, mask_secrets


def test_defaults_env_and_file(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text('[provider.openai]\nmodel = "gpt-4o"\n[[agents]]\nname = "Coder"\nmax_turns = 3\n')
    settings = load_settings(path, env={"OPENAI_API_KEY": "sk-test-123456789", "GATEWAY_DB": "/tmp/x.db"})
    assert settings.provider.openai.model == "gpt-4o" and settings.provider.openai.api_key == "sk-test-123456789"
    assert settings.store.path == "/tmp/x.db"
    assert [a.name for a in settings.agents] == ["Coder"] and settings.agents[0].max_turns == 3
    assert load_settings(env={}) == Settings()


@pytest.mark.parametrize(
    ("text", "message"),
    [("[nope]\nx=1\n", "invalid settings"), ("[session\n", "config file"), ("[[agents]]\nname='a'\n[[agents]]\nname='a'\n", "unique")],
)
def test_bad_files_are_reported(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(KernelError, match=message):
        load_settings(path, env={})


def test_missing_file() -> None:
    with pytest.raises(KernelError, match="not found"):
        load_settings("/nonexistent/gateway.toml", env={})


def test_agent_ids_are_stable() -> None:
    a, b = Settings().agents[0], Settings().agents[0]
    assert a.agent_id() == b.agent_id() and len(a.agent_id()) == 36


def test_masking() -> None:
    assert mask_secret("sk-abcdef123456") == "sk-…3456"
    assert mask_secret("short") == "…"
    assert mask_secret(None) is None
    assert mask_secrets({"a": {"api_key": "sk-0123456789", "token": "tok-abcdefghi"}, "b": [{"password": "hunter2hunter2"}]}) == {
        "a": {"api_key": "sk-…6789", "token": "…fghi"},
        "b": [{"password": "…ter2"}],
    }
