"""`rota show` and `rota why`: one job, in words and short tables that fit 80 columns.

Times, ids and states never wrap (their cells do not wrap); free text (messages,
reasons, commands) wraps between words.
"""

from __future__ import annotations

import os
import shlex
import time

from rota.cli import lazy_typer as typer
from rota.cli.common import emit, run_cli
from rota.cli.fmt import add_row, fmt_gpus, fmt_time, styled_state

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rich.console import Group
    from rich.table import Table

    from rota.answers import (
        AttemptAnswer,
        EventAnswer,
        JobDetailAnswer,
        SpecAnswer,
        TrackingAnswer,
        WhyAnswer,
    )

    class ShownJob(JobDetailAnswer):
        """What `rota show` shows (and prints with --json): the job and its events."""

        events: list[EventAnswer]

JOB_ARG = typer.Argument(..., metavar="JOB", help="the job's id or name")


def _grid() -> Table:
    from rich.table import Table

    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    return t


def _spec_lines(spec: SpecAnswer) -> Table:
    from rota.units import format_duration, format_memory

    t = _grid()
    cmd = spec["command"]
    add_row(t, "command", cmd[0] if spec["shell"] else shlex.join(cmd))
    every: Mapping[str, Any] = spec  # each field, those this CLI does not know of too
    for key, value in every.items():
        if key == "gpus":
            add_row(t, key, fmt_gpus(value))
            continue
        if key in ("command", "name") or value in (None, False, [], {}, "none"):
            continue
        if key.startswith("retry_backoff") and not spec["retries"]:
            continue
        if key in ("grace", "retry_backoff", "retry_backoff_max", "time_limit"):
            value = format_duration(value)
        elif key == "gpu_mem":
            value = format_memory(value)
        elif key == "files":  # path -> text: the paths (--json has the texts)
            value = ", ".join(value)
        elif isinstance(value, dict):  # env, or a field this CLI does not know of
            value = " ".join(f"{k}={_word(v)}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(_word, value))
        add_row(t, key, _word(value))
    return t


def _word(value: object) -> str:
    """A spec value as the rest of the CLI writes it: yes/no, never Python's True/False."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _attempt_line(a: AttemptAnswer, now: float) -> str:
    """One attempt in a sentence-like line: `#1 GPU 0 (share 1) 12:03:01-12:05:11 2m10s
    exit 0 completed, peak 3.2G, local pid 4242`."""
    from rota.units import format_duration, format_memory

    started, ended = a["started_at"], a["ended_at"]
    took = (ended or now) - started if started else None
    gpus = ",".join(map(str, a["gpus"]))
    where = f"GPU {gpus}" if gpus and "," not in gpus else f"GPUs {gpus}" if gpus else "CPU"
    exit_text = (f"exit {a['exit_code']}" if a["exit_code"] is not None
                 else f"signal {a['signal']}" if a["signal"] else "")
    when = fmt_time(started, short=True)
    if ended:
        when += f" to {fmt_time(ended, short=True)}"
    parts = [f"#{a['number']}", f"{where} (share {a['fraction']:g})", when,
             format_duration(took), exit_text, a["outcome"] or "running"]
    line = " ".join(p for p in parts if p and p != "-")
    extra = []
    if a["peak_gpu_mem"]:
        extra.append(f"peak {format_memory(a['peak_gpu_mem'])}")
    engine_id = a.get("engine_id")
    who = a["session"] or (f"job {engine_id}" if engine_id else "") or \
        (f"pid {a['pid']}" if a["pid"] else "")
    if a["backend"] or who:
        extra.append(" ".join(x for x in (a["backend"], who) if x))
    reason = a["reason"] or ""
    if reason.startswith("exit code"):  # said already; what the job said of it is not
        reason = reason.partition(": ")[2]
    if reason:
        extra.append(reason)
    return line + (", " + ", ".join(extra) if extra else "")


def _attempts(attempts: list[AttemptAnswer]) -> Table:
    from rich.table import Table

    t = Table.grid(padding=(0, 1))
    t.add_column(overflow="fold")
    now = time.time()
    for a in attempts:
        add_row(t, _attempt_line(a, now))
    return t


def _events_table(events: list[EventAnswer]) -> Table:
    from rich.box import SIMPLE_HEAD
    from rich.table import Table

    t = Table(box=SIMPLE_HEAD, pad_edge=False, header_style="bold", show_edge=False)
    t.add_column("time", no_wrap=True)
    t.add_column("event", no_wrap=True)
    t.add_column("state", no_wrap=True)
    t.add_column("message", overflow="fold", ratio=1)
    for e in events:
        move = f"{e['from'] or ''}->{e['to']}" if e["to"] else ""
        add_row(t, fmt_time(e["ts"], short=True), e["kind"], move, e["message"] or "")
    return t


def render_job(job: ShownJob) -> Group:
    from rich.console import Group
    from rich.text import Text

    from rota.cli.user_text import cell

    head = Text.assemble((f"job {job['id']}", "bold"), f"  {cell(job['name'])}  ",
                         styled_state(job["state"]))
    facts = _grid()
    add_row(facts, "user", job["user"])
    project = job["project"] or job["spec"]["project"]
    if project:
        add_row(facts, "project", project)
    add_row(facts, "priority", str(job["priority"]))
    gpus = fmt_gpus(job["gpus"])
    if job["gpu_indices"]:
        gpus += " on " + ",".join(map(str, job["gpu_indices"]))
    add_row(facts, "gpus", gpus)
    if job["spec"]["pool"]:
        add_row(facts, "pool", job["spec"]["pool"])
    if job["spec"].get("workspace") is False:  # asked for none, or its pool gives none
        add_row(facts, "workspace", "none (no ROTA_WORKSPACE)")
    engine = job.get("engine")
    if engine is not None:
        add_row(facts, "engine", " ".join(x for x in (
            engine["backend"], f"job {engine['id']}" if engine["id"] else None,
            engine["state"]) if x))
    add_row(facts, "source", job["source"])
    add_row(facts, "submitted", fmt_time(job["created_at"]))
    reason = job.get("reason")
    if reason:
        add_row(facts, Text("waits", style="bold yellow"), _after_waits(reason["message"]))
    if job["end_reason"] and job["state"] not in ("pending", "held", "running"):
        add_row(facts, "ended", job["end_reason"])
    # URLs and paths are never folded: each tracker line is printed whole, so it can be
    # copied from any terminal width (the terminal wraps it, not Rota)
    runs = [Text(f"{label}: {cell(text)}", no_wrap=True, overflow="ignore")
            for label, text in _tracking(job.get("tracking") or {})]
    parts: list[Any] = [head, facts, *runs, "", Text("spec", style="bold"),
                        _spec_lines(job["spec"])]
    if job["attempts_detail"]:
        parts += ["", Text("attempts", style="bold"), _attempts(job["attempts_detail"])]
    if job["events"]:
        parts += ["", Text("timeline", style="bold"), _events_table(job["events"])]
    return Group(*parts)


def _tracking(t: TrackingAnswer) -> list[tuple[str, str]]:
    """Where the job's experiment-tracker runs are."""
    out = []
    ml = t.get("mlflow")
    if ml:
        if "run_id" in ml:
            where = ml.get("url") or f"experiment {ml['experiment']!r} in {ml['uri']}"
            out.append(("MLflow", f"run {ml['run_id']}, {where}"))
        elif "error" in ml:
            out.append(("MLflow", f"error: {ml['error']}"))
        else:
            out.append(("MLflow", "the run is being created"))
    wb = t.get("wandb")
    if wb:
        where = wb["url"] or (f"run {wb['run_id']} in project {wb['project']}"
                              + (f" of {wb['entity']}" if wb["entity"] else ""))
        if wb.get("offline_dir"):
            where += f" (offline: `wandb sync {wb['offline_dir']}` uploads it"
            if wb.get("card") == "attached":  # its card is a second run folder beside it
                where += f"; `wandb sync {os.path.dirname(wb['offline_dir'])}` its card too"
            where += ")"
        if wb.get("card"):
            where += f"; card {wb['card']}"
        out.append(("W&B", where))
    return out


def show(job: str = JOB_ARG,
         json_out: bool = typer.Option(False, "--json", help="print JSON (every field)"),
         ) -> None:
    """Everything about one job: spec, state, why it waits, attempts and timeline."""
    from rota.cli.common import client
    from rota.cli.job_refs import resolve

    with run_cli(json_out=json_out), client() as c:
        job_id = resolve(c, job)
        data: ShownJob = {**c.job(job_id), "events": c.events(job_id)}
        emit(data, json_out, render_job)


def _after_waits(message: str) -> str:
    """A reason less the "waits" most of the daemon's reasons start with, where the label
    or the sentence says it already: "waits for 2 GPUs" -> "for 2 GPUs", "waits: quota"
    -> "quota"; any other reason as it is."""
    word, sep, rest = message.partition(" ")
    if word == "waits:" or (word == "waits" and sep):
        return rest
    return message


def why_sentence(d: WhyAnswer) -> str:
    """`job 7 waits: ...`, `job 7 is held: ...`, `job 7 runs on GPU 0 since 12:03 (2m10s)`.

    The daemon's message for a job that runs or ended is a predicate ("runs on GPU 0 since
    12:03", "completed at 12:05 with exit code 0 after 2m 10s"): it follows "job N".
    """
    job, state, message = d["id"], d["state"], d["message"]
    if state == "pending":
        if _after_waits(message) != message:  # "waits for ...": its own verb
            return f"job {job} {message}"
        return f"job {job} waits: {message}" if message else f"job {job} waits"
    if state == "held":
        rest = message.removeprefix("held: ").removeprefix("held")
        return f"job {job} is held" + (f": {rest}" if rest else "")
    if message.startswith("it is "):  # an older daemon: "it is completed: ..."
        return f"job {job} is {message.removeprefix('it is ')}"
    return f"job {job} {message}" if message else f"job {job} is {state}"


def why(job: str = JOB_ARG,
        json_out: bool = typer.Option(False, "--json", help="print JSON (code, message)"),
        ) -> None:
    """Why a job waits (or what it does, or how it ended), or a pipeline's next round.

    JOB is a job's id or name, or `pipeline:NAME`: when that pipeline's next round runs
    and why then."""
    from rota.cli.common import Plain, client
    from rota.cli.job_refs import resolve

    with run_cli(json_out=json_out), client() as c:
        if job.startswith("pipeline:"):  # a pipeline's next round: when, and why then
            p = c.pipeline(job.removeprefix("pipeline:"), limit=1)["pipeline"]
            emit(p, json_out, lambda d: Plain(f"pipeline {d['name']}: {d['why']}"))
            return
        emit(c.why(resolve(c, job)), json_out, lambda d: Plain(why_sentence(d)))
