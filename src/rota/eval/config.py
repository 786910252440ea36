"""An evaluation config: what to evaluate, with which harness, on what, reported where.

A YAML file with a versioned schema (``version``); read by :func:`load_text`, which names
every bad field by its path (``harness.limits.num_fewshot``) and, for a file, its line. Pure
but for reading the file: nothing is fetched or run here.

    version: 1
    name: qwen-arc
    model:
      mlflow: {tracking_uri: http://mlflow:5000, run_id: 0a1b2c, artifact_path: model}
      adapter: {uri: runs:/3d4e5f/adapter}      # optional: a LoRA adapter on the model
    harness:
      kind: lm-eval
      tasks: [arc_easy]
      limits: {max_instances: 100, num_fewshot: 0, batch_size: 8, dtype: bfloat16}
    compute: {gpus: 1, gpu_type: A100, time_limit: 2h, pool: k8s}
    tracking:                                   # optional: MLflow (and W&B) runs
      experiment: evals
      tags: {creator: ana, lifecycle: candidate, datasets: [arc]}

Relative paths (``model.uri: ./tiny-llama``, ``harness.task_dir``, heldout's data files) are
the config file's folder's: :func:`resolve_paths` makes them absolute before the jobs are
made, on every pool.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from rota.errors import InvalidSpec
from rota.eval.limits import Limits
from rota.units import parse_duration, parse_memory_person

#: the schema versions this Rota reads; a file names its own
VERSIONS = (1,)
HARNESSES = ("lm-eval", "helm", "heldout")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"


def _memory(v: Any) -> Any:
    from rota.units import parse_memory

    with _as_value_error():
        v = parse_memory_person(v, field="memory")
        return parse_memory(v, field="memory") if isinstance(v, str) else v


def _seconds(v: Any) -> Any:
    with _as_value_error():
        return parse_duration(v) if isinstance(v, str) else v


@contextmanager
def _as_value_error() -> Iterator[None]:
    """A unit parser's InvalidSpec as the ValueError pydantic collects (with the field's
    full path and line), its own ``field: `` prefix dropped: the path says which."""
    try:
        yield
    except InvalidSpec as e:
        field = f"{e.field}: " if e.field else ""
        raise ValueError(str(e).removeprefix(field)) from None


def _one_word(v: str) -> str:
    """A task, a URI or an image is one word: say so in words (not as a regex)."""
    if v.split() != [v]:
        raise ValueError(f"{v!r} has a space in it: write it as one word (a name or a path "
                         "without spaces)")
    return v


Memory = Annotated[int, BeforeValidator(_memory), Field(gt=0)]
Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0)]
OneWord = Annotated[str, Field(min_length=1), AfterValidator(_one_word)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class MlflowArtifact(_Strict):
    """A model logged as an artifact of an MLflow run."""

    tracking_uri: str = Field(min_length=1, description="the MLflow server (http://, file:, "
                                                        "sqlite:)")
    run_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    artifact_path: str = Field(min_length=1, description="the model's folder in the run")


class ModelSource(_Strict):
    """Exactly one of ``mlflow`` (a run's artifact) and ``uri`` (``runs:/``, ``models:/``,
    ``s3://``, a folder, or a Hugging Face name where the hub is reachable)."""

    mlflow: MlflowArtifact | None = None
    uri: OneWord | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelSource:
        if (self.mlflow is None) == (self.uri is None):
            raise ValueError("give exactly one of mlflow (a run's artifact) and uri")
        return self

    @property
    def display(self) -> str:
        """The source as a person names it (results are grouped by it)."""
        if self.mlflow is not None:
            return f"runs:/{self.mlflow.run_id}/{self.mlflow.artifact_path}"
        assert self.uri is not None
        return self.uri


class Model(ModelSource):
    adapter: ModelSource | None = Field(default=None, description="a LoRA adapter (peft) "
                                        "applied to the model")


class Harness(_Strict):
    kind: Literal["lm-eval", "helm", "heldout"]
    tasks: list[OneWord] = Field(
        default_factory=list, description="lm-eval tasks, HELM run entries, or (heldout) "
                                          "JSON-lines files")
    task_dir: str | None = Field(default=None, description="a folder of task definitions "
                                 "(lm-eval's --include_path)")
    limits: Limits = Field(default_factory=Limits)
    args: dict[str, str] = Field(default_factory=dict, description="more options of the "
                                 "harness, by name, passed as --NAME VALUE")

    @field_validator("tasks")
    @classmethod
    def _commas(cls, tasks: list[str], info: ValidationInfo) -> list[str]:
        """lm-eval takes its tasks as one comma-separated list, so a comma would split a
        task; a HELM run entry keeps its own (``mmlu:subject=anatomy,model=...``)."""
        if info.data.get("kind") == "lm-eval":
            errors = [InitErrorDetails(
                type=PydanticCustomError("task_comma", "{why}", {"why": (
                    f"{t!r}: an lm-eval task has no comma (lm-eval reads its tasks as one "
                    "comma-separated list): write each task as an item of its own")}),
                loc=(i,), input=t) for i, t in enumerate(tasks) if "," in t]
            if errors:
                raise ValidationError.from_exception_data("tasks", errors)
        return tasks

    @field_validator("limits")
    @classmethod
    def _limits_honoured(cls, limits: Limits, info: ValidationInfo) -> Limits:
        """Refuses each limit the harness would not pass on (never silently dropped), by
        its own path: the harness's declaration says which it honours (harnesses/base.py)."""
        from rota.eval.harnesses import HARNESSES  # (they import Limits, not this module)

        kind = info.data.get("kind")
        harness = HARNESSES.get(kind) if isinstance(kind, str) else None
        if harness is None:  # the kind itself is refused
            return limits
        refused = harness.refused_limits(limits, info.data.get("tasks") or [])
        if refused:
            raise ValidationError.from_exception_data("Limits", [
                InitErrorDetails(type=PydanticCustomError("limit_not_honoured", "{why}",
                                                          {"why": why}),
                                 loc=(name,), input=getattr(limits, name))
                for name, why in refused.items()])
        return limits

    @model_validator(mode="after")
    def _tasks(self) -> Harness:
        if not self.tasks:
            raise ValueError(f"name at least one task for {self.kind}")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError("a task is named twice")
        return self


class Compute(_Strict):
    gpus: float = Field(default=1.0, ge=0, le=1024)
    gpu_type: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$",
        description="the GPU model (A100, H100, ...), as a job's gpu_type: on Kubernetes "
                    "the node label's value")
    gpu_mem: Memory | None = None
    cpus: float | None = Field(default=None, gt=0, le=4096)
    memory: Memory | None = None
    time_limit: Seconds | None = None
    pool: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9-]{0,39}$")
    image: OneWord | None = None
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)

    @model_validator(mode="after")
    def _gpu_type_needs_gpus(self) -> Compute:
        if self.gpu_type is not None and self.gpus == 0:
            raise ValueError(f"gpu_type {self.gpu_type!r} names a kind of GPU but gpus is 0: "
                             "give gpus, or drop gpu_type")
        return self


