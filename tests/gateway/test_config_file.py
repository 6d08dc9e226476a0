"""config/gateway.toml documents every option with exactly the built-in defaults."""

from __future__ import annotations

import tomllib
from pathlib import Path

import msgspec
import pytest

from gateway.app import load_registry, section_name
from kernel.settings import Settings, load_settings

CONFIG = Path(__file__).resolve().parents[2] / "config" / "gateway.toml"


def _without_transports(settings: Settings) -> dict:
    data = msgspec.to_builtins(settings)
    data.pop("transports")
    return data


def test_kernel_sections_equal_the_defaults() -> None:
    assert _without_transports(load_settings(CONFIG, env={})) == _without_transports(Settings())


def test_every_installed_transport_section_is_documented_with_its_defaults() -> None:
    sections = tomllib.loads(CONFIG.read_text()).get("transports", {})
    registry = load_registry(use_entry_points=False)
    assert registry.transports, "no transports installed"
    for name, cls in registry.transports.items():
        section = sections.get(section_name(name))
        assert section is not None, f"[transports.{section_name(name)}] is missing"
        defaults = msgspec.to_builtins(cls.Config())
        documented = {k: v for k, v in defaults.items() if v is not None}
        assert section == documented, f"[transports.{section_name(name)}] differs from {cls.__name__}.Config()"
        assert msgspec.convert(section, cls.Config) == cls.Config()


def test_the_http_ports_old_rate_key_still_loads_under_its_new_name(caplog: pytest.LogCaptureFixture) -> None:
    from transports.base import load_config
    from transports.http.server import HttpTransport
    from transports.openfang.server import OpenFangTransport

    with caplog.at_level("WARNING"):
        config = load_config(HttpTransport, {"rate_limit_per_minute": 42})
    assert config.requests_per_minute_per_ip == 42  # type: ignore[attr-defined]
    assert "rate_limit_per_minute is now called requests_per_minute_per_ip" in caplog.text
    both = load_config(HttpTransport, {"rate_limit_per_minute": 42, "requests_per_minute_per_ip": 7})
    assert both.requests_per_minute_per_ip == 7  # type: ignore[attr-defined]
    # A WebSocket transport's rate_limit_per_minute is its own (frames per socket): untouched.
    openfang = load_config(OpenFangTransport, {"rate_limit_per_minute": 42})
    assert (openfang.rate_limit_per_minute, openfang.requests_per_minute_per_ip) == (42, 600)  # type: ignore[attr-defined]
