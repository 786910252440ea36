"""`rota eval validate | submit | render | results`: an evaluation config (rota.eval.config)
checked, turned into ordinary jobs (rota.eval.jobs) and submitted or rendered for a pool,
and the runs' metrics read back.

YAML, pydantic and rota.eval are imported inside the commands: registering this group
costs the rest of the CLI nothing.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import typer

from rota.cli.common import Plain, client, emit, run_cli, warn
from rota.cli.submit import FORCE_HELP
from rota.cli.submitted import JOB_ITEM
from rota.cli.user_text import prose
from rota.errors import NotFound, RotaError

if TYPE_CHECKING:
    from rich.console import RenderableType

    from rota.answers import (
        EvalResultsAnswer,
        EvalRunAnswer,
        EvalScheduleAnswer,
        EvalSchedulesAnswer,
        RenderAnswer,
        SubmitAnswer,
    )
    from rota.client import RawClient as Client
    from rota.eval.config import EvalConfig
    from rota.eval.submission import Plan

eval_app = typer.Typer(help="Evaluation suites: a versioned config (docs/eval.md) run as "
                            "ordinary jobs on any pool, and their results.",
                       no_args_is_help=True)

JSON = typer.Option(False, "--json", help="print JSON")
FILE = typer.Argument(..., metavar="FILE", help="an evaluation config (YAML)")


# --- validate ------------------------------------------------------------------------------
@eval_app.command()
def validate(file: str = FILE, json_out: bool = JSON) -> None:
    """Check a config: every bad field is named with its path and line (exit 2), and every
    local path (read from the config's folder) must be on this machine."""
    from rota.eval import paths
    from rota.eval.config import ConfigErrors, located

    try:
        config, text = read_config(file)
        why = paths.refused_on_kubernetes(config) if _on_kubernetes(config) else None
        config = paths.resolve(config, os.path.dirname(os.path.abspath(file)))
        gone = paths.missing(config)
        if why is not None:
            field, _, message = why.partition(": ")
            gone.append((tuple(field.split(".")), message))
        if gone:
            raise ConfigErrors(located(text, file, gone))
    except ConfigErrors as e:
        if json_out:
            sys.stdout.write(_json({"file": file, "valid": False,
                                    "problems": [p.as_json() for p in e.items]}))
        else:
            sys.stderr.write("".join(f"{prose(p)}\n" for p in e.problems))
        raise typer.Exit(2) from None
    h = config.harness
    emit({"file": file, "valid": True, "name": config.name, "harness": h.kind,
          "tasks": list(h.tasks), "model": config.model.display}, json_out,
         lambda d: Plain(f"{file}: valid — {d['name']}, {d['harness']}, {len(d['tasks'])} "
                         f"task(s), model {d['model']}"))


def _on_kubernetes(config: EvalConfig) -> bool:
    """Whether the config's compute.pool is a Kubernetes pool in this home's rota.toml
    (validate asks no daemon; a pool it cannot read of is left to submit)."""
    if config.compute.pool is None:
        return False
    from rota.config import load_settings

    try:
        pool = load_settings().pool_set.pools.get(config.compute.pool)
    except RotaError:
        return False
    return pool is not None and pool.engine == "kubernetes"


def _json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2) + "\n"


def read_config(file: str) -> tuple[EvalConfig, str]:
    """The config and its text as written (read once: the jobs carry what was checked)."""
    from rota.eval.config import ConfigErrors, load_text

    try:
        with open(file, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigErrors([f"{file}: cannot read it: {e}"]) from None
    return load_text(text, where=file), text


# --- the jobs of one evaluation ------------------------------------------------------------
def plan(c: Client, file: str, pool: str | None, work_dir: str | None) -> Plan:
    """The jobs for ``pool`` (else the config's, else the daemon's default), whose engine
    the daemon names; ``work_dir``: default ./.rota-eval/NAME-UTCTIME."""
    import time

    from rota.eval.jobs import Source
    from rota.eval.submission import make_plan, work_dir_name

    config, text = read_config(file)
    name, engine = pool_engine(c, pool or config.compute.pool)
    folder = os.path.abspath(work_dir or os.path.join(
        ".rota-eval", work_dir_name(config.name, time.time())))
    commit, dirty = git_state(file)
    return make_plan(config, Source(text, commit, dirty), pool=name, engine=engine,
                     work_dir=folder,
                     config_dir=os.path.dirname(os.path.abspath(file)))


def pool_engine(c: Client, asked: str | None) -> tuple[str, str]:
    """The pool's name and engine, as the daemon has them (None: its default pool)."""
    data = c.pools()
    name = asked or data["default"]
    for p in data["pools"]:
        if p["name"] == name:
            return name, p["engine"]
    names = ", ".join(sorted(p["name"] for p in data["pools"]))
    raise NotFound(f"no pool {name!r}; the pools are: {names}")


def git_state(file: str) -> tuple[str | None, bool | None]:
    """The commit of the repository holding ``file``, and whether THAT file differs from it
    (changed, untracked or ignored); (None, None) outside a repository."""
    import subprocess

    from rota.ml.gitinfo import git_info

    folder = os.path.dirname(os.path.abspath(file))
    info = git_info(folder)
    if info is None:
        return None, None
    try:
        r = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--ignored", "--",
                            os.path.basename(file)], capture_output=True, text=True,
                           timeout=10, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return info.commit, None
    return info.commit, bool(r.stdout.strip()) if r.returncode == 0 else None