class Tags(_Strict):
    model_config = ConfigDict(extra="allow", frozen=True)  # a team's own tags too

    creator: str | None = Field(default=None, min_length=1)
    lifecycle: str | None = Field(default=None, min_length=1,
                                  description="e.g. experimental, candidate, release")
    datasets: list[str] = Field(default_factory=list)
    model: str | None = None


class Tracking(_Strict):
    experiment: str = Field(default="rota-eval", min_length=1, max_length=200)
    run_name: str | None = Field(default=None, max_length=200)
    tags: Tags = Field(default_factory=Tags)
    description: str | None = Field(default=None, max_length=5000)
    wandb: StrictBool = False
    wandb_project: str | None = Field(default=None, max_length=128)


class EvalConfig(_Strict):
    version: int
    name: str = Field(pattern=_NAME)
    model: Model
    harness: Harness
    compute: Compute = Field(default_factory=Compute)
    #: None: no MLflow run; the results still reach the job, `rota eval results` and the UI
    tracking: Tracking | None = None

    @field_validator("version")
    @classmethod
    def _version(cls, version: int) -> int:
        """A version this Rota reads (``"1"``, quoted, is read as 1 as pydantic reads any
        number written as text)."""
        if version not in VERSIONS:
            raise ValueError(f"this Rota reads evaluation configs of version "
                             f"{', '.join(map(str, VERSIONS))}, not {version}")
        return version


