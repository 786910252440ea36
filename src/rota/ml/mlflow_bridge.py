"""MLflow: a run per job. Its spec as params, tags naming the job, its user and the git
state of its working directory, its metrics mirrored as Rota reads them, and at the end
its log, its checkpoint list and its card (``rota/card.md``...) as artifacts and the run's
final status.

Everything here blocks on the tracking store (a database or a server), so the daemon
calls it from its tracking thread (rota.server.tracking.trackers), never from its event loop.
``mlflow`` (or ``mlflow-skinny``) is imported lazily: ``pip install 'rota[trackers]'``.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rota.core.spec import JobSpec
from rota.errors import TrackerError
from rota.ml.gitinfo import GitInfo

log = logging.getLogger("rota.mlflow")

MAX_PARAM = 6000  # MLflow's limit on a param value
MAX_TAG = 5000
_BATCH = 1000  # metrics per log_batch call, MLflow's limit
_BAD_KEY = re.compile(r"[^\w\-. /:]")

#: Rota's end state -> MLflow's run status.
STATUS = {"completed": "FINISHED", "failed": "FAILED", "timeout": "FAILED",
          "cancelled": "KILLED"}


def available() -> bool:
    try:
        import mlflow  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """MLflow's own errors (and a store that cannot be reached) as one TrackerError."""
    try:
        yield
    except TrackerError:
        raise
    except Exception as e:  # MlflowException, requests' and SQLAlchemy's errors alike
        raise TrackerError(f"MLflow: {what}: {type(e).__name__}: {e}") from e


def metric_key(name: str) -> str:
    return _BAD_KEY.sub("_", name)[:250] or "_"


def spec_params(spec: JobSpec) -> dict[str, str]:
    """What a person would want to compare runs by; secret values are never among them."""
    p: dict[str, Any] = {
        "command": spec.command[0] if spec.shell else shlex.join(spec.command),
        "gpus": spec.gpus, "gpu_mem": spec.gpu_mem, "priority": spec.priority,
        "llm": spec.llm, "conda": spec.conda, "cwd": spec.cwd, "time_limit": spec.time_limit,
        "retries": spec.retries, "session": spec.session, "preemptible": spec.preemptible,
        "checkpoint_dir": spec.checkpoint_dir, "tensorboard_dir": spec.tensorboard_dir,
        "project": spec.project,
    }
    for k, v in spec.env.items():
        if k not in spec.secret_env:
            p[f"env.{k}"] = v
    if spec.secrets:
        p["secrets"] = ",".join(sorted(spec.secrets))  # which were given, not their values
    return {k: str(v)[:MAX_PARAM] for k, v in p.items() if v is not None}


def run_tags(*, job_id: int, user: str, name: str, spec: JobSpec, host: str,
             git: GitInfo | None) -> dict[str, str]:
    tags = {"rota.job_id": str(job_id), "rota.user": user, "rota.host": host,
            "mlflow.user": user, "mlflow.runName": name, "mlflow.source.type": "JOB",
            "mlflow.source.name": (spec.command[0] if spec.shell
                                   else shlex.join(spec.command))[:MAX_TAG]}
    if spec.project:
        tags["rota.project"] = spec.project
    for t in spec.tags:
        tags[f"rota.tag.{t}"[:250]] = "true"
    if git is not None:
        tags.update({"mlflow.source.git.commit": git.commit,
                     "rota.git.dirty": "true" if git.dirty else "false"})
        if git.branch:
            tags["mlflow.source.git.branch"] = git.branch
        if git.remote:
            tags["mlflow.source.git.repoURL"] = git.remote
    return tags


@dataclass(frozen=True)
class RunRef:
    experiment_id: str
    run_id: str


