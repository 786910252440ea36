"""`rota submit`: one job, a sweep, a template, or a YAML/JSON file of specs (the file:
rota.cli.submit_file).

The daemon checks every spec (and names the bad field); here the options become a spec,
a sweep becomes one spec per combination, and an error about item i of a batch names
the job (in a file: its line).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable

from rota.cli import lazy_typer as typer
from rota.cli.common import client, emit, run_cli, warn
from rota.cli.submitted import JOB_ITEM, submitted_text
from rota.errors import InvalidSpec
from rota.units import MEMORY_HELP

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from rota.answers import SubmitAnswer
    from rota.client import RawClient as Client

GPU_TYPE_HELP = ("GPU model, matched against the GPU's name (A100, H100, ...); on a cluster "
                 "pool the engine's GPU type")
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


# --- submit ------------------------------------------------------------------------------

#: options that go into the spec as they are given (None: not given)
_AS_GIVEN = ("name", "gpus", "gpu_type", "llm", "priority", "allowed_gpus", "conda", "retries",
             "session", "checkpoint_dir", "stop_signal", "tensorboard_dir", "project", "pool",
             "tier", "image", "cpus", "nodes", "procs_per_node", "model", "model_dir")
#: flags that go into the spec when given; (spec field, option) of repeatable options
_FLAGS = ("hold", "cuda_arg", "shell", "preemptible", "network")
_LISTS = (("metric_patterns", "metric_pattern"), ("tags", "tag"), ("outputs", "output"),
          ("datasets", "dataset"))
_TRACKERS = ("mlflow", "mlflow_experiment", "wandb", "wandb_project", "wandb_entity")


def build_raw(command: list[str], opts: dict[str, Any]) -> dict[str, Any]:
    """The spec fields the user set (the daemon fills in the rest); ``opts`` holds
    :func:`submit`'s options by parameter name (``after`` is resolved later)."""
    if not command:
        raise InvalidSpec("no command given: put it after `--`, like "
                          "`rota submit --gpus 1 -- python train.py`", field="command")
    if opts["shell"] and len(command) != 1:
        raise InvalidSpec("with --shell give the command as ONE quoted string, like "
                          "`rota submit --shell -- 'python a.py | tee out.txt'`",
                          field="command")
    cwd = opts["cwd"]
    raw: dict[str, Any] = {"command": list(command),
                           "cwd": os.path.abspath(cwd) if cwd else os.getcwd()}
    raw.update(_env_fields(opts["env"] or [], opts["secret_env"] or []))
    raw.update(_unit_fields(opts))
    raw.update({k: opts[k] for k in _AS_GIVEN if opts[k] is not None})
    raw.update({k: True for k in _FLAGS if opts[k]})
    raw.update({field: list(opts[o]) for field, o in _LISTS if opts[o]})
    if opts["workspace"] is not None:  # given: asked for (refused where a pool has none)
        raw["workspace"] = opts["workspace"]
    raw.update(tracker_fields({k: opts[k] for k in _TRACKERS}, opts["secret"] or []))
    if opts["mount_file"]:
        raw["files"] = mounted_files(opts["mount_file"])
    return raw


def mounted_files(items: Iterable[str]) -> dict[str, str]:
    """--mount-file PATH=LOCAL: each local file's text by the path the job reads it at."""
    from pathlib import Path

    out: dict[str, str] = {}
    for path, local in _parse_kv(items, "--mount-file").items():
        try:
            out[path] = Path(local).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidSpec(f"--mount-file {path}={local}: cannot read {local} as text: "
                              f"{e}", field="files") from None
    return out


def _env_fields(env: list[str], secret_env: list[str]) -> dict[str, Any]:
    """--env and --secret-env: one environment, the secret keys named (never shown)."""
    plain = _parse_kv(env, "--env")
    secrets = _parse_kv(secret_env, "--secret-env", secret=True)
    out: dict[str, Any] = {"env": {**plain, **secrets}} if plain or secrets else {}
    if secrets:
        out["secret_env"] = sorted(secrets)
    return out


