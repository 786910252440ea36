"""The `rota` command line. Each command group lives in its own module."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import typer

from rota.cli.common import emit, fail, load, run_cli
from rota.errors import RotaError

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Rota: a GPU job scheduler. Lower priority numbers run first.")
server_app = typer.Typer(help="Run or stop the daemon.", invoke_without_command=True)
app.add_typer(server_app, name="server")


@server_app.callback()
def server(ctx: typer.Context,
           simulate: str = typer.Option(None, help="simulated GPUs, e.g. 4x24G or 2x24G,1x48G"),
           detach: bool = typer.Option(False, "--detach", "-d", help="run in the background"),
           jobs_file: Path = typer.Option(None, help="watched jobs file (default: jobs.txt)"),
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
            return
        from rota.server.serve import run_foreground

        run_foreground(settings)


@server_app.command("stop")
def server_stop(timeout: float = typer.Option(30.0, help="seconds to wait for it to exit"),
                json_out: bool = typer.Option(False, "--json")) -> None:
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
                os.kill(int(pid_text), signal.SIGTERM)
        emit({"stopped": True, "pid": int(pid_text) if pid_text else None}, json_out,
             lambda d: f"rota daemon stopped (pid {d['pid']})")


def _register() -> None:
    """Attach the other command groups (kept in their own modules)."""
    import importlib

    for mod in ("rota.cli.jobs", "rota.cli.machine", "rota.cli.demo", "rota.cli.access",
                "rota.cli.ml"):
        try:
            importlib.import_module(mod).register(app)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


_register()

if __name__ == "__main__":  # pragma: no cover
    try:
        app()
    except RotaError as e:
        fail(str(e))
        sys.exit(2)
