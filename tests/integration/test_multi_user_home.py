"""A root daemon's home after a refused second start and after a restart: every local
account still reaches the socket and reads its cached datasets (issue 36).

Run as root with real Unix accounts (see test_multi_user.py, whose helpers these are).
Accounts of their own, so that these tests and test_multi_user.py may run side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_multi_user import _dataset_folders, _log, _wait_end, rota_as, rota_json

from rota_testing import DaemonProcess, kill_job_processes, unix_accounts

HOMER = "rtu-homer"
NOTES = "homer's notes, read by each of his jobs\n"


@pytest.fixture(scope="module")
def account() -> Iterator[int]:
    with unix_accounts(HOMER) as uids:
        yield uids[HOMER]


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder other accounts can pass through (pytest's tmp_path is root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="rota-muh-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    kill_job_processes(path / "home")
    shutil.rmtree(path, ignore_errors=True)


def _reads_his_dataset(d: DaemonProcess) -> None:
    """Homer submits through the socket, and his job reads the cached version."""
    r = rota_as(HOMER, d.home, "submit", "--json", "--gpus", "0", "--dataset", "notes",
                "--", "sh", "-c", 'cat "$ROTA_DATASET_NOTES/notes.txt"')
    assert r.returncode == 0, r.stdout + r.stderr
    job = int(json.loads(r.stdout)["jobs"][0]["id"])
    end = _wait_end(d, job)
    out = _log(d, job)
    assert end["state"] == "completed" and NOTES in out, (end, out)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _refused_second_start(d: DaemonProcess) -> None:
    """A second `rota server` on the same home: refused by the lock, naming the holder."""
    assert d.proc is not None
    second = subprocess.run([sys.executable, "-m", "rota", "server", "--simulate", "1x24G"],
                            env=d.env, capture_output=True, text=True, timeout=60,
                            check=False)
    said = second.stdout + second.stderr
    assert second.returncode != 0, said
    assert f"a Rota daemon (pid {d.proc.pid}) already holds {d.home / 'rota.lock'}" in said


def test_a_refused_second_start_and_a_restart_leave_an_account_its_socket_and_datasets(
        account: int, base: Path) -> None:
    home = base / "home"
    d = DaemonProcess(home, extra_env={"ROTA_SHARED_ACCOUNT": "false"}).start()
    try:
        folder = _dataset_folders(base / "data", HOMER, notes={"notes.txt": NOTES})["notes"]
        rota_json(HOMER, home, "dataset", "add", "notes", str(folder))
        _reads_his_dataset(d)
        passable = {name: _mode(home / name) for name in ("dataset-cache", "logs", "status")}
        assert passable["dataset-cache"] == 0o711 and passable["status"] == 0o711, passable

        # refused with the socket in place, then with the socket moved away: nothing changed
        _refused_second_start(d)
        assert _mode(d.socket) == 0o666
        moved = home / "rota.sock.moved"
        os.rename(d.socket, moved)
        _refused_second_start(d)
        assert _mode(moved) == 0o666
        os.rename(moved, d.socket)
        assert {name: _mode(home / name) for name in passable} == passable
        _reads_his_dataset(d)

        # a restart: what other accounts pass through keeps its mode
        d.stop()
        d.start()
        assert {name: _mode(home / name) for name in passable} == passable
        assert _mode(d.socket) == 0o666
        for private in ("rota.db", "secrets.key"):
            if (home / private).exists():
                assert _mode(home / private) & 0o077 == 0, private
        _reads_his_dataset(d)
    finally:
        d.stop()
