"""ML commands: a job's metrics (and, as they come, checkpoints, estimates, templates)."""

from __future__ import annotations

import math
from typing import Any

import typer
from rich.table import Table

from rota.cli.common import client, emit, run_cli
from rota.cli.jobs import fmt_time
from rota.units import format_duration, format_memory

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """The values as a row of block characters, averaged into at most ``width`` buckets."""
    if not values:
        return ""
    n, w = len(values), min(width, len(values))
    means = [sum(b) / len(b) for b in (values[i * n // w:(i + 1) * n // w] for i in range(w))]
    lo, hi = min(means), max(means)
    if math.isclose(lo, hi):
        return SPARKS[0] * len(means)
    return "".join(SPARKS[round((m - lo) / (hi - lo) * (len(SPARKS) - 1))] for m in means)


def progress_text(p: dict[str, Any] | None) -> str:
    """``45% step 450/1000, 14.8 steps/s, ETA 37s`` from a job's progress."""
    if not p:
        return ""
    parts = []
    if p.get("fraction") is not None:
        parts.append(f"{100 * p['fraction']:.0f}%")
    if p.get("step") is not None:
        parts.append(f"step {p['step']}" + (f"/{p['total_steps']}" if p.get("total_steps") else ""))
    if p.get("epoch") is not None:
        parts.append(f"epoch {p['epoch']:g}"
                     + (f"/{p['total_epochs']}" if p.get("total_epochs") else ""))
    rate = p.get("rate")
    if rate:
        parts.append(f"{rate:.3g} steps/s" if rate >= 1 else f"{1 / rate:.3g} s/step")
    if p.get("eta_s") is not None:
        parts.append(f"ETA {format_duration(p['eta_s'])}")
    return ", ".join(parts)


def metrics_table(data: dict[str, Any]) -> Table | str:
    series: dict[str, list[list[Any]]] = data["series"]
    head = progress_text(data.get("progress"))
    if not series:
        return f"job {data['id']}: no metrics yet" + (f" ({head})" if head else "")
    t = Table(title=f"job {data['id']}" + (f": {head}" if head else ""), title_justify="left",
              header_style="bold")
    for col, right in (("metric", False), ("last", True), ("at step", True), ("min", True),
                       ("max", True), ("samples", True), ("trend", False)):
        t.add_column(col, justify="right" if right else "left", no_wrap=True)
    for name in sorted(series):
        points = series[name]
        values = [p[1] for p in points]
        step = points[-1][0]
        t.add_row(name, f"{values[-1]:.6g}", "-" if step is None else str(step),
                  f"{min(values):.6g}", f"{max(values):.6g}", str(len(values)),
                  sparkline(values))
    return t


def metrics(job_id: int = typer.Argument(..., metavar="JOB"),
            name: list[str] = typer.Option(None, "--name", "-n",
                                           help="only this metric (repeatable)"),
            json_out: bool = typer.Option(False, "--json",
                                          help="JSON: {series: {name: [[step, value, time, "
                                               "attempt], ...]}, progress}"),
            ) -> None:
    """Metrics read from a job's output (loss, lr, ...): last value, range and a trend line."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.metrics(job_id, list(name or [])), json_out, metrics_table)


def checkpoints_table(data: dict[str, Any]) -> Table | str:
    rows = data["checkpoints"]
    if not rows:
        return (f"job {data['id']}: no checkpoints found (give the job --checkpoint-dir, or "
                "report them with rota.job.checkpoint_saved)")
    t = Table(title=f"job {data['id']}: checkpoints", title_justify="left", header_style="bold")
    for col in ("step", "size", "saved", "valid", "path"):
        t.add_column(col, justify="right" if col in ("step", "size") else "left",
                     overflow="fold")
    for c in rows:
        mark = " (resume)" if c["path"] == data.get("resume_from") else ""
        t.add_row("-" if c["step"] is None else str(c["step"]), format_memory(c["size"]),
                  fmt_time(c["mtime"], short=True),
                  ("yes" if c["valid"] else "no (being written?)") + mark, c["path"])
    return t


def checkpoints(job_id: int = typer.Argument(..., metavar="JOB"),
                json_out: bool = typer.Option(False, "--json")) -> None:
    """A job's checkpoints (step, size, time) and the one a retry resumes from."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.checkpoints(job_id), json_out, checkpoints_table)


def register(app: typer.Typer) -> None:
    app.command()(metrics)
    app.command()(checkpoints)
