"""`rota server install --user`: a systemd user unit for this install and ROTA_HOME."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rota.cli.service import unit_text


def _parse(text: str) -> configparser.ConfigParser:
    p = configparser.ConfigParser(interpolation=None, strict=True)
    p.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    p.read_string(text)
    return p


def test_install_writes_a_valid_unit_and_says_how_to_enable_it(
        tmp_path: Path, runner_for: Any) -> None:
    home, config = tmp_path / "home dir", tmp_path / "cfg"
    rota = runner_for({"ROTA_HOME": str(home), "XDG_CONFIG_HOME": str(config)})
    r = rota("server", "install", "--user")
    assert r.exit_code == 0, r.output
    unit = config / "systemd" / "user" / "rota.service"
    assert f"wrote {unit}" in r.stdout
    assert "systemctl --user enable --now rota" in r.stdout
    parsed = _parse(unit.read_text())
    service = parsed["Service"]
    assert service["ExecStart"] == f"{sys.executable} -m rota server"
    assert service["Environment"] == f'"ROTA_HOME={home}"'  # quoted: the path has a space
    assert service["KillMode"] == "process"
    assert parsed["Install"]["WantedBy"] == "default.target"
    if shutil.which("systemd-analyze"):
        done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert "Unknown" not in done.stderr and "ignoring" not in done.stderr, done.stderr


def test_print_only_writes_nothing_and_plain_install_asks_for_user(
        tmp_path: Path, runner_for: Any) -> None:
    rota = runner_for({"ROTA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")})
    r = rota("server", "install", "--print")
    assert r.exit_code == 0 and r.stdout.startswith("[Unit]")
    assert not (tmp_path / "c").exists()
    r = rota("server", "install")
    assert r.exit_code == 2 and "--user" in r.stderr


@pytest.mark.parametrize(("python", "expected"), [
    ("/opt/my env/bin/python", '"/opt/my env/bin/python" -m rota server'),
    ("/opt/100%/$HOME/python", "/opt/100%%/$$HOME/python -m rota server"),
])
def test_exec_start_is_quoted_for_systemd(python: str, expected: str) -> None:
    assert _parse(unit_text(python, Path("/h")))["Service"]["ExecStart"] == expected
