"""`rota submit`: one job, a sweep, a template, or a YAML/JSON file of specs.

The daemon checks every spec (and names the bad field); here the options become a spec,
a sweep becomes one spec per combination, and an error about item i of a batch is mapped
back to its line in the file.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rota.cli import lazy_typer as typer
from rota.cli.common import Plain, client, emit, run_cli, warn
from rota.cli.fmt import fail
from rota.errors import InvalidSpec, RotaError
from rota.units import MEMORY_HELP

if TYPE_CHECKING:
    from pathlib import Path

    from rota.client import RawClient as Client
    from rota.jobsfile import JobsFileError

_JOB_ITEM = re.compile(r"^jobs\[(\d+)\]: ")
#: specs per request from a file: the daemon starts jobs between requests, so a file's
#: first jobs run while the rest is sent. 2,000 `true` jobs straight to the daemon, first
#: submit to last end, median of 4 on fresh daemons: 100 a request 3.4 s, 200 3.2 s, 25
#: 4.1 s, all in one 3.8 s; on a daemon holding 20,000 ended jobs, 100 a request 6.6-6.9 s,
#: 200 9.2-10.8 s, one 13-16 s. (One request also takes at most 10,000.)
FILE_CHUNK = 100


def chunks(n: int, *, whole: bool = False) -> list[tuple[int, int]]:
    """(start, end) of the requests that send ``n`` specs (one when ``whole``)."""
    size = max(n, 1) if whole else FILE_CHUNK
    return [(start, min(n, start + size)) for start in range(0, n, size)]


FORCE_HELP = "accept a job this machine cannot run now; it waits until the GPUs change"

# Options come first; the first word that is not an option starts the job's own argv, so
# `rota submit --gpus 1 python train.py --gpus 3` keeps `--gpus 3` for the job (`--` works too).
CMD_SETTINGS = {"allow_interspersed_args": False}


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
    from rota.units import parse_duration

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
    from rota.units import parse_duration, parse_memory

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
    """One raw spec per sweep combination (the spec is checked here first; a single job
    is checked by the daemon, which names the bad field, so submit loads no spec model)."""
    if not sweeps:
        return [raw]
    from rota.core.spec import parse_spec
    from rota.core.sweep import expand_sweep, parse_sweep_arg

    spec = parse_spec(raw)
    grid = [parse_sweep_arg(s) for s in sweeps]
    return [{**raw, "command": s.command, "name": s.name} for s in expand_sweep(spec, grid)]


def read_jobs_file(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[JobsFileError]]:
    """Specs from a YAML/JSON (or line-format) file: (line, raw spec) pairs and bad items."""
    from rota.jobsfile import fmt_for_path, parse_jobs_text

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


def post_jobs(c: Client, raws: list[dict[str, Any]], *, idempotency_key: str | None = None,
              dedup: bool = False, force: bool = False) -> dict[str, Any]:
    """POST /v1/jobs; the whole answer (``jobs``, and ``warnings`` when there are any)."""
    return c.submit_full(raws, idempotency_key=idempotency_key, dedup=dedup, force=force)


def submit_items(c: Client, items: list[tuple[int, dict[str, Any]]], source: str, *,
                 idempotency_key: str | None, dedup: bool, force: bool = False,
                 ) -> tuple[dict[str, Any], list[JobsFileError]]:
    """Submit the good items; an item the daemon rejects becomes an error on its line (the
    daemon names it ``jobs[i]: ``), and the rest are sent again."""
    from rota.jobsfile import JobsFileError

    errors: list[JobsFileError] = []
    while items:
        try:
            answer = post_jobs(c, [raw for _, raw in items], idempotency_key=idempotency_key,
                               dedup=dedup, force=force)
            return answer, errors
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
    return {"jobs": []}, errors


def _submitted_text(jobs: list[dict[str, Any]]) -> Plain:
    if not jobs:
        return Plain("nothing submitted: an identical job is already queued or done (--dedup)")
    if len(jobs) == 1:
        return Plain(f"submitted job {jobs[0]['id']}")
    lines = [f"submitted {len(jobs)} jobs: {_job_ids(jobs)}"]
    lines += [f"  {j['id']}  {j['name']}" for j in jobs]
    return Plain("\n".join(lines))


def submit(
    command: list[str] = typer.Argument(None, help="the job's argv (after `--`)"),
    name: str = typer.Option(None, help="a name for the job"),
    gpus: float = typer.Option(None, help="GPUs: 0.5 shares one, 2 takes two whole, 0 = CPU"),
    gpu_mem: str = typer.Option(None, "--gpu-mem", metavar="MEM",
                                help=f"memory needed on each GPU, {MEMORY_HELP}"),
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
    after: list[str] = typer.Option(None, "--after", metavar="JOB",
                                    help="a job (id or name) that must complete first, "
                                         "repeatable"),
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
    project: str = typer.Option(None, "--project",
                                help="the project it counts toward (reports, W&B's default)"),
    wandb_project: str = typer.Option(None, "--wandb-project",
                                      help="W&B project (default: --project, else rota)"),
    wandb_entity: str = typer.Option(None, "--wandb-entity", help="W&B entity (team or user)"),
    secret: list[str] = typer.Option(
        None, "--secret",
        help="VAR or VAR=NAME: your stored secret NAME in its environment as VAR, repeatable"),
    template: str = typer.Option(None, "--template",
                                 help="a ready-made job (`rota templates` lists them)"),
    set_: list[str] = typer.Option(None, "--set", help="a template option KEY=VALUE, repeatable"),
    dedup: bool = typer.Option(False, "--dedup", help="skip jobs identical to a queued/done one"),
    idempotency_key: str = typer.Option(None, "--idempotency-key",
                                        help="a retried submit with this key adds nothing"),
    file: str = typer.Option(None, "--file", "-f", metavar="FILE",
                             help="specs from a YAML/JSON file (or a jobs.txt-style file)"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
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
                      "--secret": secret, "--project": project}
            given = [k for k, v in others.items()
                     if v is not None and v is not False and v != []]
            if given:
                raise InvalidSpec(f"--file takes the whole spec from the file; do not combine "
                                  f"it with {', '.join(given)}", field="file")
            from pathlib import Path

            _submit_file(Path(file), json_out=json_out, dedup=dedup,
                         idempotency_key=idempotency_key, force=force)
            return
        trackers = {"mlflow": mlflow, "mlflow_experiment": mlflow_experiment, "wandb": wandb,
                    "wandb_project": wandb_project, "wandb_entity": wandb_entity}
        if template is not None:
            from rota.units import parse_duration

            _submit_template(template, set_ or [], command or [], json_out=json_out,
                             force=force,
                             overrides={"name": name, "priority": priority, "gpus": gpus,
                                        "project": project,
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
                        after=[], hold=hold, session=session, cuda_arg=cuda_arg,
                        shell=shell, tags=tag or [], checkpoint_dir=checkpoint_dir,
                        metric_patterns=metric_pattern or [], preemptible=preemptible,
                        stop_signal=stop_signal, tensorboard_dir=tensorboard_dir,
                        trackers=trackers, secret_refs=secret or [])
        if project is not None:
            raw["project"] = project
        with client() as c:
            if after:
                from rota.cli.job_refs import resolve

                raw["after"] = [resolve(c, ref) for ref in after]
            raws = expand(raw, sweep or [])
            try:
                answer = post_jobs(c, raws, idempotency_key=idempotency_key, dedup=dedup,
                                   force=force)
            except InvalidSpec as e:
                raise _named_item(e, raws) from None
        _emit_answer(answer, json_out)


def _named_item(e: InvalidSpec, raws: list[dict[str, Any]]) -> InvalidSpec:
    """``jobs[3]: ...`` -> ``job train[lr=1e-3,seed=2]: ...`` (no prefix for a lone job)."""
    m = _JOB_ITEM.match(str(e))
    if m is None or int(m.group(1)) >= len(raws):
        return e
    rest = str(e)[m.end():]
    if len(raws) > 1:
        rest = f"job {raws[int(m.group(1))].get('name')}: {rest}"
    return InvalidSpec(rest, field=e.field)


def _emit_answer(answer: dict[str, Any], json_out: bool) -> None:
    """The jobs (and the daemon's warnings, on stderr: a pipe reading ids is not confused)."""
    for w in answer.get("warnings", []):
        warn(w)
    emit({"jobs": answer["jobs"],
          **({"warnings": answer["warnings"]} if answer.get("warnings") else {})},
         json_out, lambda d: _submitted_text(d["jobs"]))


def _submit_template(name: str, sets: list[str], command: list[str], *, json_out: bool,
                     force: bool, overrides: dict[str, Any]) -> None:
    from rota.templates import get

    if command:
        raise InvalidSpec(f"--template {name} makes the command; give its options with --set, "
                          f"not {shlex.join(command)!r}", field="command")
    raw = get(name).spec(sets)
    raw.update({k: v for k, v in overrides.items() if v is not None})
    with client() as c:
        answer = post_jobs(c, [raw], force=force)
    _emit_answer(answer, json_out)


def _submit_file(path: Path, *, json_out: bool, dedup: bool,
                 idempotency_key: str | None, force: bool) -> None:
    from rota.jobsfile import JobsFileError

    items, errors = read_jobs_file(path)
    jobs: list[dict[str, Any]] = []
    if items:
        warnings: list[str] = []
        with client() as c:
            # a key names one request: with one, the file goes whole (one retryable unit)
            for start, end in chunks(len(items), whole=idempotency_key is not None):
                try:
                    answer, rejected = submit_items(c, items[start:end], str(path),
                                                    force=force, dedup=dedup,
                                                    idempotency_key=idempotency_key)
                except RotaError:
                    if jobs:
                        warn(f"{len(jobs)} job(s) were submitted before this error: "
                             f"{_job_ids(jobs)}")
                    raise
                jobs += answer["jobs"]
                errors += rejected
                warnings += [w for w in answer.get("warnings", []) if w not in warnings]
        for w in warnings:
            warn(w)
        errors.sort(key=lambda e: e.line)
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


