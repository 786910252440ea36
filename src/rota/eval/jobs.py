"""An evaluation config as ordinary Rota jobs (pure: the config in, job specs out).

Where the pool fetches models itself (Kubernetes: an init container), one job does both:
the config travels as a file mounted read-only in the pod, the model as the job's ``model``.
The local files the harness reads (``harness.task_dir``, heldout's data files: see
:func:`harness_paths`) travel beside it in the job's ``files`` (a ConfigMap), gathered by the
submitter (rota.eval.submission.pod_files), and the pod's copy of the config names them
where they are mounted; the runner writes its output in the pod's scratch volume.
Elsewhere a model or adapter that must be fetched (an MLflow artifact, ``runs:/``,
``models:/``, ``s3://``) gets a fetch job of its own, on no GPU, and the evaluation runs
after it (``after``) on the GPUs, reading them from the folders the fetch filled
(``ROTA_MODEL_DIR``, ``ROTA_ADAPTER_DIR``); the config travels in the environment
(``ROTA_EVAL_CONFIG``). A local folder or a Hugging Face name needs no fetch. (In a pod the
init container fetches the model only; the runner fetches an adapter into the scratch
volume.)

Both jobs run ``python -m rota.eval.run`` (rota.eval.run): the program that fetches, runs
the harness, fails when it must, and reports the metrics.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

import yaml

from rota.eval.config import EvalConfig, ModelSource

CONFIG_PATH = "/etc/rota/eval/config.yaml"  # where a pod reads the config
POD_FILES = "/etc/rota/eval/files"  # where a pod reads the harness's files
#: the runner's output folder in a pod: in its scratch volume (emptyDir, mounted at
#: rota.backends.kubernetes.pod.SCRATCH), writable whatever the image
POD_OUT = "/scratch/eval"
CONFIG_ENV = "ROTA_EVAL_CONFIG"
#: the config file's folder: relative paths in ROTA_EVAL_CONFIG are its (rota.eval.paths)
CONFIG_DIR_ENV = "ROTA_EVAL_CONFIG_DIR"
OUT_ENV = "ROTA_EVAL_OUT"  # the runner's output folder (rota.eval.run --out)
MODEL_DIR_ENV = "ROTA_MODEL_DIR"
ADAPTER_DIR_ENV = "ROTA_ADAPTER_DIR"
#: the MLflow server the model is fetched from; MLFLOW_TRACKING_URI is Rota's, for results
MODEL_TRACKING_ENV = "ROTA_MODEL_TRACKING_URI"
FETCHED = ("runs:/", "models:/", "mlflow-artifacts:", "s3://")  # what a fetch step gets
EVAL_TAG = "eval"  # an evaluation (and eval:NAME): what `rota eval results` reads
FETCH_TAG = "eval-fetch"  # its model-fetch step (and eval-fetch:NAME): no results


@dataclass(frozen=True)
class Source:
    """Where the config came from, for the run's tags."""

    text: str  # the config file's YAML as written
    git_commit: str | None = None
    git_dirty: bool | None = None
    folder: str | None = None  # the config file's folder (relative paths are read from it)


@dataclass(frozen=True)
class EvalJobs:
    """The specs to submit: ``fetch`` first (if any), then ``evaluate`` after it (the
    submitter sets ``after`` to the fetch job's id)."""

    evaluate: dict[str, Any]
    fetch: dict[str, Any] | None = None


@dataclass(frozen=True)
class HarnessPath:
    """A path on the submitting machine that the harness reads, and where a pod has it."""

    field: str  # the config's field: harness.task_dir, harness.tasks.0
    written: str  # the path as the config writes it
    pod: str  # where the pod mounts it
    folder: bool  # a folder (every file in it goes), else one file


@dataclass(frozen=True)
class PodFiles:
    """The harness's files as a pod gets them: its path in the pod -> text, and the
    config's paths moved (as written -> in the pod)."""

    files: dict[str, str]
    moved: dict[str, str]


def harness_paths(config: EvalConfig) -> list[HarnessPath]:
    """The local paths the harness reads: lm-eval's ``task_dir`` (a folder of task YAMLs
    and their data) and heldout's tasks (JSON-lines files). lm-eval task names and HELM run
    entries are names, not paths; ``harness.args`` are passed as written."""
    h = config.harness
    out = []
    if h.kind == "lm-eval" and h.task_dir:
        out.append(HarnessPath("harness.task_dir", h.task_dir, f"{POD_FILES}/task_dir", True))
    if h.kind == "heldout":
        out += [HarnessPath(f"harness.tasks.{i}", t,
                            f"{POD_FILES}/tasks/{i}/{_file_name(t)}", False)
                for i, t in enumerate(h.tasks)]
    return out


def _file_name(path: str) -> str:
    name = posixpath.basename(path.rstrip("/")) or "data"
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in name)


def pod_config_text(text: str, moved: dict[str, str]) -> str:
    """The config's YAML with the harness's paths moved to where the pod mounts them (its
    comments are not kept; a first line says so)."""
    if not moved:
        return text
    data = yaml.safe_load(text)
    h = data["harness"]
    if h.get("task_dir") in moved:
        h["task_dir"] = moved[h["task_dir"]]
    if h.get("kind") == "heldout":
        h["tasks"] = [moved.get(t, t) for t in h["tasks"]]
    note = ("# the config as submitted, its harness files moved to where this pod mounts "
            "them\n")
    return note + str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def needs_fetch(source: ModelSource) -> bool:
    return source.mlflow is not None or (source.uri or "").startswith(FETCHED)


