"""`rota server --detach --listen ADDR` says where the dashboard is, and it is there."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_detached_daemon_prints_the_dashboards_address(tmp_path: Path) -> None:
    env = {**os.environ, "ROTA_HOME": str(tmp_path / "home")}
    port = _free_port()

    def rota(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rota", *args], env=env, text=True,
                              capture_output=True, timeout=120, check=False)

    r = rota("server", "--detach", "--simulate", "1x24G", "--listen", f"127.0.0.1:{port}")
    try:
        assert r.returncode == 0, r.stderr
        url = f"http://127.0.0.1:{port}/"
        assert f"dashboard and API on {url} " in r.stdout, r.stdout
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200 and "<html" in page.read().decode().lower()
    finally:
        stop = rota("server", "stop")
        assert stop.returncode == 0, stop.stderr
    # without --listen: the socket only, and no address to give
    r = rota("server", "--detach", "--simulate", "1x24G")
    try:
        assert r.returncode == 0 and "dashboard" not in r.stdout, r.stdout
    finally:
        rota("server", "stop")
