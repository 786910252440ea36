"""`rota server install --user`: a systemd user unit that keeps the daemon running.

The unit runs this very install (the Python that runs this command, `-m rota server`)
with this ROTA_HOME. `KillMode=process`: stopping the service stops the daemon only; the
local runner and the jobs it started go on and are re-adopted when the daemon comes back,
as after `rota server stop`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from rota.cli.common import emit, load, run_cli
from rota.errors import InvalidSpec

UNIT_NAME = "rota.service"


def _quote(word: str) -> str:
    """A word as systemd reads it back: `%` and `$` doubled, quoted when it has spaces,
    quotes or backslashes."""
    word = word.replace("%", "%%").replace("$", "$$")
    if any(c in word for c in " \t\"'\\"):
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def unit_text(python: str, home: Path) -> str:
    """The unit file's text."""
    exec_start = " ".join(_quote(w) for w in (python, "-m", "rota", "server"))
    return "\n".join([
        "[Unit]",
        "Description=Rota GPU job scheduler (daemon)",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"Environment={_quote(f'ROTA_HOME={home}')}",
        f"ExecStart={exec_start}",
        "Restart=on-failure",
        "RestartSec=5",
        "# stop the daemon only: running jobs go on and are re-adopted when it is back",
        "KillMode=process",
        "TimeoutStopSec=60",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ])


def unit_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user" / UNIT_NAME


def install(user: bool = typer.Option(False, "--user",
                                      help="a systemd user unit (needs no root)"),
            print_only: bool = typer.Option(False, "--print",
                                            help="only print the unit, write nothing"),
            json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Write a systemd user unit that starts the daemon at login and restarts it."""
    with run_cli(json_out=json_out):
        if not user and not print_only:
            raise InvalidSpec("Rota installs a systemd *user* unit: run `rota server install "
                              "--user` (or --print to see it)", field="user")
        text = unit_text(sys.executable, load().home)
        path = unit_path()
        enable = "systemctl --user daemon-reload && systemctl --user enable --now rota"
        if print_only:
            emit({"path": str(path), "unit": text, "written": False, "enable": enable},
                 json_out, lambda d: d["unit"].rstrip("\n"))
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        emit({"path": str(path), "unit": text, "written": True, "enable": enable}, json_out,
             lambda d: f"wrote {d['path']}\nstart it now and at every login with:\n  "
                       f"{d['enable']}\n(on a server with no login session, also: "
                       "loginctl enable-linger $USER)")


def register(app: typer.Typer) -> None:
    """`install` under the `rota server` group (made in cli/main.py)."""
    for group in app.registered_groups:
        if group.name == "server" and group.typer_instance is not None:
            group.typer_instance.command("install")(install)