def fetches(config: EvalConfig) -> bool:
    """Whether the model or its adapter must be fetched before the evaluation (a fetch job
    where the pool does not fetch itself)."""
    adapter = config.model.adapter
    return needs_fetch(config.model) or (adapter is not None and needs_fetch(adapter))


def model_uri(source: ModelSource) -> str:
    """The model as one URI: an MLflow artifact as ``runs:/RUN/PATH``."""
    if source.mlflow is not None:
        return f"runs:/{source.mlflow.run_id}/{source.mlflow.artifact_path.strip('/')}"
    assert source.uri is not None
    return source.uri


def eval_jobs(config: EvalConfig, src: Source, *, pool_engine: str, python: str,
              work_dir: str, pod_files: PodFiles | None = None) -> EvalJobs:
    """The jobs of one evaluation on a pool whose engine is ``pool_engine`` (``local``,
    ``slurm``, ``ray``, ``kubernetes``). ``python``: the interpreter the jobs run
    (``sys.executable`` on this machine, ``python`` in an image); ``work_dir``: a folder the
    jobs share (the fetched model lands in ``work_dir/model``; a cluster's nodes must see
    it); ``pod_files``: on Kubernetes, the harness's files (required when the config has
    :func:`harness_paths`)."""
    env = _env(config, src)
    base = _base(config, pool_engine)
    run = [python, "-m", "rota.eval.run"]
    if pool_engine == "kubernetes":
        if pod_files is None and harness_paths(config):
            raise ValueError("the harness reads local files: gather them (pod_files)")
        pf = pod_files or PodFiles({}, {})
        env[OUT_ENV] = POD_OUT
        spec = {**base, "command": [*run, "--config", CONFIG_PATH],
                "files": {CONFIG_PATH: pod_config_text(src.text, pf.moved), **pf.files},
                "env": env}
        if needs_fetch(config.model):  # the pod's init container fetches it
            spec["model"] = model_uri(config.model)
        return EvalJobs(evaluate=spec)
    env[CONFIG_ENV] = src.text
    if src.folder:
        env[CONFIG_DIR_ENV] = src.folder
    spec = {**base, "command": run, "cwd": work_dir, "env": env}
    if not fetches(config):
        return EvalJobs(evaluate=spec)
    if needs_fetch(config.model):
        env[MODEL_DIR_ENV] = posixpath.join(work_dir, "model")
    if config.model.adapter is not None and needs_fetch(config.model.adapter):
        env[ADAPTER_DIR_ENV] = posixpath.join(work_dir, "adapter")
    fetch = {"name": f"eval-{config.name}-fetch", "command": [*run, "--fetch-only"],
             "cwd": work_dir, "env": dict(env), "gpus": 0, "pool": config.compute.pool,
             "priority": config.compute.priority, "workspace": False,
             # what can change is tried again inside (rota.eval.fetch); what cannot (a run
             # that does not exist) must not wait through retries before it is reported
             "tags": [FETCH_TAG, f"{FETCH_TAG}:{config.name}"]}
    return EvalJobs(evaluate=spec, fetch={k: v for k, v in fetch.items() if v is not None})


def _env(config: EvalConfig, src: Source) -> dict[str, str]:
    """What the run reports and what ``rota eval results`` groups by."""
    env = {"ROTA_EVAL_NAME": config.name, "ROTA_EVAL_MODEL": config.model.display,
           "ROTA_EVAL_HARNESS": config.harness.kind}
    if config.model.mlflow is not None:  # the model's server, not Rota's (MLFLOW_*)
        env[MODEL_TRACKING_ENV] = config.model.mlflow.tracking_uri
    if src.git_commit:
        env["ROTA_EVAL_GIT_COMMIT"] = src.git_commit
    if src.git_dirty is not None:
        env["ROTA_EVAL_GIT_DIRTY"] = "true" if src.git_dirty else "false"
    return env


def _base(config: EvalConfig, pool_engine: str) -> dict[str, Any]:
    """The evaluation job's resources, limits, tracking and tags."""
    c, t = config.compute, config.tracking
    spec: dict[str, Any] = {
        "name": f"eval-{config.name}", "gpus": c.gpus, "priority": c.priority,
        "tags": [EVAL_TAG, f"eval:{config.name}"],
        # the runner prints the results as one JSON line; the harness's console (its
        # batch_size, limit, a table of unprefixed scores) is no metric
        "log_metrics": "json",
        # with tracking, Rota opens the run (params, git, the log) and the evaluation logs
        # into it; without, no run (whatever the daemon's default): nothing waits for one
        "mlflow": t is not None,
        # it works in its own folder (work_dir, a pod's): no workspace, so any pool runs it
        "workspace": False,
    }
    optional = {"gpu_type": c.gpu_type, "gpu_mem": c.gpu_mem, "time_limit": c.time_limit,
                "pool": c.pool, "image": c.image}
    if pool_engine != "local" or c.image:  # limits a container or an engine enforces
        optional.update(cpus=c.cpus, memory=c.memory)
    if t is not None:
        optional.update(mlflow_experiment=t.experiment)
    if t is not None and t.wandb:
        optional.update(wandb=True, wandb_project=t.wandb_project)
    spec.update({k: v for k, v in optional.items() if v is not None})
    return spec
