"""A round's steps as ordinary Rota job specs (pure: the config and the round in, specs
out). The daemon (rota.server.schedules.pipelines) submits one step at a time, when the one before
has completed and its result file says what it made:

    prep      python -m rota.pipeline.prep            -> FOLDER/prep.json  (chunk, held-out)
    train     lora-finetune template (local)          -> FOLDER/train/adapter
              python -m rota.pipeline.gradients_step  -> FOLDER/train.json (the winner)
    merge     python -m rota.pipeline.merge           -> FOLDER/merge.json (the merged model)
    evaluate  an evaluation (rota.eval) of the merged model, and of the base when its number
              on this held-out set is not known yet    -> the jobs' metrics

Every job is tagged ``pipeline``, ``pipeline:NAME`` and ``round:NAME:N``, named
``NAME-rN-STEP``, and works in the round's folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import yaml

from rota.pipeline.config import PipelineConfig

STEPS = ("prep", "train", "merge", "evaluate")
TAG = "pipeline"
RESULT = {"prep": "prep.json", "train": "train.json", "merge": "merge.json"}
CONFIG_ENV = "ROTA_PIPELINE_CONFIG"
HELDOUT_FILE = "heldout.jsonl"  # the heldout harness names its metrics by the file's stem


@dataclass(frozen=True)
class Round:
    """Where one round works and with which Python."""

    config: PipelineConfig
    number: int
    folder: str  # ROTA_HOME/pipelines/NAME/round-N
    cache: str  # ROTA_HOME/pipelines/NAME/data: the prepared data, by its hash
    python: str

    def name(self, step: str) -> str:
        return f"{self.config.name}-r{self.number}-{step}"

    def tags(self) -> list[str]:
        return [TAG, f"{TAG}:{self.config.name}", f"round:{self.config.name}:{self.number}"]

    def path(self, *parts: str) -> str:
        return os.path.join(self.folder, *parts)


def _base(r: Round, step: str, compute: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": r.name(step), "cwd": r.folder, "tags": r.tags(),
                            "gpus": 0, "workspace": False}  # (the round's folder is its own)
    if compute is not None:
        spec.update(gpus=compute.gpus, priority=compute.priority)
        spec.update({k: v for k, v in (("gpu_type", compute.gpu_type),
                                       ("gpu_mem", compute.gpu_mem),
                                       ("time_limit", compute.time_limit),
                                       ("pool", compute.pool), ("image", compute.image),
                                       ("cpus", compute.cpus), ("memory", compute.memory))
                     if v is not None})
    return spec


def prep_job(r: Round) -> dict[str, Any]:
    """Load, map, merge, shuffle, hold out, chunk; upload the chunk when the trainer reads
    it by URL. On no GPU."""
    cfg = r.config
    env = {CONFIG_ENV: cfg.model_dump_json(), "PYTHONUNBUFFERED": "1"}
    secrets: dict[str, str] = {}
    if cfg.upload is not None:
        secrets.update(cfg.upload.secrets)
        for var, value, secret in (("S3_BUCKET_NAME", cfg.upload.bucket, "S3_BUCKET_NAME"),
                                   ("S3_COMPATIBLE_ENDPOINT", cfg.upload.endpoint_url,
                                    "S3_COMPATIBLE_ENDPOINT")):
            if value is not None:
                env[var] = value
            elif cfg.format == "gradients":  # the Gradients Scheduler's .env, as secrets
                secrets[var] = secret
    return {**_base(r, "prep"), "command": [
        r.python, "-u", "-m", "rota.pipeline.prep", "--round", str(r.number),
        "--out", r.folder, "--cache", r.cache], "env": env, "secrets": secrets,
        "log_metrics": "json", "retries": 1}


def train_job(r: Round, base_model: str, prep: dict[str, Any]) -> dict[str, Any]:
    """Local: the lora-finetune template on the round's chunk, from ``base_model``.
    Remote: the Gradients step, which creates the task once and follows it."""
    cfg, t = r.config, r.config.train
    if t.where == "local":
        from rota.templates import LORA

        values = {o.name: o.default for o in LORA.options}
        values.update({k: getattr(t, k) for k in (
            "steps", "batch_size", "grad_accum", "lr", "lora_r", "lora_alpha",
            "lora_dropout", "target_modules", "max_len", "save_every", "device", "gpus",
            "retries")}, name=r.name("train"), model=base_model,
            data=prep["files"]["train"], out=r.path("train"), python=r.python)
        spec = LORA.build(values)
        spec.update({k: v for k, v in _base(r, "train", t).items() if k != "name"})
        return spec
    argv = [r.python, "-u", "-m", "rota.pipeline.gradients_step", "--round-dir", r.folder,
            "--api-url", t.api_url, "--task-type", cfg.task_type, "--model-repo", base_model,
            "--hours-to-complete", str(cfg.hours_to_complete), "--chat-template",
            cfg.chat_template, "--poll-interval", f"{t.poll_interval:g}"]
    # a failed remote task is a failed round (backed off), never a new paid task at once;
    # passing trouble is retried inside, and a restart resumes the recorded task
    return {**_base(r, "train"), "command": argv, "secrets": {"GRADIENTS_API_KEY":
                                                              t.api_key_secret},
            "env": {"PYTHONUNBUFFERED": "1"}, "log_metrics": "json", "retries": 0}


def publish_target(cfg: PipelineConfig, number: int) -> str | None:
    """Where the merged model is kept besides the round's folder, ``{name}`` and
    ``{round}`` filled (``{hf_username}`` is the merge job's, from HF_USERNAME)."""
    p = cfg.merge.publish
    return None if p is None else p.replace("{name}", cfg.name).replace("{round}", str(number))


def merge_job(r: Round, base_model: str, adapter: str) -> dict[str, Any]:
    """The adapter merged into its base (and the tokenizer swapped), on the queue's GPUs,
    with real retries; published where the config says."""
    cfg, m = r.config, r.config.merge
    argv = [r.python, "-u", "-m", "rota.pipeline.merge", "--base", base_model, "--adapter",
            adapter, "--out", r.path("merged"), "--round-dir", r.folder, "--dtype", m.dtype]
    if m.gpus == 0:
        argv += ["--device", "cpu"]
    if cfg.tokenizer_id:
        argv += ["--tokenizer", cfg.tokenizer_id]
    target = publish_target(cfg, r.number)
    secrets: dict[str, str] = {}
    if target is not None:
        argv += ["--publish", target]
        if m.public:
            argv.append("--public")
        if target.startswith("hf:"):
            secrets = {"HF_TOKEN": "HF_TOKEN"}
            if "{hf_username}" in target:
                secrets["HF_USERNAME"] = "HF_USERNAME"
        if target == "mlflow":
            argv += ["--mlflow-experiment", cfg.tracking.experiment or cfg.name]
    return {**_base(r, "merge", m), "command": argv, "secrets": secrets,
            "env": {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"},
            "retries": m.retries, "mlflow": target == "mlflow"}


def evaluation_text(cfg: PipelineConfig, model: str, heldout: str, who: str) -> str:
    """The evaluation config (rota.eval) of ``model``: the heldout harness on the held-out
    tail, or the pipeline's own evaluation config with its model replaced. ``who``
    (``candidate`` or ``base``) names the evaluation."""
    e = cfg.evaluate
    name = f"{cfg.name}-{who}"
    if e.config is not None:
        with open(e.config, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
        data.update(name=name, model={**{k: v for k, v in (data.get("model") or {}).items()
                                         if k == "adapter"}, "uri": model})
        return str(yaml.safe_dump(data, sort_keys=False))
    limits = e.limits.model_dump(exclude_defaults=True)
    compute = {k: v for k, v in e.model_dump(include={
        "gpus", "gpu_type", "gpu_mem", "cpus", "memory", "time_limit", "pool", "image",
        "priority"}).items() if v is not None}
    data = {"version": 1, "name": name, "model": {"uri": model},
            "harness": {"kind": "heldout", "tasks": [heldout], **(
                {"limits": limits} if limits else {})},
            "compute": compute}
    return str(yaml.safe_dump(json.loads(json.dumps(data)), sort_keys=False))


def record_job(r: Round, lineage: dict[str, Any]) -> dict[str, Any] | None:
    """The round's lineage and numbers copied to MLflow (and W&B when asked); None when
    the pipeline tracks nowhere but in Rota's store."""
    cfg = r.config
    if not cfg.tracking.mlflow and not cfg.wandb:
        return None
    spec: dict[str, Any] = {**_base(r, "record"), "command": [
        r.python, "-u", "-m", "rota.pipeline.record"],
        "env": {"ROTA_PIPELINE_ROUND": json.dumps(lineage)}, "log_metrics": "json",
        "mlflow": cfg.tracking.mlflow, "retries": 2}
    if cfg.tracking.mlflow:
        spec["mlflow_experiment"] = cfg.tracking.experiment or cfg.name
    if cfg.wandb:
        spec.update(wandb=True, **({"wandb_project": cfg.wandb_project}
                                   if cfg.wandb_project else {}))
    return spec
