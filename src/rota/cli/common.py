"""What every command shares: settings, the client, --json output, error handling."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from rota.client import RawClient as Client
from rota.config import Settings, load_settings
from rota.errors import DaemonUnavailable, InvalidSpec, RotaError

console = Console()
err_console = Console(stderr=True)


def load(**overrides: Any) -> Settings:
    return load_settings(**overrides)


def client() -> Client:
    """The daemon at $ROTA_URL (with $ROTA_TOKEN) when set, else this ROTA_HOME's socket."""
    if os.environ.get("ROTA_URL"):
        return Client()
    return Client(load().socket_path)


def emit(data: Any, json_out: bool, human: Callable[[Any], Any]) -> None:
    """Print JSON for programs, or the human rendering (a string or a Rich renderable)."""
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        out = human(data)
        if out is not None:
            console.print(out, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    err_console.print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False,
                      soft_wrap=True)


def fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


@contextmanager
def run_cli(*, json_out: bool) -> Iterator[None]:
    """Turn Rota's errors into a clear message and an exit code (2 bad input, 3 no daemon)."""
    try:
        yield
    except InvalidSpec as e:
        _report(e, json_out, 2)
    except DaemonUnavailable as e:
        _report(e, json_out, 3)
    except RotaError as e:
        _report(e, json_out, 1)


def _report(e: RotaError, json_out: bool, code: int) -> None:
    if json_out:
        sys.stdout.write(json.dumps({"error": type(e).__name__, "message": str(e),
                                     "field": getattr(e, "field", None)}) + "\n")
    else:
        fail(str(e))
    raise typer.Exit(code)


def apply_each(targets: list[int], key: str, json_out: bool,
               act: Callable[[Client, int], dict[str, Any]],
               done: Callable[[dict[str, Any]], str]) -> None:
    """Apply one action to several jobs or GPUs; report each; exit 1 if any of them failed.

    ``key`` names the target in an error entry ("id" for jobs, "index" for GPUs).
    """
    from rich.text import Text

    with run_cli(json_out=json_out):
        results: list[dict[str, Any]] = []
        failed = False
        with client() as c:
            for t in targets:
                try:
                    results.append(act(c, t))
                except DaemonUnavailable:
                    raise
                except RotaError as e:
                    failed = True
                    results.append({key: t, "error": type(e).__name__, "message": str(e)})
        if json_out:
            emit(results, True, str)
        else:
            for r in results:
                if "error" in r:
                    fail(r["message"])
                else:
                    console.print(Text(done(r)))
        if failed:
            raise typer.Exit(1)
