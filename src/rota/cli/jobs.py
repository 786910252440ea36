"""Job commands: submit, queue, show, why, logs, wait, cancel/hold/release, attach, sessions,
and `rota add` for the watched jobs file."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from rota.cli.common import apply_each, client, console, emit, load, run_cli, warn
from rota.cli.common import fail as _fail
from rota.client import RawClient as Client
from rota.core.spec import parse_spec
from rota.core.sweep import expand_sweep, parse_sweep_arg
from rota.errors import DaemonUnavailable, InvalidSpec
from rota.jobsfile import JobsFileError, fmt_for_path, format_jobs_line, parse_jobs_text
from rota.units import format_duration, format_memory, parse_duration, parse_memory

ACTIVE_STATES = ["pending", "held", "starting", "running", "preempted"]
_RANK = {"running": 0, "starting": 0, "preempted": 0, "pending": 1, "held": 2}
_STATE_STYLE = {"running": "green", "starting": "green", "pending": "yellow", "held": "magenta",
                "completed": "blue", "failed": "red", "timeout": "red", "cancelled": "dim",
                "preempted": "yellow"}
_JOB_ITEM = re.compile(r"^jobs\[(\d+)\]: ")

# Options come first; the first word that is not an option starts the job's own argv, so
# `rota submit --gpus 1 python train.py --gpus 3` keeps `--gpus 3` for the job (`--` works too).
_CMD_SETTINGS = {"allow_interspersed_args": False}


# --- small formatting helpers ------------------------------------------------------------

def fmt_gpus(gpus: float | None) -> str:
    """1 -> '1', 0.5 -> '0.5', 0 -> 'cpu'."""
    if not gpus:
        return "cpu"
    return f"{gpus:g}"


def fmt_time(ts: float | None, *, short: bool = False) -> str:
    """Local time; with short=True only the clock for today's times."""
    if ts is None:
        return "-"
    when = datetime.fromtimestamp(ts)
    if short:
        return when.strftime("%H:%M:%S" if when.date() == datetime.now().date()
                             else "%m-%d %H:%M")
    return when.strftime("%Y-%m-%d %H:%M:%S")


def fail(message: str) -> None:
    """An error line on stderr (user text is never read as Rich markup)."""
    _fail(escape(message))


def add_row(table: Table, *cells: Any) -> None:
    """A table row whose plain strings are shown literally (names may hold [brackets])."""
    table.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in cells))


def job_clock(job: dict[str, Any], now: float | None = None) -> str:
    """How long it has waited, run, or ran, in words a queue table can hold."""
    now = time.time() if now is None else now
    state = job["state"]
    if state in ("running", "starting", "preempted") and job.get("started_at"):
        return f"ran {format_duration(now - job['started_at'])}"
    if job.get("ended_at") and job.get("started_at"):
        return f"ran {format_duration(job['ended_at'] - job['started_at'])}"
    if job.get("ended_at"):
        return "-"
    return f"waits {format_duration(now - job['created_at'])}"


def _styled_state(state: str) -> Text:
    return Text(state, style=_STATE_STYLE.get(state, ""))


_NAME_MAX = 32


def queue_table(jobs: list[dict[str, Any]], *, title: str | None = None) -> Table:
    """The `rota queue` table (also used by `rota demo`).

    Every column but the reason keeps its width; the reason gets what is left of the line
    and is cut short there (`rota why JOB` has it whole).
    """
    now = time.time()
    rows = []
    for j in jobs:
        on = ",".join(map(str, j.get("gpu_indices") or [])) or "-"
        rows.append([str(j["id"]), j["name"], j["user"], j["state"], str(j["priority"]),
                     fmt_gpus(j["gpus"]), on, job_clock(j, now),
                     _short_reason(j, j.get("reason") or {})])
    heads = ["id", "name", "user", "state", "prio", "gpus", "on", "time", "reason / progress"]
    widths = [max([len(h)] + [len(r[k]) for r in rows]) for k, h in enumerate(heads)]
    widths[1] = min(widths[1], _NAME_MAX)
    room = max(20, console.width - sum(widths[:-1]) - 3 * len(heads) - 1)
    table = Table(title=title, title_justify="left", header_style="bold")
    for k, head in enumerate(heads):
        if head == "name":
            table.add_column(head, overflow="fold", max_width=_NAME_MAX)
        elif head.startswith("reason"):
            table.add_column(head, overflow="fold")
        else:
            table.add_column(head, no_wrap=True, min_width=widths[k],
                             justify="right" if head in ("id", "prio", "gpus") else "left")
    for r in rows:
        add_row(table, *r[:3], _styled_state(r[3]), *r[4:8], _cut(r[8], room))
    return table


