"""Submitting an evaluation: its jobs for one pool (rota.eval.jobs), in order, nothing
half-submitted. Shared by `rota eval submit` (through the API) and the daemon's schedules
(rota.server.schedules.eval_schedules, through its intake): each hands in how it submits one job
and cancels one.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from rota.core.spec import FILES_MAX
from rota.errors import InvalidSpec, RotaError
from rota.eval.config import EvalConfig
from rota.eval.jobs import CONFIG_PATH, EvalJobs, PodFiles, Source, eval_jobs, harness_paths

#: what each job of an evaluation is called in messages
ROLES = {"fetch": "the model-fetch job", "evaluate": "the evaluation job"}


@dataclass(frozen=True)
class Plan:
    """An evaluation's jobs for one pool."""

    config: EvalConfig
    jobs: EvalJobs
    pool: str
    work_dir: str

    def specs(self) -> list[tuple[str, dict[str, Any]]]:
        """(role, spec) in the order they are submitted."""
        first = [("fetch", self.jobs.fetch)] if self.jobs.fetch is not None else []
        return [*first, ("evaluate", self.jobs.evaluate)]


def make_plan(config: EvalConfig, src: Source, *, pool: str, engine: str,
              work_dir: str, config_dir: str | None = None) -> Plan:
    """The jobs on ``pool`` (whose engine is ``engine``), named in every spec: they are
    made for that engine, and `rota eval results` says where each ran. Relative paths are
    read from ``config_dir``, the config file's folder (rota.eval.paths). On Kubernetes the
    harness's local files are read here (:func:`pod_files`), and a model in a local folder
    is refused (InvalidSpec)."""
    from rota.eval import paths

    # this machine runs the jobs with this Python; an image or a cluster has its own
    python = sys.executable if engine == "local" and not config.compute.image else "python"
    files = None
    if engine == "kubernetes":
        why = paths.refused_on_kubernetes(config)
        if why is not None:
            raise InvalidSpec(why, field=why.split(":")[0])
        files = pod_files(config, src.text, config_dir)
    else:  # the runner reads the config as written: it resolves the same paths again
        config = paths.resolve(config, config_dir)
        src = replace(src, folder=config_dir)
    jobs = eval_jobs(config, src, pool_engine=engine, python=python, work_dir=work_dir,
                     pod_files=files)
    for spec in (jobs.fetch, jobs.evaluate):
        if spec is not None:
            spec["pool"] = pool
    return Plan(config, jobs, pool, work_dir)


def pod_files(config: EvalConfig, text: str, config_dir: str | None) -> PodFiles:
    """The harness's local files (rota.eval.jobs.harness_paths) as a pod gets them, read
    from this machine: every file of ``task_dir`` (hidden ones and ``__pycache__`` left
    out), each heldout data file. A task file that names the task folder by its absolute
    path (lm-eval's ``data_files``) names the pod's instead. Raises InvalidSpec, naming the
    field, for a path that is not there, a file that is not UTF-8 text, or more than a
    ConfigMap holds (with the config: rota.core.spec.FILES_MAX)."""
    files: dict[str, str] = {}
    moved: dict[str, str] = {}
    for hp in harness_paths(config):
        where = os.path.join(config_dir or os.getcwd(), os.path.expanduser(hp.written))
        where = os.path.abspath(where)
        if hp.folder:
            if not os.path.isdir(where):
                raise InvalidSpec(f"{hp.field}: no folder {where} here, and a Kubernetes pod "
                                  "gets the harness's files from this machine",
                                  field=hp.field)
            for path in _walk(where):
                rel = os.path.relpath(path, where).replace(os.sep, "/")
                files[f"{hp.pod}/{rel}"] = re.sub(re.escape(where) + r"(?![\w.-])",
                                                  hp.pod, _text(path, hp.field))
        else:
            if not os.path.isfile(where):
                raise InvalidSpec(f"{hp.field}: no file {where} here, and a Kubernetes pod "
                                  "gets the harness's files from this machine",
                                  field=hp.field)
            files[hp.pod] = _text(where, hp.field)
        moved[hp.written] = hp.pod
    size = len(CONFIG_PATH) + len(text.encode()) + sum(
        len(p.encode()) + len(t.encode()) for p, t in files.items())
    if size > FILES_MAX:
        raise InvalidSpec(f"the harness's files and the config come to {size:,} bytes; a "
                          f"Kubernetes pod gets them in a ConfigMap, which holds at most "
                          f"{FILES_MAX:,}: put the data in the image or on a volume the pod "
                          f"mounts, and name that path", field="harness")
    return PodFiles(files, moved)


