"""`rota server install --user`: a systemd user unit for this install and ROTA_HOME."""

from __future__ import annotations

import configparser
import os
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


def test_print_only_writes_nothing_and_plain_install_asks_which(
        tmp_path: Path, runner_for: Any) -> None:
    rota = runner_for({"ROTA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")})
    r = rota("server", "install", "--print")
    assert r.exit_code == 0 and r.stdout.startswith("[Unit]")
    assert not (tmp_path / "c").exists()
    r = rota("server", "install")
    assert r.exit_code == 2 and "--user" in r.stderr and "--system" in r.stderr


@pytest.mark.parametrize(("python", "expected"), [
    ("/opt/my env/bin/python", '"/opt/my env/bin/python" -m rota server'),
    ("/opt/100%/$HOME/python", "/opt/100%%/$$HOME/python -m rota server"),
])
def test_exec_start_is_quoted_for_systemd(python: str, expected: str) -> None:
    assert _parse(unit_text(python, Path("/h")))["Service"]["ExecStart"] == expected


def test_a_system_unit_runs_one_daemon_for_everyone_from_the_system_home(
        tmp_path: Path, runner_for: Any) -> None:
    units = tmp_path / "system"
    units.mkdir()
    rota = runner_for({"ROTA_HOME": str(tmp_path / "mine"), "ROTA_SYSTEMD_DIR": str(units)})
    r = rota("server", "install", "--user", "--system")
    assert r.exit_code == 2 and "say which unit" in r.stderr
    r = rota("server", "install", "--system")
    if os.geteuid() != 0:
        assert r.exit_code == 2 and "sudo rota server install --system" in r.stderr
        return
    assert r.exit_code == 0, r.output
    assert "systemctl daemon-reload && systemctl enable --now rota" in r.stdout
    parsed = _parse((units / "rota.service").read_text())
    assert parsed["Service"]["Environment"] == "ROTA_HOME=/var/lib/rota"  # not the caller's
    assert parsed["Service"]["UMask"] == "0077"
    assert parsed["Install"]["WantedBy"] == "multi-user.target"


def test_a_users_cli_reaches_the_system_daemon_when_it_runs_none_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rota import home
    from rota.daemon_socket import socket_path

    system = tmp_path / "system"
    system.mkdir()
    monkeypatch.setattr(home, "SYSTEM_HOME", str(system))
    monkeypatch.delenv("ROTA_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    own = str(tmp_path / "data" / "rota" / "rota.sock")
    assert socket_path() == own  # no daemon anywhere: one's own, to start
    (system / "rota.sock").touch()
    assert socket_path() == str(system / "rota.sock")
    Path(own).parent.mkdir(parents=True)
    Path(own).touch()
    assert socket_path() == own  # one's own daemon comes first