def _unit_fields(opts: dict[str, Any]) -> dict[str, Any]:
    """Memory and durations as a person writes them, in bytes and seconds."""
    from rota.units import parse_duration, parse_memory

    out: dict[str, Any] = {}
    for field in ("gpu_mem", "memory"):
        if opts[field] is not None:
            out[field] = parse_memory(opts[field])
    if opts["time_limit"] is not None:
        out["time_limit"] = parse_duration(opts["time_limit"])
    if opts["grace"] is not None:
        out["grace"] = _duration(opts["grace"], "grace")
    if opts["retry_backoff"] is not None:
        out["retry_backoff"] = _duration(opts["retry_backoff"], "retry_backoff")
        if out["retry_backoff"] > 600:
            out["retry_backoff_max"] = out["retry_backoff"]
    return out


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


def post_jobs(c: Client, raws: list[dict[str, Any]], *, idempotency_key: str | None = None,
              dedup: bool = False, force: bool = False) -> SubmitAnswer:
    """POST /v1/jobs; the whole answer (``jobs``, and ``warnings`` when there are any)."""
    return c.submit_full(raws, idempotency_key=idempotency_key, dedup=dedup, force=force)


def submit(
    command: list[str] = typer.Argument(None, help="the job's argv (after `--`)"),
    name: str = typer.Option(None, help="a name for the job"),
    gpus: float = typer.Option(None, help="GPUs: 0.5 shares one, 2 takes two whole, 0 = CPU"),
    gpu_mem: str = typer.Option(None, "--gpu-mem", metavar="MEM",
                                help=f"memory needed on each GPU, {MEMORY_HELP}"),
    gpu_type: str = typer.Option(None, "--gpu-type", metavar="TYPE", help=GPU_TYPE_HELP),
    image: str = typer.Option(None, "--image", help="run it in a container of this image "
                              "(Docker here, on Rota's GPUs; docs/containers.md)"),
    network: bool = typer.Option(False, "--network",
                                 help="give its container a network (none by default)"),
    cpus: float = typer.Option(None, "--cpus", help="CPUs its container or cluster job may "
                               "use"),
    memory: str = typer.Option(None, "--memory", metavar="MEM",
                               help=f"memory its container or cluster job may use, "
                                    f"{MEMORY_HELP}"),
    nodes: int = typer.Option(None, "--nodes", help="machines it spans, on a cluster pool "
                              "(gpus, cpus, memory are per node)"),
    procs_per_node: int = typer.Option(None, "--procs-per-node",
                                       help="torchrun processes per node (default: its GPUs)"),
    mount_file: list[str] = typer.Option(
        None, "--mount-file", metavar="PATH=LOCAL",
        help="the text of the file LOCAL, read-only at PATH in its pod (Kubernetes), "
             "repeatable"),
    model: str = typer.Option(None, "--model", metavar="URI",
                              help="a model its pod fetches first (runs:/, models:/, s3://) "
                                   "into --model-dir (ROTA_MODEL_DIR)"),
    model_dir: str = typer.Option(None, "--model-dir", help="where the model lands (/models)"),
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
    output: list[str] = typer.Option(
        None, "--output", metavar="DIR",
        help="a folder (relative to --cwd) saved with its manifest when the job ends: "
             "`rota artifacts JOB`; repeatable"),
    dataset: list[str] = typer.Option(
        None, "--dataset", metavar="NAME[:VERSION]",
        help="a registered dataset it reads, read-only at $ROTA_DATASET_<NAME> before it "
             "starts (`rota dataset list`); repeatable"),
    workspace: bool = typer.Option(
        None, "--workspace/--no-workspace",
        help="--workspace: it must have its workspace (ROTA_WORKSPACE), refused on a pool "
             "that gives none; --no-workspace: it needs none. Neither: it gets one where its "
             "pool gives one"),
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
    pool: str = typer.Option(None, "--pool",
                             help="where it runs: local, or a cluster rota.toml declares "
                                  "(`rota pools`; default: default_pool)"),
    tier: str = typer.Option(None, "--tier",
                             help="the tier it runs and is charged on (`rota tiers`; "
                                  "default: the cheapest it fits)"),
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
    opts = dict(locals())  # every option by name, read by the helpers below
    with run_cli(json_out=json_out):
        if file is not None:
            _submit_file(opts)
        elif template is not None:
            _submit_template(opts)
        else:
            _submit_command(opts)


#: what --file goes with (the rest of the spec comes from the file)
_WITH_FILE = {"file", "dedup", "idempotency_key", "force", "json_out", "template", "set_"}


def _submit_file(opts: dict[str, Any]) -> None:
    from pathlib import Path

    from rota.cli.lazy_typer import params_of
    from rota.cli.submit_file import submit_file

    given = ["a command" if p.kind == "argument"
             else (p.decls[0] if p.decls else f"--{name.replace('_', '-')}").split("/")[0]
             for name, p in params_of(submit)
             if name not in _WITH_FILE and _given(opts[name])]
    if given:
        raise InvalidSpec(f"--file takes the whole spec from the file; do not combine "
                          f"it with {', '.join(given)}", field="file")
    submit_file(Path(opts["file"]), json_out=opts["json_out"], dedup=opts["dedup"],
                idempotency_key=opts["idempotency_key"], force=opts["force"])


def _given(value: Any) -> bool:
    return value is not None and value is not False and value != []  # --gpus 0 is given


def _submit_command(opts: dict[str, Any]) -> None:
    """One job from the options and the command, or one per --sweep combination."""
    if opts["set_"]:
        raise InvalidSpec("--set gives a template's options: use it with --template",
                          field="set")
    raw = build_raw(opts["command"] or [], opts)
    with client() as c:
        if opts["after"]:
            from rota.cli.job_refs import resolve

            raw["after"] = [resolve(c, ref) for ref in opts["after"]]
        raws = expand(raw, opts["sweep"] or [])
        try:
            answer = post_jobs(c, raws, idempotency_key=opts["idempotency_key"],
                               dedup=opts["dedup"], force=opts["force"])
        except InvalidSpec as e:
            raise _named_item(e, raws) from None
    _emit_answer(answer, opts["json_out"])


def _named_item(e: InvalidSpec, raws: list[dict[str, Any]]) -> InvalidSpec:
    """``jobs[3]: ...`` -> ``job train[lr=1e-3,seed=2]: ...`` (no prefix for a lone job)."""
    m = JOB_ITEM.match(str(e))
    if m is None or int(m.group(1)) >= len(raws):
        return e
    rest = str(e)[m.end():]
    if len(raws) > 1:
        rest = f"job {raws[int(m.group(1))].get('name')}: {rest}"
    return InvalidSpec(rest, field=e.field)


def _emit_answer(answer: SubmitAnswer, json_out: bool) -> None:
    """The jobs (and the daemon's warnings, on stderr: a pipe reading ids is not confused)."""
    for w in answer.get("warnings", []):
        warn(w)
    shown: SubmitAnswer = {"jobs": answer["jobs"]}
    if answer.get("warnings"):
        shown["warnings"] = answer["warnings"]
    emit(shown, json_out, lambda d: submitted_text(d["jobs"]))


def _submit_template(opts: dict[str, Any]) -> None:
    """The template's spec (--set gives its options), with the spec options given."""
    from rota.templates import get
    from rota.units import parse_duration

    time_limit = opts["time_limit"]
    overrides = {"name": opts["name"], "priority": opts["priority"], "gpus": opts["gpus"],
                 "gpu_type": opts["gpu_type"],
                 "project": opts["project"], "pool": opts["pool"], "tier": opts["tier"],
                 "hold": opts["hold"] or None,
                 "tags": opts["tag"] or None,
                 "time_limit": parse_duration(time_limit) if time_limit else None,
                 **tracker_fields({k: opts[k] for k in _TRACKERS}, opts["secret"] or [])}
    name, command = opts["template"], opts["command"] or []
    if command:
        raise InvalidSpec(f"--template {name} makes the command; give its options with --set, "
                          f"not {shlex.join(command)!r}", field="command")
    raw = get(name).spec(opts["set_"] or [])
    raw.update({k: v for k, v in overrides.items() if v is not None})
    with client() as c:
        answer = post_jobs(c, [raw], force=opts["force"])
    _emit_answer(answer, opts["json_out"])
