"""`rota server install --user|--system`: a systemd unit that keeps the daemon running.

`--user`: a user unit, the daemon runs as you and serves you alone. `--system`: a system
unit run as root with the system home (rota.home.SYSTEM_HOME): one daemon for everyone on
the machine, whose socket every local account reaches (the kernel tells the daemon who
connects) and whose jobs run as their owners' accounts (docs/security.md).

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


def unit_text(python: str, home: Path, *, system: bool = False) -> str:
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
        *(["# jobs run as their owners' accounts; the daemon's home is its own",
            "UMask=0077"] if system else []),
        "",
        "[Install]",
        f"WantedBy={'multi-user.target' if system else 'default.target'}",
        "",
    ])


def unit_path(*, system: bool = False) -> Path:
    if system:
        return Path(os.environ.get("ROTA_SYSTEMD_DIR", "/etc/systemd/system")) / UNIT_NAME
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user" / UNIT_NAME


def install(user: bool = typer.Option(False, "--user",
                                      help="a systemd user unit (needs no root)"),
            system: bool = typer.Option(False, "--system",
                                        help="a system unit run as root, for everyone on "
                                             "this machine (needs root)"),
            print_only: bool = typer.Option(False, "--print",
                                            help="only print the unit, write nothing"),
            json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Write a systemd unit that starts the daemon (at login, or at boot with --system) and
    restarts it."""
    with run_cli(json_out=json_out):
        if (user and system) or not (user or system or print_only):
            raise InvalidSpec("say which unit: `rota server install --user` (the daemon runs "
                              "as you) or `--system` (as root, for every local user); "
                              "--print shows it", field="user")
        if system and not print_only and os.geteuid() != 0:
            raise InvalidSpec("a system unit runs the daemon as root: run `sudo rota server "
                              "install --system` (or --print to see it)", field="system")
        from rota.home import SYSTEM_HOME

        text = unit_text(sys.executable, Path(SYSTEM_HOME) if system else load().home,
                         system=system)
        path = unit_path(system=system)
        enable = ("systemctl daemon-reload && systemctl enable --now rota" if system else
                  "systemctl --user daemon-reload && systemctl --user enable --now rota")
        if print_only:
            emit({"path": str(path), "unit": text, "written": False, "enable": enable},
                 json_out, lambda d: d["unit"].rstrip("\n"))
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        emit({"path": str(path), "unit": text, "written": True, "enable": enable}, json_out,
             lambda d: f"wrote {d['path']}\nstart it now and at every "
                       f"{'boot' if system else 'login'} with:\n  {d['enable']}"
                       + ("" if system else "\n(on a server with no login session, also: "
                          "loginctl enable-linger $USER)"))


def register(app: typer.Typer) -> None:
    """`install` under the `rota server` group (made in cli/main.py)."""
    for group in app.registered_groups:
        if group.name == "server" and group.typer_instance is not None:
            group.typer_instance.command("install")(install)