def _short_reason(job: dict[str, Any], reason: dict[str, Any]) -> str:
    if job["state"] in ("pending", "held"):
        return str(reason.get("message", ""))
    if job["state"] in ("failed", "timeout", "cancelled"):
        return str(job.get("end_reason") or "")
    if job["state"] == "running":
        from rota.cli.ml import progress_text

        return progress_text(job.get("progress"))
    return ""


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[:room - 1] + "…"


def queue_order(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Running first, then waiting jobs in the order they would start, then held, then done."""
    def key(j: dict[str, Any]) -> tuple[int, int, int]:
        rank = _RANK.get(j["state"], 3)
        if rank == 1:
            return (rank, j["priority"], j["id"])
        return (rank, 0, j["id"] if rank < 3 else -j["id"])
    return sorted(jobs, key=key)


def _parse_kv(items: Iterable[str], option: str, *, secret: bool = False) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            shown = "the value is not shown" if secret else f"got {item!r}"
            raise InvalidSpec(f"{option}: expected KEY=VALUE ({shown})", field="env")
        out[key.strip()] = value
    return out


def _duration(text: str, field: str) -> float:
    if text.strip() in ("0", "0s", "0.0"):
        return 0.0
    return parse_duration(text, field=field)


def _job_ids(jobs: Iterable[dict[str, Any]]) -> str:
    return ", ".join(str(j["id"]) for j in jobs)


# --- submit ------------------------------------------------------------------------------

def build_raw(command: list[str], *, name: str | None, gpus: float | None,
              gpu_mem: str | None, llm: str | None, priority: int | None,
              allowed_gpus: str | None, conda: str | None, cwd: str | None,
              env: list[str], secret_env: list[str], time_limit: str | None,
              grace: str | None, retries: int | None, retry_backoff: str | None,
              after: list[int], hold: bool, session: str | None, cuda_arg: bool,
              shell: bool, tags: list[str], checkpoint_dir: str | None = None,
              metric_patterns: list[str] | None = None, preemptible: bool = False,
              stop_signal: str | None = None,
              tensorboard_dir: str | None = None, trackers: dict[str, Any] | None = None,
              secret_refs: list[str] | None = None) -> dict[str, Any]:
    """The spec fields the user set (the daemon fills in the rest)."""
    if not command:
        raise InvalidSpec("no command given: put it after `--`, like "
                          "`rota submit --gpus 1 -- python train.py`", field="command")
    if shell and len(command) != 1:
        raise InvalidSpec("with --shell give the command as ONE quoted string, like "
                          "`rota submit --shell -- 'python a.py | tee out.txt'`",
                          field="command")
    raw: dict[str, Any] = {"command": list(command),
                           "cwd": os.path.abspath(cwd) if cwd else os.getcwd()}
    plain = _parse_kv(env, "--env")
    secrets = _parse_kv(secret_env, "--secret-env", secret=True)
    if plain or secrets:
        raw["env"] = {**plain, **secrets}
    if secrets:
        raw["secret_env"] = sorted(secrets)
    optional: dict[str, Any] = {
        "name": name, "gpus": gpus, "llm": llm, "priority": priority,
        "allowed_gpus": allowed_gpus, "conda": conda, "retries": retries,
        "session": session,
        "gpu_mem": parse_memory(gpu_mem) if gpu_mem is not None else None,
        "time_limit": parse_duration(time_limit) if time_limit is not None else None,
        "grace": _duration(grace, "grace") if grace is not None else None,
        "retry_backoff": (_duration(retry_backoff, "retry_backoff")
                          if retry_backoff is not None else None),
    }
    raw.update({k: v for k, v in optional.items() if v is not None})
    if retry_backoff is not None and raw["retry_backoff"] > 600:
        raw["retry_backoff_max"] = raw["retry_backoff"]
    for key, flag in (("hold", hold), ("cuda_arg", cuda_arg), ("shell", shell)):
        if flag:
            raw[key] = True
    if after:
        raw["after"] = list(after)
    if checkpoint_dir is not None:
        raw["checkpoint_dir"] = checkpoint_dir
    if preemptible:
        raw["preemptible"] = True
    if stop_signal is not None:
        raw["stop_signal"] = stop_signal
    if tensorboard_dir is not None:
        raw["tensorboard_dir"] = tensorboard_dir
    if metric_patterns:
        raw["metric_patterns"] = list(metric_patterns)
    if tags:
        raw["tags"] = list(tags)
    raw.update(tracker_fields(trackers or {}, secret_refs or []))
    return raw


def tracker_fields(trackers: dict[str, Any], secrets: list[str]) -> dict[str, Any]:
    """--mlflow, --wandb and their names, and --secret VAR[=NAME] (the secret NAME of the
    submitting user goes in the job's environment as VAR; NAME defaults to VAR)."""
    out = {k: v for k, v in trackers.items() if v is not None and v is not False}
    if trackers.get("mlflow") is False:
        out["mlflow"] = False  # --no-mlflow: even when the daemon gives every job a run
    mapped: dict[str, str] = {}
    for item in secrets:
        var, _, name = item.partition("=")
        var, name = var.strip(), (name.strip() or var.strip())
        if not var:
            raise InvalidSpec(f"--secret {item!r}: expected VAR or VAR=SECRET_NAME",
                              field="secrets")
        mapped[var] = name
    if mapped:
        out["secrets"] = mapped
    return out


def expand(raw: dict[str, Any], sweeps: list[str]) -> list[dict[str, Any]]:
    """One raw spec per sweep combination (the spec is checked here first)."""
    spec = parse_spec(raw)
    if not sweeps:
        return [raw]
    grid = [parse_sweep_arg(s) for s in sweeps]
    return [{**raw, "command": s.command, "name": s.name} for s in expand_sweep(spec, grid)]


def read_jobs_file(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[JobsFileError]]:
    """Specs from a YAML/JSON (or line-format) file: (line, raw spec) pairs and bad items."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidSpec(f"--file: cannot read {str(path)!r}: {e.strerror or e}",
                          field="file") from None
    fmt = "yaml" if path.suffix.lower() == ".json" else fmt_for_path(path)
    parsed = parse_jobs_text(text, fmt=fmt, source=str(path))
    items: list[tuple[int, dict[str, Any]]] = []
    for entry in parsed.entries:
        raw = entry.spec.model_dump(exclude_unset=True)
        raw["cwd"] = os.path.abspath(raw["cwd"]) if raw.get("cwd") else os.getcwd()
        items.append((entry.line, raw))
    return items, list(parsed.errors)


def submit_items(c: Client, items: list[tuple[int, dict[str, Any]]], source: str, *,
                 idempotency_key: str | None, dedup: bool,
                 ) -> tuple[list[dict[str, Any]], list[JobsFileError]]:
    """Submit the good items; an item the daemon rejects becomes an error, the rest count."""
    errors: list[JobsFileError] = []
    while items:
        try:
            jobs = c.submit([raw for _, raw in items], idempotency_key=idempotency_key,
                            dedup=dedup)
            return jobs, errors
        except InvalidSpec as e:
            m = _JOB_ITEM.match(str(e))
            if m is None and len(items) > 1:
                raise
            n = int(m.group(1)) if m else 0
            if n >= len(items):
                raise
            line, _ = items.pop(n)
            message = str(e)[m.end():] if m else str(e)
            errors.append(JobsFileError(line, message, source))
    return [], errors


def _submitted_text(jobs: list[dict[str, Any]]) -> Text:
    if not jobs:
        return Text("nothing submitted: an identical job is already queued or done (--dedup)")
    if len(jobs) == 1:
        return Text(f"submitted job {jobs[0]['id']}")
    lines = [f"submitted {len(jobs)} jobs: {_job_ids(jobs)}"]
    lines += [f"  {j['id']}  {j['name']}" for j in jobs]
    return Text("\n".join(lines))


def submit(
    command: list[str] = typer.Argument(None, help="the job's argv (after `--`)"),
    name: str = typer.Option(None, help="a name for the job"),
    gpus: float = typer.Option(None, help="GPUs: 0.5 shares one, 2 takes two whole, 0 = CPU"),
    gpu_mem: str = typer.Option(None, "--gpu-mem", help="memory needed on each GPU, e.g. 20G"),
    llm: str = typer.Option(None, help="size the job from a model, e.g. qwen2.5-7b"),
    priority: int = typer.Option(None, help="lower number runs first (default 0)"),
    allowed_gpus: str = typer.Option(None, "--allowed-gpus", help="e.g. 0-3,6"),
    conda: str = typer.Option(None, help="conda environment to run in"),
    cwd: str = typer.Option(None, help="working directory (default: here)"),
    env: list[str] = typer.Option(None, "--env", help="K=V, repeatable"),
    secret_env: list[str] = typer.Option(None, "--secret-env",
                                         help="K=V kept secret (never shown), repeatable"),
    time_limit: str = typer.Option(None, "--time-limit", help="e.g. 2h, 30m"),
    grace: str = typer.Option(None, help="SIGTERM to SIGKILL, e.g. 30s"),
    retries: int = typer.Option(None, help="retries after a failure"),
    retry_backoff: str = typer.Option(None, "--retry-backoff", help="first retry delay, e.g. 10s"),
    after: list[int] = typer.Option(None, "--after", help="job that must complete first"),
    hold: bool = typer.Option(False, "--hold", help="queue it held (`rota release` lets it run)"),
    session: str = typer.Option(None, help="tmux or screen: run in an attachable session"),
    cuda_arg: bool = typer.Option(False, "--cuda-arg", help="pass the GPUs as --cuda/--gpu arg"),
    shell: bool = typer.Option(False, "--shell", help="run ONE command string through a shell"),
    sweep: list[str] = typer.Option(None, "--sweep", help="key=v1,v2 or key=1..5, repeatable"),
    tag: list[str] = typer.Option(None, "--tag", help="a tag, repeatable"),
    checkpoint_dir: str = typer.Option(
        None, "--checkpoint-dir",
        help="where it saves checkpoints (dir or glob, relative to --cwd); a retry resumes "
             "from the newest: ROTA_RESUME_FROM, and {checkpoint} in the command"),
    preemptible: bool = typer.Option(
        False, "--preemptible",
        help="may be stopped (and queued again) so a higher-priority job can start"),
    stop_signal: str = typer.Option(None, "--stop-signal",
                                    help="signal of the stop handshake (default SIGTERM)"),
    tensorboard_dir: str = typer.Option(
        None, "--tensorboard-dir",
        help="where it writes TensorBoard logs: their scalars become metrics"),
    metric_pattern: list[str] = typer.Option(
        None, "--metric-pattern",
        help="a regex for metrics in its output; each (?P<name>...) group is one; repeatable"),
    mlflow: bool = typer.Option(
        None, "--mlflow/--no-mlflow",
        help="an MLflow run for the job: spec as params, git commit, metrics, log"),
    mlflow_experiment: str = typer.Option(None, "--mlflow-experiment",
                                          help="MLflow experiment (default: rota)"),
    wandb: bool = typer.Option(
        False, "--wandb",
        help="name its W&B run (WANDB_* variables; API key from `rota secret set "
             "WANDB_API_KEY`)"),
    wandb_project: str = typer.Option(None, "--wandb-project", help="default: --project"),
    wandb_entity: str = typer.Option(None, "--wandb-entity"),
    secret: list[str] = typer.Option(
        None, "--secret",
        help="VAR or VAR=NAME: your stored secret NAME in its environment as VAR, repeatable"),
    template: str = typer.Option(None, "--template",
                                 help="a ready-made job (`rota templates` lists them)"),
    set_: list[str] = typer.Option(None, "--set", help="a template option KEY=VALUE, repeatable"),
    dedup: bool = typer.Option(False, "--dedup", help="skip jobs identical to a queued/done one"),
    idempotency_key: str = typer.Option(None, "--idempotency-key",
                                        help="a retried submit with this key adds nothing"),
    file: Path = typer.Option(None, "--file", "-f", help="specs from a YAML/JSON file"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Queue a job: `rota submit OPTIONS -- CMD ARGS...` (prints its id)."""
    with run_cli(json_out=json_out):
        if file is not None:
            others = {"a command": command, "--name": name, "--gpus": gpus,
                      "--gpu-mem": gpu_mem, "--llm": llm, "--priority": priority,
                      "--allowed-gpus": allowed_gpus, "--conda": conda, "--cwd": cwd,
                      "--env": env, "--secret-env": secret_env, "--time-limit": time_limit,
                      "--grace": grace, "--retries": retries, "--retry-backoff": retry_backoff,
                      "--after": after, "--hold": hold, "--session": session,
                      "--cuda-arg": cuda_arg, "--shell": shell, "--sweep": sweep, "--tag": tag,
                      "--checkpoint-dir": checkpoint_dir, "--metric-pattern": metric_pattern,
                      "--preemptible": preemptible, "--stop-signal": stop_signal,
                      "--tensorboard-dir": tensorboard_dir, "--mlflow": mlflow,
                      "--mlflow-experiment": mlflow_experiment, "--wandb": wandb,
                      "--wandb-project": wandb_project, "--wandb-entity": wandb_entity,
                      "--secret": secret}
            given = [k for k, v in others.items()
                     if v is not None and v is not False and v != []]
            if given:
                raise InvalidSpec(f"--file takes the whole spec from the file; do not combine "
                                  f"it with {', '.join(given)}", field="file")
            _submit_file(file, json_out=json_out, dedup=dedup, idempotency_key=idempotency_key)
            return
        trackers = {"mlflow": mlflow, "mlflow_experiment": mlflow_experiment, "wandb": wandb,
                    "wandb_project": wandb_project, "wandb_entity": wandb_entity}
        if template is not None:
            _submit_template(template, set_ or [], command or [], json_out=json_out,
                             overrides={"name": name, "priority": priority, "gpus": gpus,
                                        "hold": hold or None, "tags": tag or None,
                                        "time_limit": parse_duration(time_limit)
                                        if time_limit else None,
                                        **tracker_fields(trackers, secret or [])})
            return
        if set_:
            raise InvalidSpec("--set gives a template's options: use it with --template",
                              field="set")
        raw = build_raw(command or [], name=name, gpus=gpus, gpu_mem=gpu_mem, llm=llm,
                        priority=priority, allowed_gpus=allowed_gpus, conda=conda, cwd=cwd,
                        env=env or [], secret_env=secret_env or [], time_limit=time_limit,
                        grace=grace, retries=retries, retry_backoff=retry_backoff,
                        after=after or [], hold=hold, session=session, cuda_arg=cuda_arg,
                        shell=shell, tags=tag or [], checkpoint_dir=checkpoint_dir,
                        metric_patterns=metric_pattern or [], preemptible=preemptible,
                        stop_signal=stop_signal, tensorboard_dir=tensorboard_dir,
                        trackers=trackers, secret_refs=secret or [])
        raws = expand(raw, sweep or [])
        with client() as c:
            answer = c.submit_full(raws, idempotency_key=idempotency_key, dedup=dedup)
        jobs = answer["jobs"]
        for w in answer.get("warnings", []):
            warn(w)
        emit({"jobs": jobs, **({"warnings": answer["warnings"]} if "warnings" in answer else {})},
             json_out, lambda d: _submitted_text(d["jobs"]))


def _submit_template(name: str, sets: list[str], command: list[str], *, json_out: bool,
                     overrides: dict[str, Any]) -> None:
    from rota.templates import get

    if command:
        raise InvalidSpec(f"--template {name} makes the command; give its options with --set, "
                          f"not {shlex.join(command)!r}", field="command")
    raw = get(name).spec(sets)
    raw.update({k: v for k, v in overrides.items() if v is not None})
    with client() as c:
        jobs = c.submit([raw])
    emit({"jobs": jobs}, json_out, lambda d: _submitted_text(d["jobs"]))


def _submit_file(path: Path, *, json_out: bool, dedup: bool,
                 idempotency_key: str | None) -> None:
    items, errors = read_jobs_file(path)
    jobs: list[dict[str, Any]] = []
    if items:
        with client() as c:
            jobs, rejected = submit_items(c, items, str(path), idempotency_key=idempotency_key,
                                          dedup=dedup)
        errors = sorted(errors + rejected, key=lambda e: e.line)
    if not items and not errors:
        errors = [JobsFileError(0, "no job specs in the file", str(path))]
    out: dict[str, Any] = {"jobs": jobs}
    if errors:
        out["errors"] = [{"line": e.line, "message": e.message} for e in errors]
    emit(out, json_out, lambda d: _submitted_text(d["jobs"]) if items else None)
    if errors:
        if not json_out:
            for e in errors:
                fail(str(e))
            if jobs:
                fail(f"{len(errors)} spec(s) were not submitted; the other {len(jobs)} were. "
                     "Fix them and submit the file again with --dedup to skip the rest.")
        raise typer.Exit(2)


# --- looking at jobs ---------------------------------------------------------------------

def queue(
    state: list[str] = typer.Option(None, "--state", help="only jobs in this state (repeatable)"),
    user: str = typer.Option(None, help="only this user's jobs"),
    all_: bool = typer.Option(False, "--all", "-a", help="include finished jobs"),
    limit: int = typer.Option(200, help="at most this many jobs (newest first)", min=1),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """The queue: running and waiting jobs (with why they wait); --all adds finished ones."""
    with run_cli(json_out=json_out):
        states = list(state) if state else (None if all_ else ACTIVE_STATES)
        with client() as c:
            jobs = queue_order(c.jobs(states=states, user=user, limit=limit))
        empty = "the queue is empty" + ("" if all_ or state else
                                        " (`rota queue --all` shows finished jobs)")
        emit(jobs, json_out, lambda js: queue_table(js) if js else empty)


def _spec_lines(spec: dict[str, Any]) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    cmd = spec["command"]
    add_row(t, "command", cmd[0] if spec.get("shell") else shlex.join(cmd))
    for key, value in spec.items():
        if key == "gpus":
            add_row(t, key, fmt_gpus(value))
            continue
        if key in ("command", "name") or value in (None, False, [], {}, "none"):
            continue
        if key.startswith("retry_backoff") and not spec.get("retries"):
            continue
        if key in ("grace", "retry_backoff", "retry_backoff_max", "time_limit"):
            value = format_duration(value)
        elif key == "gpu_mem":
            value = format_memory(value)
        elif key == "env":
            value = " ".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        add_row(t, key, str(value))
    return t


def _attempts_table(attempts: list[dict[str, Any]]) -> Table:
    t = Table(title="attempts", title_justify="left", header_style="bold")
    for col in ("#", "gpus", "share", "started", "ended", "took", "exit", "outcome",
                "reason", "peak mem", "backend", "pid/session"):
        t.add_column(col, overflow="fold")
    now = time.time()
    for a in attempts:
        took = (a["ended_at"] or now) - a["started_at"] if a.get("started_at") else None
        exit_text = (str(a["exit_code"]) if a.get("exit_code") is not None
                     else f"sig {a['signal']}" if a.get("signal") else "-")
        who = a.get("session") or (str(a["pid"]) if a.get("pid") else "-")
        add_row(t, str(a["number"]), ",".join(map(str, a.get("gpus") or [])) or "-",
                  f"{a['fraction']:g}", fmt_time(a.get("started_at"), short=True),
                  fmt_time(a.get("ended_at"), short=True), format_duration(took), exit_text,
                  a.get("outcome") or "running", a.get("reason") or "",
                  format_memory(a["peak_gpu_mem"]) if a.get("peak_gpu_mem") else "-",
                  a.get("backend") or "", who)
    return t


def _events_table(events: list[dict[str, Any]]) -> Table:
    t = Table(title="timeline", title_justify="left", header_style="bold")
    for col in ("time", "event", "state", "message"):
        t.add_column(col, overflow="fold")
    for e in events:
        move = f"{e['from'] or ''} -> {e['to']}" if e.get("to") else ""
        add_row(t, fmt_time(e["ts"], short=True), e["kind"], move, e.get("message") or "")
    return t


def render_job(job: dict[str, Any]) -> Group:
    head = Text.assemble((f"job {job['id']}", "bold"), f"  {job['name']}  ",
                         _styled_state(job["state"]))
    facts = (f"user {job['user']}, priority {job['priority']}, gpus {fmt_gpus(job['gpus'])}"
             + (f" on {','.join(map(str, job['gpu_indices']))}" if job.get("gpu_indices")
                else "")
             + f", source {job['source']}, submitted {fmt_time(job['created_at'])}")
    parts: list[Any] = [head, Text(facts)]
    if job.get("reason"):
        parts.append(Text.assemble(("waits: ", "bold yellow"), job["reason"]["message"]))
    if job.get("end_reason") and job["state"] not in ("pending", "held", "running"):
        parts.append(Text.assemble(("ended: ", "bold"), job["end_reason"]))
    parts += _tracking_lines(job.get("tracking") or {})
    parts += ["", _spec_lines(job["spec"])]
    if job.get("attempts_detail"):
        parts += ["", _attempts_table(job["attempts_detail"])]
    if job.get("events"):
        parts += ["", _events_table(job["events"])]
    return Group(*parts)


def _tracking_lines(t: dict[str, Any]) -> list[Text]:
    """Where the job's experiment-tracker runs are."""
    out = []
    ml = t.get("mlflow")
    if ml:
        if "run_id" in ml:
            where = ml.get("url") or f"experiment {ml['experiment']!r} in {ml['uri']}"
            out.append(Text.assemble(("MLflow: ", "bold"), f"run {ml['run_id']}, {where}"))
        elif "error" in ml:
            out.append(Text.assemble(("MLflow: ", "bold red"), ml["error"]))
        else:
            out.append(Text.assemble(("MLflow: ", "bold"), "the run is being created"))
    wb = t.get("wandb")
    if wb:
        where = wb.get("url") or (f"run {wb['run_id']} in project {wb['project']}"
                                  + (f" of {wb['entity']}" if wb.get("entity") else ""))
        if wb.get("offline_dir"):
            where += f" (offline: `wandb sync {wb['offline_dir']}` uploads it)"
        out.append(Text.assemble(("W&B: ", "bold"), where))
    return out


def show(job_id: int = typer.Argument(..., metavar="JOB"),
         json_out: bool = typer.Option(False, "--json")) -> None:
    """Everything about one job: spec, state, why it waits, attempts and timeline."""
    with run_cli(json_out=json_out), client() as c:
        job = c.job(job_id)
        job["events"] = c.events(job_id)
        emit(job, json_out, render_job)


def why(job_id: int = typer.Argument(..., metavar="JOB"),
        json_out: bool = typer.Option(False, "--json")) -> None:
    """Why a job waits (or what it is doing)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.why(job_id), json_out,
             lambda d: Text(f"job {d['id']} ({d['state']}): {d['message']}"))


def logs(job_id: int = typer.Argument(..., metavar="JOB"),
         follow: bool = typer.Option(False, "--follow", "-f", help="follow until the job ends"),
         json_out: bool = typer.Option(False, "--json",
                                       help="JSON ({data, next}; with -f one object a chunk)"),
         ) -> None:
    """Print a job's output (stdout and stderr)."""
    with run_cli(json_out=json_out), client() as c:
        if follow:
            for chunk in c.follow_logs(job_id):
                _write_chunk(chunk, json_out)
            return
        offset, parts = 0, []
        while True:
            got = c.logs(job_id, offset)
            if not got["data"]:
                break
            parts.append(got["data"])
            offset = got["next"]
        data = "".join(parts)
        if json_out:
            emit({"id": job_id, "data": data, "next": offset}, True, str)
        else:
            sys.stdout.write(data)
            sys.stdout.flush()


def _write_chunk(chunk: bytes, json_out: bool) -> None:
    if json_out:
        import json

        sys.stdout.write(json.dumps({"data": chunk.decode("utf-8", "replace")}) + "\n")
        sys.stdout.flush()
        return
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        sys.stdout.flush()
        out.write(chunk)
        out.flush()
    else:  # pragma: no cover - a text-only stdout
        sys.stdout.write(chunk.decode("utf-8", "replace"))
        sys.stdout.flush()


def wait_exit_code(res: dict[str, Any]) -> int:
    """0 completed; the job's code when it has one; 124 when the wait timed out; else 1."""
    if not res.get("done"):
        return 124
    if res["state"] == "completed":
        return 0
    code = res.get("exit_code")
    if isinstance(code, int) and 0 < code < 256:
        return code
    return 1


def wait(job_id: int = typer.Argument(..., metavar="JOB"),
         timeout: float = typer.Option(None, help="give up after this many seconds (exit 124)"),
         json_out: bool = typer.Option(False, "--json")) -> None:
    """Block until a job ends; exit with its exit code."""
    with run_cli(json_out=json_out):
        if timeout is not None and timeout <= 0:
            raise InvalidSpec("--timeout: must be more than 0 seconds", field="timeout")
        with client() as c:
            res = c.wait(job_id, timeout=timeout)
        code = wait_exit_code(res)

        def human(d: dict[str, Any]) -> Text:
            if not d["done"]:
                return Text(f"job {d['id']} is still {d['state']} after {timeout:g}s")
            extra = f" (exit code {d['exit_code']})" if d.get("exit_code") is not None else ""
            return Text(f"job {d['id']} {d['state']}{extra}")

        emit({**res, "cli_exit": code}, json_out, human)
    raise typer.Exit(code)


# --- changing jobs -----------------------------------------------------------------------

def _each(job_ids: list[int], json_out: bool, act: Callable[[Client, int], dict[str, Any]],
          done: Callable[[dict[str, Any]], str]) -> None:
    apply_each(job_ids, "id", json_out, act, done)


def cancel(job_ids: list[int] = typer.Argument(..., metavar="JOB..."),
           json_out: bool = typer.Option(False, "--json")) -> None:
    """Cancel jobs (a running one gets SIGTERM, then SIGKILL after its grace period)."""
    def done(r: dict[str, Any]) -> str:
        if r["state"] == "cancelled":
            return f"cancelled job {r['id']}"
        return f"job {r['id']} was {r['state']}: stopping it (SIGTERM, SIGKILL after its grace)"
    _each(job_ids, json_out, lambda c, j: c.cancel(j), done)


def hold(job_ids: list[int] = typer.Argument(..., metavar="JOB..."),
         json_out: bool = typer.Option(False, "--json")) -> None:
    """Hold pending jobs: they stay queued but do not start."""
    _each(job_ids, json_out, lambda c, j: c.hold(j), lambda r: f"held job {r['id']}")


def release(job_ids: list[int] = typer.Argument(..., metavar="JOB..."),
            json_out: bool = typer.Option(False, "--json")) -> None:
    """Release held jobs: they may start again."""
    _each(job_ids, json_out, lambda c, j: c.release(j), lambda r: f"released job {r['id']}")


def preempt(job_ids: list[int] = typer.Argument(..., metavar="JOB..."),
            json_out: bool = typer.Option(False, "--json")) -> None:
    """Stop running jobs through the stop handshake and queue them again in their place
    (they resume from their newest checkpoint)."""
    _each(job_ids, json_out, lambda c, j: c.preempt(j),
          lambda r: f"preempting job {r['id']}: it saves and stops, then waits in its place")


def requeue(job_ids: list[int] = typer.Argument(..., metavar="JOB..."),
            json_out: bool = typer.Option(False, "--json")) -> None:
    """Run jobs again: a running one is stopped and queued again, an ended one is
    submitted anew (a new job with the same spec)."""
    def done(r: dict[str, Any]) -> str:
        new = r["job"]["id"]
        return (f"job {r['requeued']} is stopping and will run again" if new == r["requeued"]
                else f"job {r['requeued']} submitted again as job {new}")
    _each(job_ids, json_out, lambda c, j: c.requeue(j), done)


# --- sessions ----------------------------------------------------------------------------

def attach(job_id: int = typer.Argument(..., metavar="JOB"),
           json_out: bool = typer.Option(False, "--json",
                                         help="print the attach argv instead of running it")
           ) -> None:
    """Attach to a running job's tmux/screen session."""
    with run_cli(json_out=json_out), client() as c:
        argv = c.attach_argv(job_id)
    if json_out:
        emit({"id": job_id, "argv": argv}, True, str)
        return
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        fail(f"cannot run {shlex.join(argv)}: {e.strerror or e}")
        raise typer.Exit(1) from None


def sessions(json_out: bool = typer.Option(False, "--json")) -> None:
    """Running jobs you can attach to (`rota attach JOB`)."""
    def human(rows: list[dict[str, Any]]) -> Any:
        if not rows:
            return "no attachable sessions (submit with --session tmux or --session screen)"
        t = Table(header_style="bold")
        for col in ("job", "session", "backend", "gpus", "attach with"):
            t.add_column(col, overflow="fold")
        for s in rows:
            add_row(t, str(s["job"]), s["session"], s["backend"],
                      ",".join(map(str, s["gpus"])) or "-", shlex.join(s["attach"] or []))
        return t
    with run_cli(json_out=json_out), client() as c:
        emit(c.sessions(), json_out, human)


# --- the watched jobs file ---------------------------------------------------------------

def _append_line(path: Path, line: str) -> int:
    """Append one line (on a line of its own); return its line number."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        f.seek(0)
        data = f.read()
        prefix = b"\n" if data and not data.endswith(b"\n") else b""
        f.write(prefix + line.encode("utf-8") + b"\n")
    return data.count(b"\n") + (1 if prefix else 0) + 1


def add(
    priority: int = typer.Argument(..., help="lower number runs first"),
    script: str = typer.Argument(..., help="script path (.py runs with python, .sh with bash)"),
    args: list[str] = typer.Argument(None, help="the script's arguments (after `--`)"),
    conda: str = typer.Option(None, help="conda environment"),
    allowed_gpus: str = typer.Option(None, "--allowed-gpus", help="e.g. 0-3 or 4,5,6,7"),
    jobs_file: Path = typer.Option(None, "--jobs-file",
                                   help="the jobs file (default: the one the daemon watches)"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Append a line to the watched jobs file: `rota add 1 train.py -- --lr 0.1`."""
    with run_cli(json_out=json_out):
        settings = load()
        if not os.path.isabs(script) and os.path.exists(script):
            script = os.path.abspath(script)  # the daemon runs it from its own directory
        line = format_jobs_line(priority, script, conda, list(args or []), allowed_gpus)
        c = Client(settings.socket_path)
        watched: str | None = None
        with contextlib.suppress(DaemonUnavailable):
            watched = str(c.request("GET", "/v1/jobsfile")["path"])
        path = Path(jobs_file).absolute() if jobs_file else Path(watched or
                                                                   settings.jobs_file_path)
        number = _append_line(path, line)
        out: dict[str, Any] = {"path": str(path), "line": number, "text": line,
                               "daemon": watched is not None, "job": None, "error": None}
        notes: list[str] = [f"added line {number} to {path}: {line}"]
        if watched is None:
            notes.append("no daemon is running; it will queue the line when it starts "
                         "(`rota server --detach`)")
        elif Path(watched) != path:
            notes.append(f"the daemon watches {watched}, not this file")
        else:
            status = c.reload_jobs_file()
            mine = [e for e in status.get("errors", []) if e["line"] == number]
            source = f"{path}:{number}"
            for jid in status.get("queued", []):
                if c.job(jid)["source"] == source:
                    out["job"] = jid
            if mine:
                out["error"] = mine[0]["message"]
                notes.append(f"the daemon rejected it: {mine[0]['message']}")
            elif out["job"] is not None:
                notes.append(f"queued as job {out['job']}")
            else:
                notes.append("not queued again: an identical job is already queued or done")
        c.close()
        emit(out, json_out, lambda _: Text("\n".join(notes)))
        if out["error"]:
            raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Attach the job commands to the `rota` app."""
    app.command(context_settings=_CMD_SETTINGS)(submit)
    app.command()(queue)
    app.command()(show)
    app.command()(why)
    app.command()(logs)
    app.command()(wait)
    app.command()(cancel)
    app.command()(hold)
    app.command()(release)
    app.command()(preempt)
    app.command()(requeue)
    app.command()(attach)
    app.command()(sessions)
    app.command()(add)
