"""The `rota` command line. Each command group lives in its own module.

``app`` is the `rota` command: called with no arguments (the console script), it runs a
hot command through the fast lane (:mod:`rota.cli.fast`) when it can, prints saved help
(:mod:`rota.cli.help_cache`), and runs everything else through the Typer app, built on
first need. Everywhere else (``typer.testing``, Typer's own functions) it stands for that
Typer app.
"""

from __future__ import annotations

import os
import sys
import time

from rota.cli import lazy_typer as typer
from rota.cli.common import emit, load, run_cli

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    import typer as real_typer

#: the modules whose ``register(app)`` attaches their commands
COMMAND_MODULES = ("rota.cli.jobs", "rota.cli.machine", "rota.cli.demo", "rota.cli.access",
                   "rota.cli.ml", "rota.cli.pools", "rota.cli.eval", "rota.cli.sim",
                   "rota.cli.shares", "rota.cli.usage", "rota.cli.quota", "rota.cli.alerts",
                   "rota.cli.pipeline", "rota.cli.artifacts",
                   "rota.cli.datasets")
HELP = "Rota: a GPU job scheduler. Lower priority numbers run first."


def server(ctx: typer.Context,
           simulate: str = typer.Option(None, help="simulated GPUs, e.g. 4x24G or 2x24G,1x48G"),
           detach: bool = typer.Option(False, "--detach", "-d", help="run in the background"),
           jobs_file: str = typer.Option(None, metavar="PATH",
                                         help="watched jobs file (default: jobs.txt)"),
           database_url: str = typer.Option(None, help="PostgreSQL URL (default: SQLite)"),
           listen: str = typer.Option(None, help="also serve the API and the dashboard on "
                                                 "TCP, e.g. 127.0.0.1:8787 (tokens required)"),
           api_workers: int = typer.Option(None, min=0, max=64,
                                           help="processes serving --listen, answering job "
                                                "reads from the store (default 0: the daemon "
                                                "itself)"),
           ) -> None:
    """Run the daemon in the foreground (or --detach it)."""
    if ctx.invoked_subcommand is not None:
        return
    with run_cli(json_out=False):
        settings = load(simulate=simulate, jobs_file=jobs_file, database_url=database_url,
                        listen=listen, api_workers=api_workers)
        if detach:
            from rota.server.serve import start_detached

            argv = ["server"]
            if simulate:
                argv += ["--simulate", simulate]
            if jobs_file:
                argv += ["--jobs-file", str(jobs_file)]
            if database_url:
                argv += ["--database-url", database_url]
            if listen:
                argv += ["--listen", listen]
            if api_workers is not None:
                argv += ["--api-workers", str(api_workers)]
            pid = start_detached(settings, argv)
            typer.echo(f"rota daemon started (pid {pid}); socket {settings.socket_path}")
            url = settings.reach_url()
            if url:  # the API over TCP, and the dashboard, which asks for a token
                typer.echo(f"dashboard and API on {url}/ (a token: rota token create "
                           "--user NAME)")
            if not simulate:
                from rota.cli.machine import say_if_simulated

                say_if_simulated(settings)
            return
        from rota.server.serve import run_foreground

        run_foreground(settings)


def server_stop(timeout: float = typer.Option(30.0, help="seconds to wait for it to exit"),
                json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Stop the daemon gracefully. Running jobs keep running and are re-adopted later."""
    with run_cli(json_out=json_out):
        settings = load()
        pid_text = settings.pid_path.read_text().strip() if settings.pid_path.exists() else ""
        from rota.client import RawClient as Client

        with Client(settings.socket_path) as c:
            c.shutdown()
        deadline = time.monotonic() + timeout
        while pid_text and time.monotonic() < deadline:
            try:
                os.kill(int(pid_text), 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            if pid_text:
                import signal

                os.kill(int(pid_text), signal.SIGTERM)
        emit({"stopped": True, "pid": int(pid_text) if pid_text else None}, json_out,
             lambda d: f"rota daemon stopped (pid {d['pid']})")


def _version(value: bool) -> None:
    if value:
        from rota import __version__

        typer.echo(f"rota {__version__}")
        raise typer.Exit()


def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print Rota's version and exit")) -> None:
    """Rota: a GPU job scheduler. Lower priority numbers run first."""


def build() -> real_typer.Typer:
    """The whole Typer app: every command group attached, options made Typer's own."""
    import importlib

    import typer as real

    app = real.Typer(no_args_is_help=True, add_completion=True, help=HELP)
    app.callback()(_root)
    server_app = real.Typer(help="Run or stop the daemon.", invoke_without_command=True)
    server_app.callback()(server)
    server_app.command("stop")(server_stop)
    app.add_typer(server_app, name="server")
    for mod in COMMAND_MODULES:
        try:
            importlib.import_module(mod).register(app)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
    typer.realize_app(app)
    return app


class Rota:
    """The `rota` command (see the module's docstring)."""

    def __init__(self) -> None:
        self._typer: real_typer.Typer | None = None

    @property
    def typer(self) -> real_typer.Typer:
        if self._typer is None:
            try:
                self._typer = build()
            except AttributeError as e:  # not "no such attribute" of this object
                raise RuntimeError(f"building the rota command failed: {e!r}") from e
        return self._typer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            from rota.cli import fast

            argv = sys.argv[1:]
            if fast.run(argv):
                return 0
            from rota.cli import help_cache
            key = help_cache.key_for(argv, sys.argv[0])
            if key is not None:
                if help_cache.show(key):
                    return 0
                return help_cache.render(key, self.typer, lambda: self.is_command(argv[:-1]))
        return self.typer(*args, **kwargs)

    def is_command(self, path: list[str]) -> bool:
        """Whether ``path`` names a command or group (``[]``: the `rota` command itself)."""
        from typer.main import get_command

        cmd: Any = get_command(self.typer)
        for word in path:
            cmd = getattr(cmd, "commands", {}).get(word)
            if cmd is None:
                return False
        return True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.typer, name)


app: Any = Rota()

if __name__ == "__main__":  # pragma: no cover
    app()
