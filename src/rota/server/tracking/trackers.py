"""The daemon's side of experiment trackers and stored secrets.

MLflow (``--mlflow``): a job gets its run when it is accepted, before it can start, so
that its first attempt already has ``MLFLOW_RUN_ID`` and code in the job that uses
``mlflow`` logs to the same run. The job waits in the meantime ("waits for its MLflow run");
when the tracking store cannot be reached the job is not held back: an event says so and
it runs without a run. Metrics are mirrored as the daemon reads them, and when the job
ends its log, its checkpoint list and its card (rota.server.storage.cards) are attached and the run
gets its final status. The git state the run was made with is kept with its id in the
store, for the card. Every MLflow call blocks, so they run in order on one worker thread;
what they return comes back to the event loop, which alone reads and writes the store.

Weights & Biases (``--wandb``): see rota.ml.wandb_bridge; only environment variables and
the run's link, found in the job's output. When the job ends for good its card is added to
its W&B run's files by a process of its own (rota.ml.wandb_card: the daemon never imports
wandb), as the job's account, on the same worker thread; how that went comes back to the
loop (an event, and ``card`` in the job's W&B view).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rota.backends.base import SAFE_PATH, RunAs, python_for
from rota.config import Settings
from rota.core.snapshot import PendingJob
from rota.core.spec import JobSpec, wants_mlflow
from rota.core.tiers import default_prices
from rota.errors import InvalidSpec, RotaError, TrackerError
from rota.ml import checkpoints, mlflow_bridge, wandb_bridge, wandb_card
from rota.server.access.secrets import Secrets
from rota.server.storage import cards
from rota.storage.owner_files import OwnerFiles
from rota.store.db import redact_url
from rota.store.repo import JobRecord, Store

log = logging.getLogger("rota.tracking")
#: How long a stopping daemon waits for MLflow calls still queued.
CLOSE_WAIT_S = 15.0
#: rota.ml.wandb_card's source, run with ``python -I -c``: the interpreter a job's account
#: can run need not have Rota, nor read the daemon's install
_WANDB_CARD = Path(wandb_card.__file__).read_text()


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
class WandbCard:
    """What adding a job's card to its W&B run needs, read on the loop."""

    job_env: dict[str, str]  # the job's env, sealed values opened (only WANDB_* is taken)
    rota_env: dict[str, str]  # what Rota gives the job for W&B, the API key among them
    offline_dir: str | None  # the job's offline run, as its output said
    cwd: str | None
    run_as: RunAs | None
    exit_code: int  # the run finishes again: failed unless the job completed

    def secrets(self) -> list[str]:
        """Values never to be shown (the API key), longest first."""
        found = {env[k] for env in (self.job_env, self.rota_env) for k in env
                 if k == wandb_bridge.KEY_SECRET and env[k]}
        return sorted(found, key=len, reverse=True)


