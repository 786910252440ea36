"""The daemon's side of experiment trackers and stored secrets.

MLflow (``--mlflow``): a job gets its run when it is accepted, before it can start, so
that its first attempt already has ``MLFLOW_RUN_ID`` and code in the job that uses
``mlflow`` logs to the same run. The job waits in the meantime ("waits for its MLflow run");
when the tracking store cannot be reached the job is not held back: an event says so and
it runs without a run. Metrics are mirrored as the daemon reads them, and when the job
ends its log, its checkpoint list and its card (rota.server.cards) are attached and the run
gets its final status. The git state the run was made with is kept with its id in the
store, for the card. Every MLflow call blocks, so they run in order on one worker thread;
what they return comes back to the event loop, which alone reads and writes the store.

Weights & Biases (``--wandb``): see rota.ml.wandb_bridge; only environment variables and
the run's link, found in the job's output.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rota.config import Settings
from rota.core.snapshot import PendingJob
from rota.core.spec import JobSpec, wants_mlflow
from rota.errors import InvalidSpec, TrackerError
from rota.ml import checkpoints, mlflow_bridge, wandb_bridge
from rota.ml.gitinfo import git_info
from rota.server import cards
from rota.server.secrets import Secrets
from rota.store.db import redact_url
from rota.store.repo import Store

log = logging.getLogger("rota.tracking")
#: How long a stopping daemon waits for MLflow calls still queued.
CLOSE_WAIT_S = 15.0


@dataclass
class Tracked:
    """A job with an MLflow run."""

    run_id: str
    spec: JobSpec
    submitted_at: float
    log_path: Path
    attempts: int = 0
    reported: dict[str, Any] | None = None  # the last checkpoint rota.job reported
    failed: bool = False  # a mirror call failed: said once, not on every tick


@dataclass
class Tracking:
    settings: Settings
    secrets: Secrets
    post: Callable[..., None]  # runs a callback on the event loop thread (thread-safe)
    instance: str = ""  # this daemon's id: part of W&B run ids
    runs: dict[int, Tracked] = field(default_factory=dict)
    creating: set[int] = field(default_factory=set)  # MLflow run being made
    parked: dict[int, PendingJob] = field(default_factory=dict)  # queued once it exists
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        1, thread_name_prefix="rota-tracking"))
    _bridge: mlflow_bridge.MlflowBridge | None = None
    store: Store | None = None  # read on the loop for a run's card (None: no card)

    # --- at submit ------------------------------------------------------------------------
    def wants_mlflow(self, spec: JobSpec | dict[str, Any]) -> bool:
        asked = spec.get("mlflow") if isinstance(spec, dict) else spec.mlflow
        return wants_mlflow(asked, self.settings.mlflow)

    def check(self, spec: JobSpec, user: str, prefix: str = "") -> None:
        """Refuse what could not work: MLflow not installed, a secret not stored."""
        if spec.mlflow and not mlflow_bridge.available():
            raise InvalidSpec(f"{prefix}mlflow: MLflow is not installed where the daemon "
                              "runs (pip install 'rota[trackers]')", field="mlflow")
        if spec.secrets:
            self.secrets.require(user, spec.secrets.values(), where=f"{prefix}secrets")

    # --- MLflow runs ----------------------------------------------------------------------
    def uri(self) -> str:
        return self.settings.mlflow_uri

    def _mlflow(self) -> mlflow_bridge.MlflowBridge:
        """The bridge, made on the worker thread at first use (importing MLflow is slow)."""
        if self._bridge is None:
            self._bridge = mlflow_bridge.MlflowBridge(
                self.uri(), artifact_location=self.settings.mlflow_artifacts)
        return self._bridge

    def open_run(self, *, job_id: int, user: str, spec: JobSpec, submitted_at: float,
                 log_path: Path, done: Callable[[int, dict[str, Any] | None, str | None], None],
                 ) -> None:
        """Make the job's run on the worker; ``done(job_id, tracking, error)`` follows on
        the loop."""
        self.creating.add(job_id)
        name = spec.name or f"job-{job_id}"
        experiment = spec.mlflow_experiment or self.settings.mlflow_experiment

        def work() -> None:
            try:
                git = git_info(spec.cwd) if spec.cwd else None
                bridge = self._mlflow()
                ref = bridge.create_run(
                    experiment=experiment, run_name=name, params=mlflow_bridge.spec_params(spec),
                    tags=mlflow_bridge.run_tags(job_id=job_id, user=user, name=name, spec=spec,
                                                host=socket.gethostname(), git=git),
                    start_ms=int(submitted_at * 1000))
            except TrackerError as e:
                self.post(self._opened, job_id, None, None, str(e), done)
                return
            except Exception as e:  # never lose the job over a tracker
                log.exception("job %s: creating its MLflow run failed", job_id)
                self.post(self._opened, job_id, None, None, f"MLflow: {e}", done)
                return
            found: dict[str, Any] = {"run_id": ref.run_id, "experiment_id": ref.experiment_id,
                                     "experiment": experiment,
                                     "uri": redact_url(self.uri()), "url": bridge.url(ref)}
            if git is not None:  # the run's git tags, for its card (no MLflow call then)
                found["git"] = asdict(git)
            self.post(self._opened, job_id, Tracked(ref.run_id, spec, submitted_at, log_path),
                      found, None, done)

        self._pool.submit(work)

    def _opened(self, job_id: int, tracked: Tracked | None, found: dict[str, Any] | None,
                error: str | None,
                done: Callable[[int, dict[str, Any] | None, str | None], None]) -> None:
        self.creating.discard(job_id)
        if tracked is not None:
            self.runs[job_id] = tracked
        done(job_id, found, error)

    def adopt(self, job_id: int, spec: JobSpec, tracking: dict[str, Any] | None,
              submitted_at: float, log_path: Path, attempts: int) -> bool:
        """After a restart: a job whose run exists is mirrored again; False when a job that
        wants a run has none yet (its creation was cut short)."""
        run_id = ((tracking or {}).get("mlflow") or {}).get("run_id")
        if run_id:
            self.runs[job_id] = Tracked(run_id, spec, submitted_at, log_path, attempts)
            return True
        return not self.wants_mlflow(spec) or "error" in ((tracking or {}).get("mlflow") or {})

    def mirror(self, rows: Sequence[dict[str, Any]]) -> None:
        """Metric rows just stored, sent to the runs of their jobs."""
        by_job: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            if r["job_id"] in self.runs:
                by_job.setdefault(r["job_id"], []).append(r)
        for job_id, got in by_job.items():
            tracked = self.runs[job_id]
            self._pool.submit(self._log_metrics, job_id, tracked, got)

    def _log_metrics(self, job_id: int, tracked: Tracked, rows: list[dict[str, Any]]) -> None:
        try:
            self._mlflow().log_metrics(tracked.run_id, rows)
        except Exception as e:
            if not tracked.failed:
                tracked.failed = True
                log.warning("job %s: mirroring metrics to MLflow failed (said once): %s",
                            job_id, e)

    def note_checkpoint(self, job_id: int, reported: dict[str, Any] | None) -> None:
        tracked = self.runs.get(job_id)
        if tracked is not None and reported:
            tracked.reported = reported

    def ended(self, job_id: int, state: str, *, now: float) -> None:
        """The job ended for good: log, checkpoint list and card attached, final status
        set. The card's facts are read here, on the loop (the store is the loop's)."""
        tracked = self.runs.pop(job_id, None)
        if tracked is None:
            return
        facts: cards.CardFacts | None = None
        try:
            if self.store is not None:
                facts = cards.facts(self.store, job_id, now)
        except Exception as e:  # never lose the run's finish over its card
            log.warning("job %s: reading what its card tells failed: %s", job_id, e)

        def work() -> None:
            try:
                found = checkpoints.of_job(tracked.spec.checkpoint_dir, tracked.spec.cwd,
                                           reported=tracked.reported,
                                           since=tracked.submitted_at,
                                           now=now + checkpoints.SETTLE_S)
            except OSError:
                found = []
            listed = [{"path": c.path, "step": c.step, "size": c.size, "mtime": c.mtime,
                       "valid": c.valid} for c in found]
            tags = {"rota.state": state, "rota.attempts": str(tracked.attempts)}
            card = self._card(job_id, tracked, facts) if facts is not None else None
            try:
                self._mlflow().finish(tracked.run_id, state=state, end_ms=int(now * 1000),
                                      log_path=tracked.log_path, checkpoints=listed, tags=tags,
                                      card=card)
            except Exception as e:
                log.warning("job %s: finishing its MLflow run failed: %s", job_id, e)

        self._pool.submit(work)

    def _card(self, job_id: int, tracked: Tracked, facts: cards.CardFacts
              ) -> dict[str, str] | None:
        """On the worker: the card's files as the run's artifacts (``rota/card.md``...),
        its git state from the run's tags when the store had none (a run made before it
        kept them), else read now; None when it cannot be made."""
        if facts.git is None:
            try:
                found = self._mlflow().git_of(tracked.run_id)
            except Exception as e:
                log.warning("job %s: reading its MLflow run's git tags failed: %s", job_id, e)
                found = None
            if found is not None:
                facts.git = {**found, "source": cards.GIT_AT_SUBMIT}
        try:
            facts = cards.with_git(facts)
            return {f"rota/{name}": text for name, text in cards.card_files(facts).items()}
        except Exception as e:
            log.warning("job %s: making its card for its MLflow run failed: %s", job_id, e)
            return None

    # --- the job's environment --------------------------------------------------------
    def launch_env(self, *, job_id: int, user: str, spec: JobSpec) -> dict[str, str]:
        """What trackers and stored secrets put in an attempt's environment, and the
        job's ``--secret-env`` values unsealed (stored sealed: rota.server.secrets). A
        secret the job names and its user no longer has is an error (the launch fails,
        saying so)."""
        env: dict[str, str] = {}
        if spec.secret_env:
            unsealed = self.secrets.launch_env(spec, job_id)
            env.update({var: unsealed[var] for var in spec.secret_env})
        wanted = set(spec.secrets.values())
        if spec.wandb:
            wanted.add(wandb_bridge.KEY_SECRET)
        values = self.secrets.values(user, wanted) if wanted else {}
        missing = sorted(set(spec.secrets.values()) - set(values))
        if missing:
            raise TrackerError(f"{user} no longer has the secret {', '.join(missing)} this "
                               "job needs (rota secret set)")
        tracked = self.runs.get(job_id)
        if tracked is not None:
            tracked.attempts += 1
            env.update(MLFLOW_TRACKING_URI=self.uri(), MLFLOW_RUN_ID=tracked.run_id)
        if spec.wandb:
            env.update(wandb_bridge.environment(
                spec, job_id=job_id, instance=self.instance, entity=self.settings.wandb_entity,
                default_project=self.settings.wandb_project,
                api_key=None if wandb_bridge.KEY_SECRET in spec.secrets
                else values.get(wandb_bridge.KEY_SECRET)))
        env.update({var: values[name] for var, name in spec.secrets.items()})
        return env

    # --- what people see ---------------------------------------------------------------
    def view(self, job_id: int, spec: dict[str, Any], tracking: dict[str, Any] | None,
             progress: dict[str, Any] | None) -> dict[str, Any] | None:
        """The job's runs, from its stored spec (not re-validated: lists show many jobs)."""
        out: dict[str, Any] = {}
        ml = (tracking or {}).get("mlflow")
        if ml:
            out["mlflow"] = {k: v for k, v in ml.items() if k != "git"}  # (the card shows it)
        elif self.wants_mlflow(spec):
            out["mlflow"] = {"state": "creating" if job_id in self.creating else "none"}
        if spec.get("wandb"):
            out["wandb"] = wandb_bridge.view(
                JobSpec.stored(spec), job_id=job_id, instance=self.instance,
                entity=self.settings.wandb_entity, default_project=self.settings.wandb_project,
                found=((progress or {}).get("links") or {}).get("wandb"))
        return out or None

    def close(self, wait: float = CLOSE_WAIT_S) -> None:
        """Let queued MLflow calls finish (a bounded wait), then stop the worker."""
        import threading

        t = threading.Thread(target=self._pool.shutdown, kwargs={"wait": True}, daemon=True)
        t.start()
        t.join(wait)