class Problem(typing.NamedTuple):
    """One bad field: its path (``harness.tasks.1``; empty for the whole file), its line in
    the file (when known) and what is wrong."""

    path: str
    line: int | None
    message: str
    file: str = ""

    def __str__(self) -> str:
        head = f"{self.file}:{self.line}: " if self.file and self.line else \
            (f"{self.file}: " if self.file else "")
        return f"{head}{self.path}: {self.message}" if self.path else f"{head}{self.message}"

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "message": self.message}


class ConfigErrors(InvalidSpec):
    """Every problem of a config, each as ``[FILE:LINE: ]path: message`` (``problems``)
    and as :class:`Problem` (``items``)."""

    def __init__(self, problems: list[str] | list[Problem]) -> None:
        self.items = [p if isinstance(p, Problem) else Problem("", None, p)
                      for p in problems]
        self.problems = [str(p) for p in self.items]
        super().__init__("\n".join(self.problems), field="config")


def read_yaml(text: str, where: str) -> tuple[Any, yaml.Node | None]:
    """The YAML's data and its node tree (for the lines of problems); ConfigErrors with
    the line when it is not YAML. Shared by every versioned config."""
    try:
        return yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigErrors([Problem("", mark.line + 1 if mark is not None else None,
                                    f"not valid YAML: {getattr(e, 'problem', e)}",
                                    where)]) from None


def read_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigErrors([f"{path}: cannot read it: {e}"]) from None


def load_text(text: str, *, where: str = "") -> EvalConfig:
    """The config in ``text`` (YAML); raises ConfigErrors naming every bad field, with its
    line in ``where`` (a file's name) when the YAML shows it."""
    data, root = read_yaml(text, where)
    if not isinstance(data, dict):
        raise ConfigErrors([Problem("", None, "an evaluation config is a mapping (version, "
                                    "name, model, harness ...)", where)])
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigErrors(problems(e, root, where, EvalConfig)) from None


def load(path: str) -> EvalConfig:
    return load_text(read_file(path), where=path)


def problems(e: ValidationError, root: yaml.Node | None, where: str,
             model: type[BaseModel], prefix: tuple[Any, ...] = ()) -> list[Problem]:
    """Each error of validating ``model`` (read from the YAML ``root``, at ``prefix`` in
    it) as a Problem with its path and line; shared by every versioned config."""
    return [_problem(err, root, where, model, prefix) for err in e.errors()]


def _problem(err: Any, root: yaml.Node | None, where: str, model: type[BaseModel],
             prefix: tuple[Any, ...]) -> Problem:
    loc = (*prefix, *err["loc"])
    path = ".".join(map(str, loc)) or "config"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = "missing"
    elif err["type"] == "extra_forbidden":
        msg = _unknown(err["loc"], model)
    return Problem(path, _line_of(root, loc), msg, where)


def _unknown(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    """An unknown key's message: the key it most likely meant (difflib), and the keys that
    place takes."""
    known = sorted(_model_at(loc[:-1], root).model_fields)
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"unknown key: {hint}the keys here are {', '.join(known)}"


def _model_at(loc: tuple[Any, ...], root: type[BaseModel]) -> type[BaseModel]:
    """The model class that reads the mapping at ``loc`` (list indexes skipped)."""
    model: type[BaseModel] = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        found = _a_model(field.annotation) if field is not None else None
        if found is None:
            break
        model = found
    return model


def _a_model(annotation: Any) -> type[BaseModel] | None:
    """The model class in ``X``, ``X | None`` or ``list[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _a_model(arg)
        if found is not None:
            return found
    return None


def located(text: str, where: str, found: list[tuple[tuple[Any, ...], str]]) -> list[Problem]:
    """Problems found after reading (loc, message) with their lines in ``text``."""
    try:
        root: yaml.Node | None = yaml.compose(text)
    except yaml.YAMLError:
        root = None
    return [Problem(".".join(map(str, loc)), _line_of(root, loc), msg, where)
            for loc, msg in found]


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the deepest part of ``loc`` the YAML has (the parent's line for
    a missing field)."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
                and part < len(node.value):
            node = node.value[part]
        else:
            node = None
        if node is None:
            break
        line = node.start_mark.line + 1
    return line