def about(e: RotaError, role: str, spec: dict[str, Any]) -> RotaError:
    """``e`` saying which job of the evaluation it is about (the daemon's ``jobs[0]: ``
    means that one job)."""
    from rota.eval.submission import naming

    return naming(e, role, spec, JOB_ITEM.sub("", str(e)))


# --- submit --------------------------------------------------------------------------------
@eval_app.command()
def submit(file: str = FILE,
           pool: str = typer.Option(None, "--pool", help="default: the config's "
                                    "compute.pool, else the daemon's default pool"),
           hold: bool = typer.Option(False, "--hold", help="submit the jobs held "
                                     "(`rota release` them)"),
           work_dir: str = typer.Option(None, "--work-dir", metavar="DIR",
                                        help="a folder the jobs share (the fetched model "
                                             "lands in DIR/model; a cluster's nodes must "
                                             "see it); default ./.rota-eval/NAME-UTCTIME"),
           force: bool = typer.Option(False, "--force", help=FORCE_HELP),
           json_out: bool = JSON) -> None:
    """Submit an evaluation as ordinary jobs.

    A model that must be fetched gets a job of its own on no GPU, and the evaluation runs
    after it; on Kubernetes one job does both (its pod's init container fetches the
    model)."""
    from rota.eval.submission import make_work_dir

    with run_cli(json_out=json_out), client() as c:
        p = plan(c, file, pool, work_dir)
        make_work_dir(p)
        answers = submit_answers(c, p, hold=hold, force=force)
        emit({"name": p.config.name, "pool": p.pool, "work_dir": p.work_dir, **answers},
             json_out, _submitted_text)


def submit_answers(c: Client, p: Plan, *, hold: bool,
                   force: bool = False) -> dict[str, SubmitAnswer | None]:
    """The daemon's answer for each job (rota.eval.submission.submit_plan), its warnings
    said."""
    from rota.eval.submission import ROLES, submit_plan

    got: dict[str, SubmitAnswer | None] = {"fetch": None}

    def send(role: str, spec: dict[str, Any]) -> int:
        try:
            answer = c.submit_full([spec], force=force)
        except RotaError as e:
            raise about(e, role, spec) from None
        got[role] = answer
        for w in answer.get("warnings", []):
            warn(f"{ROLES[role]}: {w}")
        return answer["jobs"][0]["id"]

    submit_plan(p, send, c.cancel, hold=hold)
    return got


def _submitted_text(d: dict[str, Any]) -> Plain:
    ev, fetch = d["evaluate"]["jobs"][0], d["fetch"]
    held = " (held)" if ev["state"] == "held" else ""
    if fetch is None:
        head = f"submitted evaluation {d['name']}: job {ev['id']}{held}"
    else:
        f = fetch["jobs"][0]["id"]
        head = (f"submitted evaluation {d['name']}: job {f} fetches the model, job "
                f"{ev['id']} evaluates it after {f}{held}")
    return Plain(f"{head}\npool {d['pool']}; work dir {d['work_dir']}")


# --- schedules -----------------------------------------------------------------------------
@eval_app.command()
def schedule(file: str = FILE,
             every: str = typer.Option(None, "--every", metavar="DURATION",
                                       help="a run every DURATION (30m, 6h, 1d), the first "
                                            "one DURATION from now"),
             after_job: int = typer.Option(None, "--after-job", metavar="JOB",
                                           help="one run once JOB completes (none if it "
                                                "fails)"),
             on_checkpoint: int = typer.Option(None, "--on-checkpoint", metavar="JOB",
                                               help="a run for each new checkpoint of JOB, "
                                                    "whose model it is"),
             pool: str = typer.Option(None, "--pool", help="default: the config's "
                                      "compute.pool, else the daemon's default pool"),
             json_out: bool = JSON) -> None:
    """Evaluate by itself from now on; the schedule is kept across restarts.

    Exactly one of --every, --after-job and --on-checkpoint. The config is checked now
    (every bad field named) and read as it is now: later edits of FILE do not change it."""
    from rota.client._calls import schedule_body

    with run_cli(json_out=json_out), client() as c:
        config, text = read_config(file)
        if pool:
            pool_engine(c, pool)  # NotFound names the pools
        commit, dirty = git_state(file)
        body = schedule_body(text, path=os.path.abspath(file), every=every,
                             after_job=after_job, on_checkpoint=on_checkpoint, pool=pool,
                             git_commit=commit, git_dirty=dirty)
        emit(c.eval_schedule(body), json_out,
             lambda d: Plain(f"evaluation schedule {d['id']}: {config.name}, "
                             f"{_trigger_text(d)}"))


