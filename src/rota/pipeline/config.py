"""A pipeline's definition: recurring fine-tuning rounds (prepare data, train, merge,
evaluate, accept), read from YAML in one of two forms.

Rota's own form is versioned and holds one pipeline: the Gradients Scheduler's task fields
at the top (so a Gradients task moves over by adding ``version`` and ``name``), and Rota's
sections for where training runs, the merge, the evaluation, tracking and the back-off:

    version: 1
    name: qwen-refresh
    model_repo: Qwen/Qwen2.5-0.5B          # the first base; later rounds continue from the
    task_type: InstructText                # last accepted model
    run_intervals: {min_days: 1, max_days: 3}
    datasets:
      - {name: ./data/qa.jsonl, field_instruction: question, field_output: answer}
    samples_per_training: 20_000
    final_test_size: 0.05
    train: {where: local, steps: 300, gpus: 1}
    evaluate: {margin: 0.02}

A Gradients ``config.yaml`` is read unchanged: a mapping of task name to task, each task a
pipeline of that name trained through the Gradients API; a task without ``enabled: true`` is
kept paused, as Gradients skips it. Every bad field is named by its path (``datasets.0.name``,
or ``my_task.datasets.0.name`` in a Gradients file) and its line (rota.eval.config.Problem).
Pure but for reading the file.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from rota.eval.config import (
    Compute,
    ConfigErrors,
    Limits,
    OneWord,
    Problem,
    Seconds,
    problems,
    read_file,
    read_yaml,
)

VERSIONS = (1,)
TASK_TYPES = ("InstructText", "Chat", "InstructTextWithFixedDatasets")
FORMATS = ("rota", "gradients")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
#: the metric the default evaluation (the heldout harness on the held-out tail) reports
HELDOUT_METRIC = "heldout/eval_loss"
#: the Gradients Scheduler's environment names, kept so a user's `.env` moves over as Rota
#: secrets of the same names (`rota secret set GRADIENTS_API_KEY`)
GRADIENTS_KEY = "GRADIENTS_API_KEY"
S3_SECRETS = {"S3_COMPATIBLE_ACCESS_KEY": "S3_COMPATIBLE_ACCESS_KEY",
              "S3_COMPATIBLE_SECRET_KEY": "S3_COMPATIBLE_SECRET_KEY"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RunIntervals(_Strict):
    """The wait after a good round, drawn as the Gradients Scheduler draws it: a whole
    number of days in [min_days, max(min_days, max_days)] plus a whole number of hours in
    [min_hours, max(min_hours, max_hours)] (rota.pipeline.timing.next_run)."""

    min_days: int = Field(default=0, ge=0, le=3650)
    max_days: int = Field(default=0, ge=0, le=3650)
    min_hours: int = Field(default=0, ge=0, le=87600)
    max_hours: int = Field(default=0, ge=0, le=87600)


class Dataset(_Strict):
    """One source of examples and how its fields map to instruction/input/output (or, for
    Chat, where its turns are)."""

    name: OneWord = Field(description="a JSON/JSONL/Parquet/CSV file or a folder of them, "
                                      "s3://bucket/prefix, or a Hugging Face dataset name")
    field_instruction: str | None = Field(default=None, min_length=1)
    field_input: str | None = Field(default=None, min_length=1)
    field_output: str | None = Field(default=None, min_length=1)
    max_rows: int | None = Field(default=None, ge=1)
    chat_column: str = Field(default="conversations", min_length=1)
    chat_role_field: str = Field(default="role", min_length=1)
    chat_content_field: str = Field(default="content", min_length=1)
    chat_user_reference: str = Field(default="user", min_length=1)
    chat_assistant_reference: str = Field(default="assistant", min_length=1)


class Upload(_Strict):
    """Where a round's chunk goes for a trainer that reads it by URL (Gradients): an
    S3-compatible bucket, as a presigned URL that expires. ``bucket`` and ``endpoint_url``
    unset: the stored secrets S3_BUCKET_NAME and S3_COMPATIBLE_ENDPOINT (the Gradients
    Scheduler's names); the keys always come from secrets (``secrets``: variable -> the
    secret's name)."""

    bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    prefix: str = Field(default="rota-pipelines", max_length=512)
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    region: str | None = Field(default=None, min_length=1, max_length=64)
    expires: Seconds = Field(default=7 * 86400.0, le=7 * 86400.0,
                             description="a presigned URL's life (S3 allows 7 days at most)")
    secrets: dict[str, str] = Field(default_factory=lambda: dict(S3_SECRETS))


class TrainLocal(_Strict):
    """The lora-finetune template's options (rota.templates.lora_finetune)."""

    steps: int = Field(default=1000, ge=1)
    batch_size: int = Field(default=8, ge=1)
    grad_accum: int = Field(default=1, ge=1)
    lr: float = Field(default=2e-4, gt=0)
    lora_r: int = Field(default=16, ge=1)
    lora_alpha: int = Field(default=32, ge=1)
    lora_dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: str = "all-linear"
    max_len: int = Field(default=512, ge=16)
    save_every: int = Field(default=200, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"


class Train(TrainLocal, Compute):
    """Where a round trains: ``local`` (the lora-finetune template as a Rota job on any
    pool, from the last accepted model) or ``gradients`` (the remote Gradients API)."""

    where: Literal["local", "gradients"] = "local"
    api_url: str = Field(default="https://api.gradients.io", pattern=r"^https?://\S+$")
    api_key_secret: str = Field(default=GRADIENTS_KEY, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    poll_interval: Seconds = 600.0
    retries: int = Field(default=1, ge=0, le=20, description="the local training job's")


class Merge(Compute):
    """The merge of the winning adapter into its base, a job on the queue. ``publish``:
    where the merged model is kept besides the round's folder: a folder, s3://..., mlflow,
    or hf:OWNER/NAME (private unless ``public``); ``{name}`` and ``{round}`` are filled."""

    publish: str | None = Field(default=None, min_length=1)
    public: StrictBool = False
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    retries: int = Field(default=2, ge=0, le=20)

    @field_validator("publish")
    @classmethod
    def _publish(cls, v: str | None) -> str | None:
        if v is not None and v.startswith("hf:") and v.count("/") != 1:
            raise ValueError(f"{v!r}: a Hugging Face repo is hf:OWNER/NAME")
        return v


class Evaluate(Compute):
    """The held-out evaluation of the merged model and the acceptance rule: accepted as the
    next base unless ``metric`` is worse than the current base's by more than ``margin``.
    By default the heldout harness on the held-out tail (``limits``); ``config``: any
    evaluation config instead (its model is replaced by the merged model)."""

    config: str | None = Field(default=None, min_length=1,
                               description="an evaluation config file (rota eval)")
    metric: str = Field(default=HELDOUT_METRIC, min_length=1)
    higher_is_better: StrictBool = False
    margin: float = Field(default=0.0, ge=0)
    limits: Limits = Field(default_factory=Limits)


class Tracking(_Strict):
    """Where each round's lineage and metrics go besides Rota's store."""

    mlflow: StrictBool = True
    experiment: str | None = Field(default=None, max_length=200,
                                   description="MLflow experiment (default: the name)")
    wandb: StrictBool | None = Field(default=None, description="default: when "
                                                               "wandb_project is set")


class OnFailure(_Strict):
    """A failed round's back-off: ``backoff`` after the first failure, doubled after each
    further one, at most ``max_backoff``."""

    backoff: Seconds = 1800.0
    max_backoff: Seconds = 86400.0


class GradientsTask(_Strict):
    """One task of a Gradients Scheduler ``config.yaml``, with its defaults."""

    enabled: StrictBool = True
    wandb_project: str | None = Field(default=None, min_length=1, max_length=128)
    run_intervals: RunIntervals = Field(default_factory=RunIntervals)
    datasets: list[Dataset] = Field(min_length=1)
    model_repo: OneWord
    tokenizer_id: OneWord | None = None
    hours_to_complete: int = Field(default=8, ge=1, le=24 * 30)
    samples_per_training: int = Field(default=150_000, ge=1)
    final_test_size: float = Field(default=0.05, gt=0, lt=1)
    random_seed: int = 42
    task_type: Literal["InstructText", "Chat", "InstructTextWithFixedDatasets"] = \
        "InstructText"
    chat_template: str = Field(default="chatml", min_length=1)

    @model_validator(mode="after")
    def _fields_for_type(self) -> GradientsTask:
        if self.task_type == "Chat":
            return self
        missing = [f"datasets.{i}.{field}" for i, d in enumerate(self.datasets)
                   for field in ("field_instruction", "field_output")
                   if getattr(d, field) is None]
        if missing:
            raise ValueError(f"{self.task_type} maps each dataset's columns: set "
                             f"{', '.join(missing)}")
        return self


class PipelineConfig(GradientsTask):
    version: int
    name: str = Field(pattern=_NAME)
    format: Literal["rota", "gradients"] = "rota"
    train: Train = Field(default_factory=Train)
    upload: Upload | None = None
    merge: Merge = Field(default_factory=Merge)
    evaluate: Evaluate = Field(default_factory=Evaluate)
    tracking: Tracking = Field(default_factory=Tracking)
    on_failure: OnFailure = Field(default_factory=OnFailure)

    @field_validator("version")
    @classmethod
    def _version(cls, version: int) -> int:
        if version not in VERSIONS:
            raise ValueError(f"this Rota reads pipeline configs of version "
                             f"{', '.join(map(str, VERSIONS))}, not {version}")
        return version

    @model_validator(mode="after")
    def _remote_needs_upload(self) -> PipelineConfig:
        if self.train.where == "gradients" and self.upload is None:
            raise ValidationError.from_exception_data("PipelineConfig", [InitErrorDetails(
                type=PydanticCustomError("upload_needed", "{why}", {"why": (
                    "train.where is gradients, which reads each round's data by URL: add "
                    "an upload section (an S3-compatible bucket)")}),
                loc=("upload",), input=None)])
        if self.task_type == "Chat" and self.train.where == "local":
            raise ValidationError.from_exception_data("PipelineConfig", [InitErrorDetails(
                type=PydanticCustomError("chat_local", "{why}", {"why": (
                    "Chat data trains through Gradients only (train.where: gradients): the "
                    "local lora-finetune template reads instruction data")}),
                loc=("train", "where"), input="local")])
        return self

    def data_hash(self) -> str:
        """What the prepared data depends on: the cache of the merged, shuffled examples
        and of the held-out tail is kept by it (a new hash: a new held-out set)."""
        part = {"datasets": [d.model_dump() for d in self.datasets],
                "task_type": self.task_type, "random_seed": self.random_seed,
                "final_test_size": self.final_test_size}
        return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def wandb(self) -> bool:
        return bool(self.tracking.wandb if self.tracking.wandb is not None
                    else self.wandb_project)


def load_text(text: str, *, where: str = "") -> list[PipelineConfig]:
    """The pipelines in ``text``: one for Rota's form, one per task for a Gradients
    ``config.yaml``. Raises ConfigErrors naming every bad field, with its line."""
    data, root = read_yaml(text, where)
    if not isinstance(data, dict) or not data:
        raise ConfigErrors([Problem("", None, "a pipeline config is a mapping: Rota's form "
                                    "(version, name, model_repo, datasets ...) or a Gradients"
                                    " config.yaml (task name -> task)", where)])
    if "version" in data:
        try:
            return [PipelineConfig.model_validate(data)]
        except ValidationError as e:
            raise ConfigErrors(problems(e, root, where, PipelineConfig)) from None
    return _gradients(data, root, where)


def _gradients(data: dict[Any, Any], root: yaml.Node | None,
               where: str) -> list[PipelineConfig]:
    """Each task of a Gradients config.yaml as a pipeline trained through Gradients, its
    data uploaded where the stored secrets S3_BUCKET_NAME and S3_COMPATIBLE_ENDPOINT say
    (the Gradients Scheduler's own settings)."""
    found: list[PipelineConfig] = []
    errors: list[Problem] = []
    for task, body in data.items():
        if not isinstance(body, dict):
            errors.append(Problem(str(task), _line(root, (task,)), "a Gradients task is a "
                                  "mapping (enabled, model_repo, datasets ...)", where))
            continue
        reserved = sorted(set(body) & {"version", "name", "format"})
        if reserved:
            errors.append(Problem(f"{task}.{reserved[0]}", _line(root, (task, reserved[0])),
                                  "unknown key in a Gradients task", where))
            continue
        enabled = body.get("enabled") is True  # Gradients runs only `enabled: true`
        fields = {"train": {"where": "gradients"}, "upload": {},
                  "merge": {"publish": "hf:{hf_username}/{name}-round-{round}"},
                  **body, "enabled": enabled, "version": 1, "name": str(task),
                  "format": "gradients"}
        try:
            found.append(PipelineConfig.model_validate(fields))
        except ValidationError as e:
            errors += problems(e, root, where, PipelineConfig, prefix=(task,))
    if errors:
        raise ConfigErrors(errors)
    return found


def _line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    from rota.eval.config import _line_of

    return _line_of(root, loc)


def load(path: str) -> list[PipelineConfig]:
    return load_text(read_file(path), where=path)



def resolve_paths(cfg: PipelineConfig, folder: str | None) -> PipelineConfig:
    """Relative local paths (``./data``, ``../x.jsonl``, a name that is a path in
    ``folder``; ``evaluate.config``; a ``merge.publish`` folder; ``model_repo`` when it is
    a folder there) made absolute from the config file's folder: the jobs run elsewhere."""
    import os

    base = folder or os.getcwd()

    def local(name: str, *, must_exist: bool = False) -> str:
        if "://" in name or name.startswith(("hf:", "/")) or name == "mlflow":
            return name
        path = os.path.normpath(os.path.join(base, os.path.expanduser(name)))
        if name.startswith(("./", "../", "~")) or os.path.exists(path) or must_exist:
            return path
        return name  # a Hugging Face name

    datasets = [d.model_copy(update={"name": local(d.name)}) for d in cfg.datasets]
    update: dict[str, Any] = {"datasets": datasets, "model_repo": local(cfg.model_repo)}
    if cfg.evaluate.config is not None:
        update["evaluate"] = cfg.evaluate.model_copy(
            update={"config": local(cfg.evaluate.config, must_exist=True)})
    if cfg.merge.publish is not None:
        update["merge"] = cfg.merge.model_copy(update={"publish": local(cfg.merge.publish)})
    return cfg.model_copy(update=update)
