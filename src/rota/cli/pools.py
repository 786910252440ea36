"""Pool commands: pools (where jobs can run, and how each engine is), render."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from rota.cli.common import Plain, client, emit, run_cli
from rota.cli.fmt import add_row
from rota.cli.job_refs import resolve

if TYPE_CHECKING:
    from rich.console import Group

    from rota.answers import ContainersAnswer, PoolAnswer, PoolsAnswer, RenderAnswer

#: the capabilities `rota pools` names, in its words
_CAN = (("fractional_gpus", "GPU fractions"), ("gpu_memory", "GPU memory"),
        ("multi_node", "multi-node"), ("arrays", "arrays"), ("dependencies", "dependencies"),
        ("conda", "conda"), ("images", "images"))


def _gpus(p: PoolAnswer) -> str:
    """``free of total``, as the engine reports them."""
    h = p["health"]
    if h["gpus_total"] is None:
        return "-"
    free = "?" if h["gpus_free"] is None else f"{h['gpus_free']:g}"
    return f"{free} of {h['gpus_total']:g}"


def _can(p: PoolAnswer) -> str:
    caps = p["capabilities"]
    if caps is None:
        return "Rota places jobs here"
    flags: dict[str, object] = dict(caps)
    return ", ".join(words for key, words in _CAN if flags[key]) or "whole GPUs only"


def pools_view(data: PoolsAnswer) -> Group:
    """One row per pool (80 columns: the engine's message wraps under its row)."""
    from rich.box import SIMPLE_HEAD
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    for col in ("pool", "engine", "up", "GPUs free", "max", "can"):
        t.add_column(col, no_wrap=col != "can", overflow="fold")
    for p in data["pools"]:
        name = p["name"] + (" (default)" if p["name"] == data["default"] else "")
        ok = p["health"]["reachable"]
        add_row(t, name, p["engine"], Text("yes" if ok else "no", style="green" if ok else "red"),
                   _gpus(p), str(p["max_in_flight"]), _can(p))
    from rota.cli.fmt import console_width, wrap_words

    notes = ["max: jobs handed to the engine at once",
             *(f"{p['name']}: {_last_line(p['health']['message'])}" for p in data["pools"]),
             *(_containers(c) for p in data["pools"] if (c := p.get("containers")))]
    return Group(t, *(Text(x) for n in notes for x in wrap_words(n, console_width())))


def _containers(c: ContainersAnswer) -> str:
    """Whether container jobs (--image) run on this machine, and with GPUs."""
    if not c["available"]:
        return f"containers (--image): not available here: {_last_line(c['message'])}"
    gpus = {"nvidia": "with GPUs", "simulated": "with simulated GPUs",
            "none": "without GPUs"}[c["gpus"]]
    return f"containers (--image): {gpus}: {c['message']}"


def _last_line(message: str) -> str:
    """An engine's error can run over lines (Slurm's say what failed last): the last."""
    lines = [x for x in message.splitlines() if x.strip()]
    return lines[-1] if lines else message


def pools(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Where jobs can run: this machine and the clusters rota.toml declares.

    Each with its engine's health (reachable, free GPUs as the engine reports them) and
    what it can do."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.pools(), json_out, pools_view)


def render(job: str = typer.Argument(..., metavar="JOB", help="a job's id or name"),
           pool: str = typer.Option(None, "--pool", help="default: the default pool"),
           json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Print what a pool's engine would be handed for a job.

    The sbatch options and script, the Ray job, or the Kubernetes manifests; secret
    values never appear."""
    with run_cli(json_out=json_out), client() as c:
        answer: RenderAnswer = c.render(resolve(c, job), pool)
        emit(answer, json_out, lambda a: Plain(a["text"].rstrip("\n")))


def register(app: typer.Typer) -> None:
    app.command()(pools)
    app.command()(render)