@eval_app.command()
def schedules(json_out: bool = JSON) -> None:
    """Your evaluation schedules (an admin's: everyone's)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.eval_schedules(), json_out, _schedules_table)


@eval_app.command()
def unschedule(schedule_id: int = typer.Argument(..., metavar="ID", help="the schedule's id"),
               json_out: bool = JSON) -> None:
    """Remove a schedule: no run of it is submitted from now on (its jobs stay)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.eval_unschedule(schedule_id), json_out,
             lambda d: Plain(f"evaluation schedule {d['id']} removed"))


def _trigger_text(d: EvalScheduleAnswer) -> str:
    from rota.cli.fmt import fmt_time
    from rota.units import format_duration

    if d["trigger"] == "every":
        nxt = fmt_time(d["next_at"], short=True) if d["next_at"] is not None else "-"
        return f"every {format_duration(d['every_s'] or 0)}, next {nxt}"
    if d["trigger"] == "after_job":
        return f"once after job {d['job_id']} completes"
    return f"each new checkpoint of job {d['job_id']}"


#: the narrowest each wrapping column of `rota eval schedules` gets (80 columns hold them)
_SCHEDULE_MIN = {"name": 12, "trigger": 20}


def _schedules_table(data: EvalSchedulesAnswer) -> RenderableType:
    """A row per schedule; why one is off goes under the table, a line each (as `rota
    pools` says what is wrong with a pool): at 80 columns the trigger and the names keep
    their room, wrapping between words, and the numbers stay whole."""
    if not data["schedules"]:
        return Plain("no evaluation schedules")
    from rich.box import SIMPLE_HEAD
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from rota.cli.fmt import add_row

    rows = [[str(d["id"]), d["name"], _trigger_text(d), str(d["runs"]),
             str(d["last_job"] or "-"), "yes" if d["enabled"] else "no"]
            for d in data["schedules"]]
    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    for i, col in enumerate(("id", "name", "trigger", "runs", "last job", "enabled")):
        longest = max(len(x) for x in [col, *(r[i] for r in rows)])
        wraps = col in _SCHEDULE_MIN
        t.add_column(col, no_wrap=not wraps, overflow="fold",
                     min_width=min(longest, _SCHEDULE_MIN[col]) if wraps else None)
    for r in rows:
        add_row(t, *r)
    off = [Text(f"{d['id']}: off: {d['disabled_reason'] or '-'}")
           for d in data["schedules"] if not d["enabled"]]
    return Group(t, *off) if off else t


# --- render --------------------------------------------------------------------------------
@eval_app.command()
def render(file: str = FILE,
           pool: str = typer.Option(..., "--pool", help="the pool to render for"),
           json_out: bool = JSON) -> None:
    """Print what each job would be handed on a pool, without submitting anything.

    For Kubernetes: the ConfigMap holding the config and the Job, whose init container
    fetches the model; elsewhere the fetch job and the evaluation as that pool takes them.
    """
    with run_cli(json_out=json_out), client() as c:
        p = plan(c, file, pool, None)
        shown: list[dict[str, Any]] = []
        for role, spec in p.specs():
            try:
                answer: RenderAnswer = c.render_spec(spec, pool)
            except RotaError as e:
                raise about(e, role, spec) from None
            shown.append({"role": role, "name": spec.get("name"), **answer})
        emit({"name": p.config.name, "pool": p.pool, "jobs": shown}, json_out, _rendered)


def _rendered(d: dict[str, Any]) -> Plain:
    from rota.eval.submission import ROLES

    parts = [f"# {ROLES[j['role']]} {j['name']} (not submitted: shown as job 0), pool "
             f"{j['pool']} ({j['engine']})\n{j['text'].rstrip()}" for j in d["jobs"]]
    return Plain("\n\n".join(parts))


