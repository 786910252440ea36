"""Machine commands: gpus, pause, resume, drain, status."""

from __future__ import annotations

from collections import Counter
from typing import Any

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from rota.cli.common import apply_each, client, emit, run_cli
from rota.units import format_memory


def _yes(flag: bool, good: bool) -> Text:
    return Text("yes" if flag else "no", style="green" if flag == good else "bold red")


def gpus_view(data: dict[str, Any]) -> Group:
    """The `rota gpus` table and a line saying where the readings come from."""
    t = Table(header_style="bold")
    for col, kw in (("gpu", {"justify": "right"}), ("memory", {}),
                    ("outside", {}), ("rota mem", {}), ("util", {"justify": "right"}),
                    ("allocated", {"justify": "right"}),
                    ("jobs", {}), ("kept for", {}), ("paused", {}), ("healthy", {})):
        t.add_column(col, **kw)  # type: ignore[arg-type]
    kept = {i: f"job {r['job']}" for r in data.get("reservations", []) for i in r["gpus"]}
    for g in data["gpus"]:
        t.add_row(str(g["index"]),
                  f"{format_memory(g['memory_used'])}/{format_memory(g['memory_total'])}",
                  format_memory(g["memory_external"]) if g["memory_external"] else "-",
                  format_memory(g["reserved_memory"]) if g["reserved_memory"] else "-",
                  f"{g['utilization']:.0%}", f"{g['allocated']:g}",
                  ",".join(map(str, g["jobs"])) or "-", kept.get(g["index"], "-"),
                  _yes(g["paused"], False), _yes(g["healthy"], True))
    names = Counter(g["name"] for g in data["gpus"])
    kinds = ", ".join(f"{n} x {name}" for name, n in names.items()) or "no GPUs"
    source = ("simulated GPUs, no real hardware" if data["devices"] == "simulated"
              else "read through NVML")
    lines: list[Any] = [t, Text(f"{kinds} ({source})")]
    if data.get("draining"):
        lines.append(Text("draining: nothing new starts (`rota drain --off` ends it)",
                          style="bold yellow"))
    return Group(*lines)


def gpus(json_out: bool = typer.Option(False, "--json")) -> None:
    """The GPUs: memory (outside use included), utilisation, Rota's share, jobs, state."""
    with run_cli(json_out=json_out), client() as c:
        data = c.gpus()
        data["reservations"] = c.queue_summary().get("reservations", [])
        emit(data, json_out, gpus_view)


def _each_gpu(indices: list[int], paused: bool, json_out: bool) -> None:
    def done(r: dict[str, Any]) -> str:
        if paused:
            return f"paused GPU {r['index']}: running jobs stay, nothing new starts there"
        return f"resumed GPU {r['index']}"

    apply_each(indices, "index", json_out,
               lambda c, i: c.pause(i) if paused else c.resume(i), done)


def pause(indices: list[int] = typer.Argument(..., metavar="GPU..."),
          json_out: bool = typer.Option(False, "--json")) -> None:
    """Pause GPUs: jobs on them keep running, no new job starts there."""
    _each_gpu(indices, True, json_out)


def resume(indices: list[int] = typer.Argument(..., metavar="GPU..."),
           json_out: bool = typer.Option(False, "--json")) -> None:
    """Resume paused GPUs."""
    _each_gpu(indices, False, json_out)


def drain(off: bool = typer.Option(False, "--off", help="stop draining"),
          json_out: bool = typer.Option(False, "--json")) -> None:
    """Drain the machine: running jobs finish, nothing new starts (--off ends it)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.drain(on=not off), json_out,
             lambda d: "draining: running jobs finish, nothing new starts" if d["draining"]
             else "not draining: jobs start again")


def _status_text(d: dict[str, Any]) -> Group:
    h, q = d["health"], d["queue"]
    counts = q.get("counts", {})
    order = ["pending", "held", "starting", "running", "preempted", "completed", "failed",
             "timeout", "cancelled"]
    shown = ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s)) or "no jobs yet"
    lines: list[Any] = [
        Text.assemble(("rota daemon ", "bold"), f"{h['version']} (pid {h['pid']}), "
                      f"{h['gpus']} {h['devices']} GPU{'s' if h['gpus'] != 1 else ''}"),
        f"jobs: {shown}",
    ]
    if q.get("reservations"):
        kept = "; ".join(f"GPUs {','.join(map(str, r['gpus']))} kept for job {r['job']}"
                         for r in q["reservations"])
        lines.append(f"reservations: {kept}")
    if h.get("draining"):
        lines.append(Text("draining: nothing new starts", style="bold yellow"))
    return Group(*lines)


def status(json_out: bool = typer.Option(False, "--json")) -> None:
    """Is the daemon up, and how many jobs are in each state."""
    with run_cli(json_out=json_out), client() as c:
        emit({"health": c.health(), "queue": c.queue_summary()}, json_out, _status_text)


def register(app: typer.Typer) -> None:
    """Attach the machine commands to the `rota` app."""
    app.command()(gpus)
    app.command()(pause)
    app.command()(resume)
    app.command()(drain)
    app.command()(status)
