"""`rota pipeline add | validate | list | show | history | pause | resume | run-now | rm`:
recurring fine-tuning pipelines (rota.pipeline), run by the daemon as rounds of ordinary
jobs (rota.server.schedules.pipelines). Plain text out (no Rich), or --json.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer

from rota.cli.common import Plain, client, emit, run_cli

if TYPE_CHECKING:
    from rota.answers import (
        PipelineAnswer,
        PipelineDetailAnswer,
        PipelineRoundAnswer,
        PipelinesAnswer,
    )

pipeline_app = typer.Typer(help="Recurring fine-tuning pipelines: prepare data, train "
                                "(locally or through the Gradients API), merge, evaluate on "
                                "held-out data, accept (docs/pipelines.md).",
                           no_args_is_help=True)

JSON = typer.Option(False, "--json", help="print JSON")
FILE = typer.Argument(..., metavar="FILE", help="a pipeline file: Rota's form, or a "
                                                "Gradients config.yaml")
NAME = typer.Argument(..., metavar="NAME", help="the pipeline's name")


def _read(file: str) -> str:
    from rota.eval.config import read_file

    return read_file(file)


@pipeline_app.command()
def validate(file: str = FILE, json_out: bool = JSON) -> None:
    """Check a file without adding it: every bad field is named with its path and line
    (exit 2); the pipelines it holds are listed."""
    from rota.pipeline.config import load_text

    with run_cli(json_out=json_out):
        configs = load_text(_read(file), where=file)
        data = {"pipelines": [{"name": c.name, "format": c.format, "enabled": c.enabled,
                               "train": c.train.where, "task_type": c.task_type,
                               "datasets": len(c.datasets)} for c in configs]}
        emit(data, json_out, lambda d: Plain("\n".join(
            f"{p['name']}: ok ({p['format']} form, {p['task_type']}, {p['datasets']} "
            f"dataset{'s' if p['datasets'] != 1 else ''}, trains {p['train']}"
            + ("" if p["enabled"] else "; not enabled: added paused") + ")"
            for p in d["pipelines"])))


@pipeline_app.command()
def add(file: str = FILE,
        task: str = typer.Option(None, "--task", help="only this task of a Gradients "
                                                      "config.yaml"),
        json_out: bool = JSON) -> None:
    """Add the file's pipelines (all or none); the first round of each is due now. The
    file is read as it is now: later edits do not change a pipeline (rm and add again)."""
    with run_cli(json_out=json_out), client() as c:
        text = _read(file)
        emit(c.pipeline_add(text, path=os.path.abspath(file), task=task), json_out,
             lambda d: Plain("\n".join(f"pipeline {p['name']} added: {p['why']}"
                                       for p in d["pipelines"])))


@pipeline_app.command("list")
def list_(json_out: bool = JSON) -> None:
    """Your pipelines (an admin's: everyone's): state, rounds, the base, what happens next."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.pipelines(), json_out, _list_text)


def _list_text(d: PipelinesAnswer) -> Plain:
    if not d["pipelines"]:
        return Plain("no pipelines (rota pipeline add FILE)")
    rows = [["name", "state", "rounds", "train", "base", "next"]]
    for p in d["pipelines"]:
        rows.append([p["name"], p["state"], str(p["rounds"]), p["train"],
                     _base(p), p["why"]])
    return Plain(_columns(rows))


def _base(p: PipelineAnswer) -> str:
    metric = f" ({p['metric']} {p['base_metric']:.4g})" if p["base_metric"] is not None \
        else ""
    origin = f"round {p['base_round']}" if p["base_round"] is not None else "model_repo"
    return f"{origin}{metric}"


def _columns(rows: list[list[str]]) -> str:
    """Left-aligned columns, the last one as long as it is."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)),
                                r[-1]]).rstrip() for r in rows)


@pipeline_app.command()
def show(name: str = NAME, json_out: bool = JSON) -> None:
    """One pipeline: what happens next, its base model, and its last rounds."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.pipeline(name, limit=10), json_out, _show_text)


