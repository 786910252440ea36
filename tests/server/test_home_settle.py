"""A root daemon's home, once it holds the lock: what an earlier daemon left loses group
and other rights, the folders other accounts pass through keep theirs, sockets are left
as they are (rota.server.home_lock.settle_home; the multi-user side is in
tests/integration/test_multi_user_home.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from rota.server.home_lock import prepare_home, settle_home


def _mode(path: Path) -> int:
    return path.lstat().st_mode & 0o7777


def test_settling_a_root_daemons_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    prepare_home(home)
    modes = {"rota.db": 0o644, "secrets.key": 0o640, "jobs.txt": 0o666}
    for name, mode in modes.items():
        (home / name).write_text("x")
        os.chmod(home / name, mode)
    folders = {"logs": 0o755, "dataset-cache": 0o711, "status": 0o700, "users": 0o755,
               "storage": 0o755, "workspaces": 0o751}
    for name, mode in folders.items():
        (home / name).mkdir()
        os.chmod(home / name, mode)
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(home / "rota.sock.moved"))
        os.chmod(home / "rota.sock.moved", 0o666)
        (home / "link").symlink_to(home / "rota.db")
        settle_home(home, everyone=True)
        assert _mode(home) == 0o711
        assert {n: _mode(home / n) for n in modes} == dict.fromkeys(modes, 0o600)
        assert {n: _mode(home / n) for n in folders} == {
            "logs": 0o711, "dataset-cache": 0o711, "status": 0o700, "users": 0o755,
            "storage": 0o700, "workspaces": 0o711}
        assert _mode(home / "rota.sock.moved") == 0o666


def test_a_refused_start_changes_nothing_before_the_lock(tmp_path: Path) -> None:
    """prepare_home checks an existing home and leaves it as it is."""
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o711)
    (home / "dataset-cache").mkdir()
    os.chmod(home / "dataset-cache", 0o711)
    prepare_home(home, everyone=False)
    assert _mode(home) == 0o711 and _mode(home / "dataset-cache") == 0o711
