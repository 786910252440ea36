"""Machine commands: gpus, pause, resume, drain, status."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import typer

from rota.cli.common import apply_each, client, emit, run_cli
from rota.cli.fmt import add_row

if TYPE_CHECKING:
    from typing import TypedDict

    from rich.console import Group
    from rich.text import Text

    from rota.answers import (
        GpuAnswer,
        GpuPausedAnswer,
        GpusAnswer,
        HealthAnswer,
        QueueAnswer,
        Reservation,
    )
    from rota.config import Settings

    class GpusShown(GpusAnswer):
        """`rota gpus`: the GPUs, and which of them are kept for a waiting job."""

        reservations: list[Reservation]

    class StatusShown(TypedDict):
        """`rota status`: the daemon's health and the queue's totals."""

        health: HealthAnswer
        queue: QueueAnswer


def _state(g: GpuAnswer) -> Text:
    """One word or two: `ok`, `paused`, `unhealthy`, `paused,unhealthy`."""
    from rich.text import Text

    words = [w for w, on in (("paused", g["paused"]), ("unhealthy", not g["healthy"])) if on]
    return Text(",".join(words) or "ok", style="bold red" if not g["healthy"] else
                "yellow" if g["paused"] else "green")


def gpus_view(data: GpusShown) -> Group:
    """The `rota gpus` table (fits 80 columns: short headers, values never cut) and a line
    saying where the readings come from."""
    from rich.box import SIMPLE_HEAD
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from rota.units import format_memory

    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    for col, right in (("gpu", True), ("used/total", False), ("outside", False),
                       ("rota", False), ("util", True), ("share", True), ("jobs", False),
                       ("kept for", False), ("state", False)):
        t.add_column(col, justify="right" if right else "left", no_wrap=col != "jobs",
                     overflow="fold")
    kept = {i: f"job {r['job']}" for r in data["reservations"] for i in r["gpus"]}
    for g in data["gpus"]:
        add_row(t, str(g["index"]),
                   f"{format_memory(g['memory_used'])}/{format_memory(g['memory_total'])}",
                   format_memory(g["memory_external"]) if g["memory_external"] else "-",
                   format_memory(g["reserved_memory"]) if g["reserved_memory"] else "-",
                   f"{g['utilization']:.0%}", f"{g['allocated']:g}",
                   ", ".join(map(str, g["jobs"])) or "-", kept.get(g["index"], "-"),
                   _state(g))
    names = Counter(g["name"] for g in data["gpus"])
    kinds = ", ".join(f"{n} x {name}" for name, n in names.items()) or "no GPUs"
    source = ("simulated GPUs, no real hardware" if data["devices"] == "simulated"
              else "read through NVML")
    from rota.cli.fmt import console_width, wrap_words

    note = (f"{kinds} ({source}). outside: memory held by processes Rota did not start; "
            "rota: memory kept for Rota's jobs")
    lines: list[Any] = [t, *(Text(x) for x in wrap_words(note, console_width()))]
    if data["draining"]:
        lines.append(Text("draining: nothing new starts (`rota drain --off` ends it)",
                          style="bold yellow"))
    return Group(*lines)


def gpus(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """The GPUs: memory (outside use included), utilisation, Rota's share, jobs, state."""
    with run_cli(json_out=json_out), client() as c:
        data: GpusShown = {**c.gpus(),
                           "reservations": c.queue_summary()["reservations"]}
        emit(data, json_out, gpus_view)


def _each_gpu(indices: list[int], paused: bool, json_out: bool) -> None:
    def done(r: GpuPausedAnswer) -> str:
        if paused:
            return f"paused GPU {r['index']}: running jobs stay, nothing new starts there"
        return f"resumed GPU {r['index']}"

    apply_each(indices, "index", json_out,
               lambda c, i: c.pause(i) if paused else c.resume(i), done)


def pause(indices: list[int] = typer.Argument(..., metavar="GPU..."),
          json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Pause GPUs: jobs on them keep running, no new job starts there."""
    _each_gpu(indices, True, json_out)


def resume(indices: list[int] = typer.Argument(..., metavar="GPU..."),
           json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Resume paused GPUs."""
    _each_gpu(indices, False, json_out)


def drain(off: bool = typer.Option(False, "--off", help="stop draining"),
          json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Drain the machine: running jobs finish, nothing new starts (--off ends it)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.drain(on=not off), json_out,
             lambda d: "draining: running jobs finish, nothing new starts" if d["draining"]
             else "not draining: jobs start again")


def _status_text(d: StatusShown) -> Group:
    from rich.console import Group
    from rich.text import Text

    h, q = d["health"], d["queue"]
    counts = q.get("counts") or {}
    order = ["pending", "held", "starting", "running", "preempted", "completed", "failed",
             "timeout", "cancelled"]
    shown = ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s)) or "no jobs yet"
    lines: list[Any] = [
        Text.assemble(("rota daemon ", "bold"), f"{h['version']} (pid {h['pid']}), "
                      f"{h['gpus']} {h['devices']} GPU{'s' if h['gpus'] != 1 else ''}"),
        f"jobs: {shown}",
    ]
    if q["reservations"]:
        kept = "; ".join(f"GPUs {','.join(map(str, r['gpus']))} kept for job {r['job']}"
                         for r in q["reservations"])
        lines.append(f"reservations: {kept}")
    if h["draining"]:
        lines.append(Text("draining: nothing new starts", style="bold yellow"))
    return Group(*lines)


def status(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Is the daemon up, and how many jobs are in each state."""
    with run_cli(json_out=json_out), client() as c:
        shown: StatusShown = {"health": c.health(), "queue": c.queue_summary()}
        emit(shown, json_out, _status_text)


def say_if_simulated(settings: Settings) -> None:
    """After `rota server --detach` with no --simulate: a daemon that found no GPU
    simulates some; say so where the user looks, not only in the daemon's log."""
    from rota.cli.common import err_console

    with client() as c:
        health = c.health()
    if health["devices"] != "simulated":
        return
    n = health["gpus"]
    err_console.print(f"note: no NVIDIA GPU found, so the daemon simulates {n} GPU"
                      f"{'s' if n != 1 else ''} (no real hardware; `rota gpus` shows them, "
                      f"{settings.home / 'daemon.log'} says why; `rota server --simulate "
                      "4x24G` chooses them)", markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Attach the machine commands to the `rota` app."""
    app.command()(gpus)
    app.command()(pause)
    app.command()(resume)
    app.command()(drain)
    app.command()(status)
    from rota.cli import service

    service.register(app)