class MlflowBridge:
    """One tracking store, through MlflowClient."""

    def __init__(self, tracking_uri: str, *, artifact_location: str | None = None) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise TrackerError("MLflow is not installed where the daemon runs: "
                               "pip install 'rota[trackers]'") from None
        self.uri, self.artifact_location = tracking_uri, artifact_location
        # MLflow's HTTP client retries 7 times with doubling waits (minutes) by default; a
        # job waiting for its run should learn sooner that the server is down
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        with _translated(f"opening {tracking_uri}"):
            self.client = MlflowClient(tracking_uri=tracking_uri)
        self._experiments: dict[str, str] = {}

    def experiment(self, name: str) -> str:
        """The id of the experiment of that name, made on first use."""
        if name in self._experiments:
            return self._experiments[name]
        with _translated(f"experiment {name!r}"):
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                eid = str(found.experiment_id)
            else:
                try:
                    eid = str(self.client.create_experiment(
                        name, artifact_location=self.artifact_location))
                except Exception:  # made meanwhile by someone else: use theirs
                    found = self.client.get_experiment_by_name(name)
                    if found is None:
                        raise
                    eid = str(found.experiment_id)
        self._experiments[name] = eid
        return eid

    def create_run(self, *, experiment: str, run_name: str, params: dict[str, str],
                   tags: dict[str, str], start_ms: int) -> RunRef:
        from mlflow.entities import Param

        eid = self.experiment(experiment)
        with _translated("creating a run"):
            run = self.client.create_run(eid, start_time=start_ms, tags=tags, run_name=run_name)
            rid = run.info.run_id
            items = [Param(k, v) for k, v in params.items()]
            for i in range(0, len(items), 100):
                self.client.log_batch(rid, params=items[i:i + 100])
        return RunRef(experiment_id=eid, run_id=rid)

    def log_metrics(self, run_id: str, rows: Sequence[dict[str, Any]]) -> None:
        """Rota's metric rows (name, value, ts, step) as MLflow metrics."""
        from mlflow.entities import Metric

        metrics = [Metric(metric_key(str(r["name"])), float(r["value"]), int(r["ts"] * 1000),
                          int(r["step"]) if r.get("step") is not None else 0) for r in rows]
        with _translated("logging metrics"):
            for i in range(0, len(metrics), _BATCH):
                self.client.log_batch(run_id, metrics=metrics[i:i + _BATCH])

    def finish(self, run_id: str, *, state: str, end_ms: int, log_path: Path | None,
               checkpoints: list[dict[str, Any]], tags: dict[str, str],
               card: Mapping[str, str] | None = None) -> None:
        """The log, the checkpoint list and the card (artifact path -> text) as artifacts,
        then the final status; a card that cannot be logged does not keep the run open."""
        with _translated("finishing the run"):
            for k, v in tags.items():
                self.client.set_tag(run_id, k, v[:MAX_TAG])
            if log_path is not None and log_path.exists():
                self.client.log_artifact(run_id, str(log_path), artifact_path="rota")
            self.client.log_dict(run_id, {"checkpoints": checkpoints},
                                 "rota/checkpoints.json")
            for name, text in (card or {}).items():
                try:
                    self.client.log_text(run_id, text, name)
                except Exception as e:
                    log.warning("MLflow run %s: logging its card's %s failed: %s", run_id,
                                name, e)
                    break
            self.client.set_terminated(run_id, STATUS.get(state, "FAILED"), end_time=end_ms)

    def git_of(self, run_id: str) -> dict[str, Any] | None:
        """The git state the run was made with (its tags from ``run_tags``); None without."""
        with _translated("reading the run's tags"):
            tags = self.client.get_run(run_id).data.tags
        commit = tags.get("mlflow.source.git.commit")
        if not commit:
            return None
        return {"commit": commit, "dirty": tags.get("rota.git.dirty") == "true",
                "branch": tags.get("mlflow.source.git.branch"),
                "remote": tags.get("mlflow.source.git.repoURL")}

    def url(self, ref: RunRef) -> str | None:
        """A link to the run in the MLflow UI when the store is a tracking server."""
        if self.uri.startswith(("http://", "https://")):
            return f"{self.uri.rstrip('/')}/#/experiments/{ref.experiment_id}/runs/{ref.run_id}"
        return None
