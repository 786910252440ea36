"""One daemon per home: the lock on ROTA_HOME, and the home's own rights."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from rota_testing import DaemonProcess, wait_until


def _server(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rota", "server", "--simulate", "1x24G", *args],
                            env={**os.environ, "ROTA_HOME": str(home)}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _answers(d: DaemonProcess) -> bool:
    try:
        with d.client() as c:
            c.health()
        return True
    except Exception:
        return False


def _race(home: Path, daemon_factory: type[DaemonProcess]) -> None:
    """Two starts at once: one serves, the other is refused naming the holder's pid."""
    a, b = _server(home), _server(home)
    d = daemon_factory(home=home)  # for its client and the clean-up of what it starts
    try:
        wait_until(lambda: a.poll() is not None or b.poll() is not None, timeout=60,
                   what="one of two starts refused")
        proc, other = (a, b) if a.poll() is not None else (b, a)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode != 0
        wait_until(lambda: _answers(d), timeout=60, what="the other serving")
        assert other.poll() is None
        assert f"pid {other.pid}" in out and "rota.lock" in out, out
        assert "already exists" not in out
        assert (home / "rota.lock").read_text().strip() == str(other.pid)
    finally:
        for p in (a, b):
            p.terminate()
            p.wait(15)


def test_two_starts_at_once_on_an_existing_home(tmp_path, daemon_factory):
    home = tmp_path / "home"
    daemon_factory(home=home).start().stop()  # migrated, settings stored
    _race(home, daemon_factory)


def test_two_starts_at_once_on_a_fresh_home(tmp_path, daemon_factory):
    _race(tmp_path / "fresh", daemon_factory)


def test_a_removed_socket_lets_no_second_daemon_start(daemon_factory):
    d = daemon_factory().start()
    d.socket.unlink()
    second = _server(d.home)
    out, _ = second.communicate(timeout=60)
    assert second.returncode != 0 and f"pid {d.proc.pid}" in out, out
    r = d.cli("server", "--detach", "--simulate", "1x24G")
    assert r.returncode != 0 and f"pid {d.proc.pid}" in r.stderr, r.stderr + r.stdout
    assert d.proc.poll() is None


def test_a_home_others_can_write_is_refused_not_changed(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # as /tmp
    p = _server(shared)
    out, _ = p.communicate(timeout=60)
    assert p.returncode != 0 and "can be written by others" in out and str(shared) in out, out
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert not (shared / "rota.db").exists()


def test_a_home_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)  # nobody (the tests run as root)
    p = _server(theirs)
    out, _ = p.communicate(timeout=60)
    assert p.returncode != 0 and "belongs to uid 65534" in out, out


def test_a_home_rota_creates_is_private(tmp_path, daemon_factory):
    home = tmp_path / "new" / "home"
    d = daemon_factory(home=home)
    p = _server(home)
    try:
        wait_until(lambda: (home / "rota.pid").exists(), timeout=60, what="the daemon's pid")
        # a root daemon's is traversable, for its socket (docs/security.md)
        assert stat.S_IMODE(home.stat().st_mode) == (0o711 if os.geteuid() == 0 else 0o700)
        assert all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in home.iterdir()
                   if p.name != "rota.sock")
    finally:
        p.terminate()
        p.wait(15)
        d.stop()
