"""Spec builders and the test daemon's handle, shared by the SDK tests."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import rota
from rota_testing import DaemonProcess

PY = sys.executable


def held(name: str, **extra: Any) -> dict[str, Any]:
    """A CPU-only job that waits until released: cheap to make by the dozen."""
    return {"command": ["true"], "gpus": 0, "name": name, "hold": True, **extra}


def printer(*lines: str, pause: float = 0.0) -> list[str]:
    """argv of a job that prints each line (unbuffered), pausing between them."""
    script = ("import sys, time\n"
              f"for i, line in enumerate({list(lines)!r}):\n"
              f"    if i: time.sleep({pause})\n"
              "    print(line, flush=True)\n")
    return [PY, "-u", "-c", script]


@dataclass
class Sdk:
    """The test daemon: its socket, its TCP URL, and `rota ...` run against it."""

    daemon: DaemonProcess
    url: str

    def cli(self, *args: str) -> dict[str, Any]:
        r = subprocess.run([PY, "-m", "rota", *args, "--json"], env=self.daemon.env,
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        out: dict[str, Any] = json.loads(r.stdout)
        return out

    def client(self, **kw: Any) -> rota.Client:
        return rota.Client(self.daemon.socket, **kw)

    def token_for(self, user: str, *, admin: bool = False) -> str:
        """A new user with a token of their own (for the TCP API)."""
        self.cli("user", "add", user, *(["--admin"] if admin else []))
        return str(self.cli("token", "create", "--user", user)["token"])