def _show_text(d: PipelineDetailAnswer) -> Plain:
    p = d["pipeline"]
    lines = [f"pipeline {p['name']} ({p['format']} form, trains {p['train']}; owner "
             f"{p['user']})",
             f"  {p['state']}: {p['why']}",
             f"  base: {p['base_model']} ({_base(p)})",
             f"  rounds: {p['rounds']}; failed in a row: {p['failures']}"]
    if d["rounds"]:
        lines += ["", _history_text(d["rounds"])]
    return Plain("\n".join(lines))


@pipeline_app.command()
def history(name: str = NAME,
            limit: int = typer.Option(50, "--limit", min=1, max=10_000,
                                      help="rounds, newest first"),
            json_out: bool = JSON) -> None:
    """Every round: its verdict with both numbers, its jobs, and the lineage (base ->
    adapter -> merged model, the data chunk)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.pipeline(name, limit=limit), json_out,
             lambda d: Plain(_history_text(d["rounds"]) if d["rounds"]
                             else f"pipeline {name}: no rounds yet"))


def _history_text(rounds: list[PipelineRoundAnswer]) -> str:
    from rota.cli.fmt import fmt_time

    out = []
    for r in rounds:
        chunk = f"chunk {r['chunk'] + 1}/{r['chunks']}" if r["chunk"] is not None \
            and r["chunks"] else "chunk -"
        numbers = ""
        if r["metric"] is not None:
            base = f"{r['base_metric']:.4g}" if r["base_metric"] is not None else "-"
            numbers = f"; metric {r['metric']:.4g} vs base {base}"
        jobs = ", ".join(f"{k} {v} ({r['job_states'].get(k, '?')})"
                         for k, v in r["jobs"].items())
        out += [f"round {r['number']}: {r['state']}"
                + (f" at step {r['step']}" if r["state"] == "running" else "")
                + f" (began {fmt_time(r['started_at'], short=True)}; {chunk}{numbers})",
                f"  {r['base_model']} -> {r['adapter'] or '-'} -> {r['merged_model'] or '-'}"]
        if r["reason"]:
            out.append(f"  {r['reason']}")
        if jobs:
            out.append(f"  jobs: {jobs}")
    return "\n".join(out)


def _action(name: str, action: str, json_out: bool, body: dict[str, Any] | None = None,
            ) -> None:
    with run_cli(json_out=json_out), client() as c:
        emit(c.pipeline_action(name, action, body), json_out,
             lambda p: Plain(f"pipeline {p['name']}: {p['why']}"))


@pipeline_app.command()
def pause(name: str = NAME,
          reason: str = typer.Option("paused", "--reason", help="shown in list and show"),
          json_out: bool = JSON) -> None:
    """No new round begins until resumed (an open round finishes)."""
    _action(name, "pause", json_out, {"reason": reason})


@pipeline_app.command()
def resume(name: str = NAME, json_out: bool = JSON) -> None:
    """Rounds begin again at their time (an overdue one at once)."""
    _action(name, "resume", json_out)


@pipeline_app.command("run-now")
def run_now(name: str = NAME, json_out: bool = JSON) -> None:
    """The next round now (refused while one is open: rounds never overlap)."""
    _action(name, "run-now", json_out)


@pipeline_app.command()
def rm(name: str = NAME, json_out: bool = JSON) -> None:
    """Remove the pipeline and its rounds' records; an open round's jobs are cancelled
    (models already made stay where they are)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.pipeline_remove(name), json_out, lambda d: Plain(
            f"pipeline {d['name']} removed" + (
                f"; the jobs of round {d['cancelled_round']} were cancelled"
                if d["cancelled_round"] is not None else "")))


def register(app: typer.Typer) -> None:
    app.add_typer(pipeline_app, name="pipeline")