def _walk(folder: str) -> list[str]:
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        out += [os.path.join(root, n) for n in sorted(names) if not n.startswith(".")]
    return out


def _text(path: str, field: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(FILES_MAX + 1)
    except OSError as e:
        raise InvalidSpec(f"{field}: cannot read {path}: {e.strerror or e}",
                          field=field) from None
    if len(data) > FILES_MAX:
        raise InvalidSpec(f"{field}: {path} is larger than a ConfigMap holds ({FILES_MAX:,} "
                          "bytes): put it in the image or on a volume the pod mounts",
                          field=field)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = "\0"
    if "\0" in text:
        raise InvalidSpec(f"{field}: {path} is not a text file (a ConfigMap carries "
                          "text): put it in the image or on a volume the pod mounts",
                          field=field)
    return text


def work_dir_name(name: str, now: float) -> str:
    """An evaluation's folder name: the config's name and the UTC time."""
    return f"{name}-{datetime.fromtimestamp(now, UTC):%Y%m%dT%H%M%S}"


def make_work_dir(p: Plan) -> None:
    """The jobs' shared folder, when they run where this machine's disk is seen (a job's
    ``cwd`` must exist when it is submitted)."""
    if "cwd" in p.jobs.evaluate:
        os.makedirs(p.work_dir, exist_ok=True)


def naming(e: RotaError, role: str, spec: dict[str, Any], text: str | None = None) -> RotaError:
    """``e`` (or ``text`` for its message) saying which job of the evaluation it is about."""
    e.args = (f"{ROLES[role]} ({spec.get('name')}): {e if text is None else text}",)
    return e


def submit_plan(p: Plan, send: Callable[[str, dict[str, Any]], int],
                cancel: Callable[[int], object], *, hold: bool = False) -> dict[str, int]:
    """Each job through ``send(role, spec)`` (which answers its id), the evaluation ``after``
    the fetch job; the ids by role. Nothing half-submitted: when the evaluation is refused,
    the fetch job already accepted is cancelled through ``cancel`` (and the error says
    so)."""
    got: dict[str, int] = {}
    for role, spec in p.specs():
        spec = {**spec, **({"hold": True} if hold else {})}
        if role == "evaluate" and "fetch" in got:
            spec["after"] = [got["fetch"]]
        try:
            got[role] = send(role, spec)
        except RotaError as e:
            raise _undone(e, got.get("fetch"), cancel) from None
    return got


def _undone(e: RotaError, fetch: int | None, cancel: Callable[[int], object]) -> RotaError:
    """``e``, after cancelling the fetch job already accepted (saying so)."""
    if fetch is None:
        return e
    try:
        cancel(fetch)
        note = f"the model-fetch job {fetch} was cancelled"
    except RotaError as again:
        note = f"the model-fetch job {fetch} could not be cancelled: {again}"
    e.args = (f"{e}; {note}",)
    return e


def with_model(text: str, uri: str) -> str:
    """The config's YAML with its model replaced by ``uri`` (a checkpoint), its adapter
    kept; validated again by whoever reads it (rota.eval.config.load_text)."""
    import yaml

    data = yaml.safe_load(text)
    model = {k: v for k, v in (data.get("model") or {}).items() if k != "mlflow"}
    data["model"] = {**model, "uri": uri}
    return str(yaml.safe_dump(data, sort_keys=False))
