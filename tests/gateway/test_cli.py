"""The ``gateway`` command line, run as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.subprocess_gateway import ROOT, gateway_env


def run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=gateway_env(tmp_path / "g.db", **env),
    )


def test_version() -> None:
    out = subprocess.run([sys.executable, "-m", "gateway", "--version"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("gateway ")


def test_config_masks_secrets_and_reads_files(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('[provider.openai]\nmodel = "my-model"\n')
    out = run(["config", "--config", str(cfg)], tmp_path, OPENAI_API_KEY="sk-live-abcdefgh9876")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["provider"]["openai"] == {**data["provider"]["openai"], "api_key": "sk-…9876", "model": "my-model"}
    assert "abcdefgh" not in out.stdout + out.stderr


def test_transports_lists_the_built_ins(tmp_path: Path) -> None:
    out = run(["transports"], tmp_path)
    assert out.returncode == 0
    names = {line.split("\t")[0] for line in out.stdout.splitlines() if line and not line.startswith("\t")}
    assert "stdio" in names


def test_unknown_transport_and_bad_config_exit_2(tmp_path: Path) -> None:
    out = run(["serve", "--transport", "carrier-pigeon"], tmp_path)
    assert out.returncode == 2 and "unknown transport 'carrier-pigeon'" in out.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[session]\ninbox_size = 'lots'\n")
    out = run(["serve", "--transport", "stdio", "--config", str(bad)], tmp_path)
    assert out.returncode == 2 and "invalid settings" in out.stderr
    out = run(["serve", "--transport", "stdio", "--set", "stdio.max_line_bytes=\"huge\""], tmp_path)
    assert out.returncode == 2 and "[transports.stdio]" in out.stderr
    assert out.stdout == ""