def _daemons_account(user: str) -> RunAs | None:
    return None


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
    # the account a user's job runs as (a root daemon's jobs: their users'); on the loop
    run_as: Callable[[str], RunAs | None] = _daemons_account
    clock: Callable[[], float] = time.time
    _card_proc: subprocess.Popen[bytes] | None = None  # adding a card to a W&B run
    # --wandb jobs launched (or found running after a restart): their card goes to their
    # run when they end; a job that never ran has no run to add it to
    wandb_jobs: set[int] = field(default_factory=set)

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
        account = cards.account_of(self.run_as, user)  # git reads its cwd as its owner

        def work() -> None:
            try:
                git = cards.git_as(spec.cwd, account) if spec.cwd else None
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
        if spec.wandb:
            self.wandb_jobs.add(job_id)
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
        """The job ended for good: its MLflow run gets its log, checkpoint list and card
        and its final status; its W&B run gets its card. What they need is read here, on
        the loop (the store is the loop's); the card is made once, on the worker."""
        tracked = self.runs.pop(job_id, None)
        ran_wandb = job_id in self.wandb_jobs
        self.wandb_jobs.discard(job_id)
        if tracked is None and not ran_wandb:  # (most jobs: no store read)
            return
        row = self._row(job_id) if ran_wandb else None
        wb = self._wandb_card(job_id, row, state) if row is not None else None
        if tracked is None and wb is None:
            return
        facts: cards.CardFacts | None = None
        try:
            if self.store is not None:
                facts = cards.facts(self.store, job_id, now,
                                    default_prices=default_prices(self.settings.tier_set))
        except Exception as e:  # never lose the run's finish over its card
            log.warning("job %s: reading what its card tells failed: %s", job_id, e)
        if facts is not None and facts.attempts == 0:
            wb = None  # it never ran: it has no W&B run to add to
        account = cards.account_of(self.run_as, facts.job["user"]) if facts \
            else cards.NoAccount("its job could not be read")

        def work() -> None:
            card = self._card(job_id, tracked, facts, account) if facts is not None else None
            if tracked is not None:
                self._finish_mlflow(job_id, tracked, state, now, card, account)
            if wb is not None and card is not None:
                self._attach_wandb(job_id, wb, card)

        self._pool.submit(work)

    def _row(self, job_id: int) -> JobRecord | None:
        try:
            return self.store.get_job(job_id) if self.store is not None else None
        except RotaError as e:
            log.warning("job %s: reading it for its trackers failed: %s", job_id, e)
            return None

    def _finish_mlflow(self, job_id: int, tracked: Tracked, state: str, now: float,
                       card: dict[str, str] | None, account: cards.Account) -> None:
        """On the worker: the run's log, checkpoint list (read with the rights of
        ``account``, the job's), card and final status."""
        try:
            found = [] if isinstance(account, cards.NoAccount) else OwnerFiles.of(account).run(
                checkpoints.of_job, tracked.spec.checkpoint_dir, tracked.spec.cwd,
                reported=tracked.reported, since=tracked.submitted_at,
                now=now + checkpoints.SETTLE_S)
        except OSError:
            found = []
        listed = [{"path": c.path, "step": c.step, "size": c.size, "mtime": c.mtime,
                   "valid": c.valid} for c in found]
        tags = {"rota.state": state, "rota.attempts": str(tracked.attempts)}
        try:
            self._mlflow().finish(tracked.run_id, state=state, end_ms=int(now * 1000),
                                  log_path=tracked.log_path, checkpoints=listed, tags=tags,
                                  card=card)
        except Exception as e:
            log.warning("job %s: finishing its MLflow run failed: %s", job_id, e)

    def _card(self, job_id: int, tracked: Tracked | None, facts: cards.CardFacts,
              account: cards.Account) -> dict[str, str] | None:
        """On the worker: the card's files as the runs' files (``rota/card.md``...), its
        git state from the MLflow run's tags when the store had none (a run made before it
        kept them), else read now as ``account`` (the job's); None when it cannot be
        made."""
        if facts.git is None and tracked is not None:
            try:
                found = self._mlflow().git_of(tracked.run_id)
            except Exception as e:
                log.warning("job %s: reading its MLflow run's git tags failed: %s", job_id, e)
                found = None
            if found is not None:
                facts.git = {**found, "source": cards.GIT_AT_SUBMIT}
        try:
            facts = cards.with_git(facts, account)
            return {f"rota/{name}": text for name, text in cards.card_files(facts).items()}
        except Exception as e:
            log.warning("job %s: making its card for its runs failed: %s", job_id, e)
            return None

    # --- the card on the W&B run ----------------------------------------------------------
    def _wandb_card(self, job_id: int, row: JobRecord, state: str) -> WandbCard | None:
        """On the loop: the job's W&B environment as at its launch (the API key from its
        user's stored secret), its account and its offline run; None when W&B is off in
        the job or what it needs cannot be had (said once, in the log)."""
        try:
            spec = JobSpec.stored(dict(row.spec))
            job_env = self.secrets.launch_env(spec, job_id)
            name = spec.secrets.get(wandb_bridge.KEY_SECRET, wandb_bridge.KEY_SECRET)
            key = self.secrets.values(row.user, {name}).get(name)
            run_as = self.run_as(row.user)
        except Exception as e:  # never lose the job's end over its card
            log.warning("job %s: its card cannot be added to its W&B run: %s", job_id, e)
            return None
        if wandb_card.is_disabled(job_env):
            return None
        found = ((row.progress or {}).get("links") or {}).get("wandb") or {}
        return WandbCard(job_env=job_env, rota_env=self._wandb_env(spec, job_id, key),
                         offline_dir=found.get("offline_dir"), cwd=spec.cwd, run_as=run_as,
                         exit_code=0 if state == "completed" else 1)

    def _attach_wandb(self, job_id: int, wb: WandbCard, card: dict[str, str]) -> None:
        """On the worker: rota.ml.wandb_card run as the job's account, bounded by its
        timeout; the outcome goes to the loop."""
        private = Path(tempfile.mkdtemp(prefix=f"rota-wandb-card-{job_id}-"))
        try:
            card_dir = private / "card"
            for rel, text in card.items():  # rota/card.md...: the names the run gets
                (card_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                (card_dir / rel).write_text(text)
            if wb.run_as is not None:  # its account reads the card and writes beside it
                for p in [private, *private.rglob("*")]:
                    os.chown(p, wb.run_as.uid, wb.run_as.gid, follow_symlinks=False)
            said = self._run_wandb_card(wb, card_dir, private)
        except Exception as e:
            said = f"{type(e).__name__}: {e}"
            ok = False
        else:
            ok = said.startswith("/")  # the card run's folder, else why not
        finally:
            shutil.rmtree(private, ignore_errors=True)
        for secret in wb.secrets():  # whatever wandb said, the key is never repeated
            said = said.replace(secret, "***")
        if not ok:
            log.warning("job %s: adding its card to its W&B run failed: %s", job_id, said)
        self.post(self._wandb_attached, job_id, ok, said)

    def _run_wandb_card(self, wb: WandbCard, card_dir: Path, private: Path) -> str:
        """The card run's folder (its exit status 0), else why it failed."""
        python = python_for(wb.run_as)
        if python is None:
            return "no Python interpreter the job's account can run"
        home = wb.run_as.home if wb.run_as is not None else os.environ.get("HOME", "/")
        path = SAFE_PATH if wb.run_as is not None else os.environ.get("PATH", os.defpath)
        env = wandb_card.environment(wb.job_env, wb.rota_env, offline_dir=wb.offline_dir,
                                     cwd=wb.cwd, private=str(private), home=home, path=path)
        argv = [python, "-I", "-c", _WANDB_CARD, str(card_dir),
                "--exit-code", str(wb.exit_code)]
        extra: dict[str, Any] = {} if wb.run_as is None else wb.run_as.popen_args()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True,
                                **extra)
        self._card_proc = proc
        try:
            out, err = proc.communicate(timeout=wandb_card.TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc)  # wandb's service process too
            proc.communicate()
            return f"it took over {wandb_card.TIMEOUT_S:.0f} s and was stopped"
        finally:
            self._card_proc = None
        lines = out.decode(errors="replace").strip().splitlines()
        if proc.returncode == 0 and lines:
            return lines[-1]
        said = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        ours = [ln[len(wandb_card.SAID):] for ln in said if ln.startswith(wandb_card.SAID)]
        return (ours or said or [f"exit status {proc.returncode}"])[-1].strip()

    def _wandb_attached(self, job_id: int, ok: bool, said: str) -> None:
        """On the loop: an event, and the outcome kept for the job's W&B view."""
        if self.store is None:
            return
        record = {"card": "attached", "card_run": said} if ok \
            else {"card": "failed", "card_error": said}
        try:
            row = self.store.get_job(job_id)
            self.store.set_tracking(job_id, {**(row.tracking or {}), "wandb": record})
            self.store.add_event(
                job_id=job_id, kind="wandb" if ok else "wandb_error", now=self.clock(),
                message="card added to its W&B run" if ok
                else f"card not added to its W&B run: {said}")
        except RotaError as e:
            log.warning("job %s: recording its W&B card failed: %s", job_id, e)

    # --- the job's environment --------------------------------------------------------
    def launch_env(self, *, job_id: int, user: str, spec: JobSpec) -> dict[str, str]:
        """What trackers and stored secrets put in an attempt's environment, and the
        job's ``--secret-env`` values unsealed (stored sealed: rota.server.access.secrets). A
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
        if spec.wandb:  # (a key the job maps from a secret of its own: set just below)
            self.wandb_jobs.add(job_id)
            env.update(self._wandb_env(spec, job_id, None if wandb_bridge.KEY_SECRET in
                                       spec.secrets else values.get(wandb_bridge.KEY_SECRET)))
        env.update({var: values[name] for var, name in spec.secrets.items()})
        return env

    def _wandb_env(self, spec: JobSpec, job_id: int, api_key: str | None) -> dict[str, str]:
        return wandb_bridge.environment(
            spec, job_id=job_id, instance=self.instance, entity=self.settings.wandb_entity,
            default_project=self.settings.wandb_project, api_key=api_key)

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
            card = (tracking or {}).get("wandb") or {}
            if card.get("card"):  # how adding its card went, once it ended
                out["wandb"]["card"] = card["card"] if card["card"] != "failed" \
                    else f"failed: {card.get('card_error')}"
        return out or None

    def close(self, wait: float = CLOSE_WAIT_S) -> None:
        """Let queued MLflow calls finish (a bounded wait), then stop the worker; a card
        being added to a W&B run is stopped (the daemon is going)."""
        import threading

        if self._card_proc is not None:
            _kill_group(self._card_proc)
        t = threading.Thread(target=self._pool.shutdown, kwargs={"wait": True}, daemon=True)
        t.start()
        t.join(wait)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """``proc`` and what it started (its own session: wandb's service process)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