# --- results -------------------------------------------------------------------------------
@eval_app.command()
def results(name: str = typer.Option(None, "--name", help="the config's name"),
            model: str = typer.Option(None, "--model", help="the model as the config "
                                      "names it (runs:/RUN/PATH, a folder, a URI)"),
            task: str = typer.Option(None, "--task", help="only metrics named TASK/..., "
                                     "and the runs that have some"),
            limit: int = typer.Option(50, "--limit", min=1, max=1000, help="runs at most"),
            json_out: bool = JSON) -> None:
    """Evaluation runs, newest first, each with the metrics it reported."""
    with run_cli(json_out=json_out), client() as c:
        data = c.eval_results(name=name, model=model, task=task, limit=limit)
        emit(data, json_out, lambda d: results_view(d, task))


def results_view(data: EvalResultsAnswer, task: str | None = None) -> RenderableType:
    """One row per run and a column per metric when that fits the terminal without cutting
    a metric or a value; else each run's metrics as rows under it."""
    runs = data["runs"]
    if not runs:
        return Plain("no evaluation runs" + (f" with metrics of {task}" if task else ""))
    from rota.cli.fmt import console_width

    names = sorted({m for r in runs for m in r["metrics"]})
    metrics = [(_label(m, task), m) for m in names]
    if _wide_width(runs, metrics) <= console_width():
        return _table(runs, metrics)
    return _long_table(runs, task)


def _wide_width(runs: list[EvalRunAnswer], metrics: list[tuple[str, str]]) -> int:
    """The columns the wide table needs: what does not wrap whole, the rest _WRAP_MIN,
    3 between columns."""
    cells = [_run_cells(r) for r in runs]
    need = [_need(col, [str(c[i]) for c in cells], wraps)
            for i, (col, wraps) in enumerate(_RUN_COLUMNS)]
    need += [_need(label, [_value(r["metrics"].get(m)) for r in runs], False)
             for label, m in metrics]
    return sum(need) + 3 * (len(need) - 1)


def _need(header: str, cells: list[str], wraps: bool) -> int:
    longest = max(len(x) for x in [header, *cells])
    return min(_WRAP_MIN, longest) if wraps else longest


#: a run's cells: (column, whether it may wrap)
_RUN_COLUMNS = (("job", False), ("name", True), ("model", True), ("harness", False),
                ("state", False), ("when", False))
#: the narrowest a column that wraps gets (a name or a model stays readable)
_WRAP_MIN = 12


def _run_cells(r: EvalRunAnswer) -> list[Any]:
    from rota.cli.fmt import fmt_time, styled_state

    return [str(r["id"]), r["name"], r["model"] or "-", r["harness"] or "-",
            styled_state(r["state"]), fmt_time(r["ended_at"] or r["created_at"], short=True)]


def _label(metric: str, task: str | None) -> str:
    """A metric's column name (without ``TASK/`` when one task is shown)."""
    return metric.removeprefix(f"{task}/") if task else metric


def _table(runs: list[EvalRunAnswer], metrics: list[tuple[str, str]]) -> Any:
    """One row per run; ``metrics``: (column, metric name). A name or a model wraps, to no
    fewer than _WRAP_MIN characters; nothing else does."""
    from rich.box import SIMPLE_HEAD
    from rich.table import Table

    from rota.cli.fmt import add_row

    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    cells = [_run_cells(r) for r in runs]
    for i, (col, wraps) in enumerate(_RUN_COLUMNS):
        t.add_column(col, overflow="fold", no_wrap=not wraps,
                     min_width=_need(col, [str(c[i]) for c in cells], True) if wraps
                     else None)
    for label, _ in metrics:
        t.add_column(label, justify="right", no_wrap=True)
    for r, run in zip(runs, cells, strict=True):
        add_row(t, *run, *(_value(r["metrics"].get(m)) for _, m in metrics))
    return t


def _long_table(runs: list[EvalRunAnswer], task: str | None) -> Any:
    """Too many metrics for columns: a row per metric; the run's cells, one a line, in a
    column of their own on its first."""
    from rich.box import SIMPLE_HEAD
    from rich.table import Table
    from rich.text import Text

    from rota.cli.fmt import add_row

    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    t.add_column("job", no_wrap=True)
    for col in ("run", "metric"):
        t.add_column(col, overflow="fold", min_width=_WRAP_MIN)
    t.add_column("value", justify="right", no_wrap=True)
    for r in runs:
        job, name, model, harness, state, when = _run_cells(r)
        first = [job, Text("\n").join([Text(name), Text(model),
                                        Text.assemble(harness, ", ", state), Text(when)])]
        shown: list[tuple[str, float | None]] = sorted(r["metrics"].items())
        for m, v in shown or [("-", None)]:
            add_row(t, *first, _label(m, task), _value(v))
            first = ["", ""]
        t.add_section()
    return t


def _value(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
