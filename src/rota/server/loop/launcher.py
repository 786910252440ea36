"""Starting jobs: the launch intents, the launches, and the records of their handles.

A pass's starts are committed together as intents (PENDING -> STARTING and the attempt)
before any process exists (write-ahead); then each backend gets its share at once. A
backend that answers later (``launch_later``) has each started job watched as soon as it
is known; the handles are stored with the next write or within ``record_after`` seconds,
since a transaction per answer would cost more than the job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rota.backends.base import (
    Handle,
    Launched,
    LaunchFailed,
    LaunchOutcome,
    LaunchRequest,
    RunAs,
)
from rota.config import Settings
from rota.core.argv import cuda_visible_devices, inject_cuda_arg, substitute_checkpoint
from rota.core.lifecycle import JobState
from rota.core.plan import Start
from rota.core.snapshot import MILLI, PendingJob
from rota.core.spec import JobSpec
from rota.core.tiers import charge
from rota.errors import BackendError, RotaError, StoreError, TrackerError
from rota.ml import checkpoints
from rota.server.access.accounts import AccountRules
from rota.server.api.pool_reads import engine_job as engine_job_of
from rota.server.jobs.batch import Batch, each
from rota.server.jobs.device_monitor import DeviceMonitor
from rota.server.jobs.job_output import checkpoints_of, reader_for
from rota.server.jobs.job_table import JobTable
from rota.server.jobs.running import Running
from rota.server.jobs.stopper import Stopper
from rota.server.loop.backend_set import BackendSet
from rota.server.loop.forwarding import engine_after
from rota.server.storage.datasets import DatasetMissing, Datasets
from rota.server.storage.workspaces import WORKSPACE_ENV, Workspaces, workspace_name
from rota.server.tracking.metrics import Metrics
from rota.server.tracking.outputs import events_path, stop_file
from rota.server.tracking.trackers import Tracking
from rota.storage import job_fetch
from rota.storage.owner_files import OwnerFiles
from rota.store.repo import LaunchInfo, Store

if TYPE_CHECKING:
    from rota.server.loop.exits import Exits

log = logging.getLogger("rota.daemon")


def gpu_text(gpus: tuple[int, ...]) -> str:
    return ",".join(map(str, gpus)) or "none"


class Launcher:
    def __init__(self, *, settings: Settings, store: Store, clock: Callable[[], float],
                 table: JobTable, backends: BackendSet, monitor: DeviceMonitor,
                 tracking: Tracking, metrics: Metrics, stopper: Stopper, exits: Exits,
                 batch: Batch, record_after: float,
                 workspaces: Workspaces | None = None,
                 datasets: Datasets | None = None) -> None:
        self.settings, self.store, self.clock = settings, store, clock
        self.table, self.backends, self.monitor = table, backends, monitor
        self.tracking, self.metrics, self.stopper, self.exits = tracking, metrics, stopper, exits
        self.batch, self.record_after = batch, record_after
        self.workspaces = workspaces  # each job's folder of its user and project
        self.datasets = datasets  # the dataset versions jobs read
        self.loop: asyncio.AbstractEventLoop | None = None  # set when the daemon starts
        self.in_flight = 0  # sent to a backend that answers later, not answered yet
        self.unrecorded: list[tuple[Running, LaunchOutcome]] = []  # answered, not stored
        self._record_timer: asyncio.TimerHandle | None = None
        self.accounts = AccountRules.here(settings.user, settings.shared_account)
        # in session names: two homes of one account share its tmux/screen server
        self.home_tag = hashlib.sha1(str(settings.home).encode()).hexdigest()[:6]
        self.logs_dir, self.status_dir = settings.logs_dir, settings.status_dir

    def start(self, starts: list[Start], now: float) -> None:
        """Commit the intents of a pass's starts in one transaction, then launch them."""
        runs: list[Running] = []
        try:
            with self.store.transaction():
                self.write_launches()
                rows = self.store.launch_info((s.job_id for s in starts),
                                              spec_known=self.table.fresh_specs)
                runs = self._intend(starts, rows, now)
        except Exception:
            # the commit failed: no intent is stored, so none may look started
            for run in runs:
                self._forget_intent(run)
            raise
        if runs:
            self._launch_all(runs)

    def _intend(self, starts: list[Start], rows: dict[int, LaunchInfo],
                now: float) -> list[Running]:
        """Store the launch intents; a job the store no longer has pending stays queued:
        the next pass decides."""
        intents: list[tuple[Running, dict[str, object]]] = []
        for start in starts:
            pending = self.table.queue.remove(start.job_id)
            row = rows.get(start.job_id)
            if pending is None:
                continue
            if row is None:
                log.error("job %s is no longer pending in the store; not started",
                          start.job_id)
                self.table.queue.add(pending)
                continue
            run = self._run_of(start, row, pending, now)
            tier, price = charge(self.settings.tier_set, run.spec)  # fixed from now on
            readings = [self.monitor.readings[i] for i in start.gpu_indices
                        if i in self.monitor.readings]
            # the kind it runs on: this machine's GPU, or the type an engine was asked for
            gpu_type = readings[0].name if readings else run.spec.gpu_type
            intents.append((run, {"tier": tier, "price": price, "gpu_type": gpu_type,
                "number": run.attempt_no, "gpu_indices": list(start.gpu_indices),
                "gpu_uuids": [r.uuid for r in readings],
                "milli": start.milli_per_gpu, "gpu_mem": start.gpu_mem,
                "backend": run.backend.name, "log_path": str(run.log_path),
                "status_path": str(run.status_path), "started_at": now}))
        try:
            ids = self.store.start_attempts(
                [(run.job_id, attempt, f"attempt {run.attempt_no} on GPUs {gpu_text(run.gpus)}")
                 for run, attempt in intents], now=now)
        except Exception:
            for run, _ in intents:
                self.table.queue.add(run.pending)
            raise
        runs = []
        for (run, _), attempt_id in zip(intents, ids, strict=True):
            run.attempt_id = attempt_id
            self.metrics.queue_wait.observe(max(0.0, now - rows[run.job_id].updated_at))
            run.output = reader_for(run, rows[run.job_id].progress)
            self.table.states[run.job_id] = JobState.STARTING
            self.table.running[run.job_id] = run
            runs.append(run)
        return runs

    def _run_of(self, start: Start, row: LaunchInfo, pending: PendingJob,
                now: float) -> Running:
        job_id, number = start.job_id, row.attempts + 1
        spec = self.table.fresh_specs.pop(job_id, None)
        if spec is None or number != 1:
            spec = JobSpec.stored(row.spec if row.spec is not None
                                  else self.store.get_job(job_id).spec)
        logs, status = self.logs_dir, self.status_dir
        return Running(job_id=job_id, attempt_id=0, attempt_no=number, spec=spec,
                       gpus=start.gpu_indices, milli=start.milli_per_gpu,
                       gpu_mem=start.gpu_mem, backend=self.backends.get(
                           self.backends.name_of(spec)),
                       started_at=now, pending=pending,
                       failures=row.failures, log_path=logs / f"{job_id}.log",
                       status_path=status / f"{job_id}-{number}.json",
                       submitted_at=row.created_at, user=row.user)

    def _forget_intent(self, run: Running) -> None:
        """Undo _intend in memory after its transaction was rolled back."""
        self.table.running.pop(run.job_id, None)
        self.table.states[run.job_id] = JobState.PENDING
        self.table.queue.add(run.pending)

    def _launch_all(self, runs: list[Running]) -> None:
        """Spawn the processes (each backend gets its share at once), then record their
        handles in one commit."""
        outcomes: dict[int, LaunchOutcome] = {}
        batches: dict[str, list[tuple[Running, LaunchRequest]]] = {}
        for run in runs:
            try:
                req = self._request(run)
            except DatasetMissing as e:  # nothing started: it waits for it again
                outcomes[run.job_id] = LaunchFailed(str(e), lost=True)
                continue
            except (BackendError, TrackerError) as e:
                outcomes[run.job_id] = LaunchFailed(str(e))
                continue
            batches.setdefault(run.backend.name, []).append((run, req))
        for batch in batches.values():
            backend, reqs = batch[0][0].backend, [req for _, req in batch]
            # where the backend can, the loop goes on while the processes are started
            if self.loop is not None:
                self.in_flight += len(reqs)
                if backend.launch_later(reqs, functools.partial(
                        self._answered, [run for run, _ in batch])):
                    continue
                self.in_flight -= len(reqs)
            for (run, _), outcome in zip(batch, backend.launch_many(reqs), strict=True):
                outcomes[run.job_id] = outcome
        done = [run for run in runs if run.job_id in outcomes]
        if done:
            with self.batch():
                for run in done:
                    each(self._launched, run, outcomes[run.job_id])
            self.monitor.refresh()

    def _launched(self, run: Running, outcome: LaunchOutcome) -> None:
        if isinstance(outcome, LaunchFailed):
            self.exits.launch_failed(run, outcome.reason, outcome.lost)
        else:
            self.adopt(run, outcome.handle, JobState.STARTING)

    def _answered(self, runs: list[Running], i: int, outcome: LaunchOutcome) -> None:
        """A launch's outcome as soon as the backend knows it, while it starts the rest of
        its batch: a started job is watched at once (a short one ends long before a large
        batch is through). The store learns of it with the next write (an exit or a pass,
        whose transaction takes it first) or within ``record_after``."""
        self.in_flight -= 1
        run = runs[i]
        if isinstance(outcome, Launched):
            self._take_handle(run, outcome.handle)
            if run.backend.capabilities.engine:  # its engine id lets a child go there now
                self.exits.kick()
        self.unrecorded.append((run, outcome))
        if self._record_timer is None and self.loop is not None:
            self._record_timer = self.loop.call_later(self.record_after, self.record_launches)

    def record_launches(self) -> None:
        """Store the launches answered so far, in a transaction of their own."""
        with self.batch():
            self.write_launches()
        self.monitor.refresh()

    def write_launches(self) -> None:
        """The launches answered and not yet stored, into the open transaction."""
        self.forget_unrecorded(keep=True)
        todo, self.unrecorded = self.unrecorded, []
        for run, outcome in todo:
            if isinstance(outcome, LaunchFailed):
                each(self.exits.launch_failed, run, outcome.reason, outcome.lost)
            else:
                each(self._record_handle, run, outcome.handle, JobState.STARTING)

    def forget_unrecorded(self, *, keep: bool = False) -> None:
        """Stop the timer that stores answered launches (and, unless ``keep``, forget them:
        the work is taken up again from the store)."""
        if self._record_timer is not None:
            self._record_timer.cancel()
            self._record_timer = None
        if not keep:
            self.unrecorded.clear()

    def _request(self, run: Running) -> LaunchRequest:
        spec = run.spec
        run_as = self.run_as(run.user)
        # its checkpoints and TensorBoard folder are read with its account's rights
        run.files = OwnerFiles.of(run_as)
        if run.output is not None:
            run.output.files = run.files
        resume = self._resume_point(run)
        argv = list(spec.command)
        if spec.cuda_arg and not spec.shell:  # a container sees its GPUs as 0..n-1
            argv = inject_cuda_arg(argv, list(range(len(run.gpus))) if spec.image
                                   else list(run.gpus))
        if not spec.shell:
            argv = substitute_checkpoint(argv, resume)
        env = dict(spec.env)
        env.update(self.tracking.launch_env(job_id=run.job_id, user=run.user, spec=spec))
        if resume is not None:
            env["ROTA_RESUME_FROM"] = resume
        env.update(CUDA_VISIBLE_DEVICES=cuda_visible_devices(list(run.gpus)),
                   ROTA_JOB_ID=str(run.job_id), ROTA_ATTEMPT=str(run.attempt_no),
                   ROTA_GPU_FRACTION=f"{run.milli / MILLI:g}",
                   ROTA_GRACE_SECONDS=f"{spec.grace:g}",
                   ROTA_EVENTS_FILE=str(events_path(run.status_path)),
                   ROTA_STOP_FILE=str(stop_file(run.status_path)),
                   ROTA_STOP_SIGNAL=spec.stop_signal, ROTA_LOG_PATH=str(run.log_path),
                   ROTA_POOL=self.settings.pool_set.get(spec.pool)[0])
        if not run.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""
        if spec.image:  # the image the job runs in, for it to record (a Kubernetes pod's
            env["ROTA_IMAGE"] = spec.image  # is set by its renderer: the pool may give it)
        gpu_tag = ".".join(map(str, run.gpus)) or "cpu"
        workspace = None  # this machine's folder, for a container to mount
        engine_workspace = None  # USER/PROJECT, for a cluster pool that gives one
        brings = False  # a cluster job brings its datasets or workspace to its node first
        if self.workspaces is not None and spec.workspace:
            kind = self.settings.workspace_kind(spec.pool)
            if kind in ("here", "shared"):  # the same path, here or on the nodes
                env[WORKSPACE_ENV] = str(self.workspaces.ensure(run.user, spec.project,
                                                                 run_as, run.job_id))
                workspace = env[WORKSPACE_ENV] if kind == "here" else None
            if kind in ("shared", "claim"):
                engine_workspace = workspace_name(run.user, spec.project)
            if kind == "synced":  # the job brings its copy from the bucket, sends it back
                env.update(self.workspaces.job_sync_env(run.user, spec.project))
                brings = True
        datasets: dict[str, str] = {}
        shell = spec.shell
        if self.datasets is not None and spec.datasets:
            if run.backend.capabilities.engine:  # the job fetches them on its node first
                env.update(self.datasets.engine_env(spec))
                brings = True
            else:
                found = self.datasets.launch(run.job_id, spec)
                env.update(found)
                if spec.image:  # mounted read-only under /datasets
                    datasets = self.datasets.mounts(found)
        if brings:  # with the daemon's own Python where the cluster shares its install
            # (as an evaluation's jobs do), the image's in a container
            argv = job_fetch.wrap(["/bin/sh", "-c", *argv] if shell else argv,
                                  "python3" if spec.image else sys.executable)
            shell = False
        if run_as is not None and not run.backend.capabilities.run_as:
            raise BackendError(f"job {run.job_id}: {run.backend.name} cannot start a job as "
                               f"another account yet ({run_as.user}); submit it to the local "
                               "pool or a container (docs/security.md)")
        engine_job = None
        where = f"on GPUs {gpu_text(run.gpus)}"
        if run.backend.capabilities.engine:  # a cluster's engine places it
            engine_job = engine_job_of(run.job_id, run.user, spec, run.attempt_no, env,
                                       install=self.backends.install)
            engine_job = dataclasses.replace(engine_job, argv=tuple(argv), shell=shell,
                                             workspace=engine_workspace,
                                             after=engine_after(run, self.table),
                                             run_as=run_as.user if run_as else None)
            where = f"handed to {run.backend.name}"
        return LaunchRequest(run_as=run_as, job_id=run.job_id,
                             attempt=run.attempt_no, argv=argv,
                             shell=shell, env=env, cwd=spec.cwd, conda=spec.conda,
                             log_path=run.log_path, status_path=run.status_path,
                             session_name=f"rota-{run.job_id}-gpu{gpu_tag}-{self.home_tag}",
                             log_header=f"=== rota: job {run.job_id} attempt {run.attempt_no} "
                                        f"{where}", engine_job=engine_job,
                             image=spec.image, cpus=spec.cpus, memory=spec.memory,
                             network=spec.network, workspace=workspace, datasets=datasets)

    def run_as(self, user: str) -> RunAs | None:
        """The account ``user``'s job runs as (None: the daemon's own); a job that cannot
        (the account is gone, the rules changed since its submit) fails its launch with the
        reason. Looked up per launch: a mapping changed by an admin applies at once."""
        if user == self.settings.user:
            return None  # the owner's, as ever: no lookup on the single-user path
        try:
            account = self.accounts.account_in(self.store, user)
        except RotaError as e:
            raise BackendError(str(e)) from None
        return None if account is None else RunAs.of(account)

    def files_of(self, user: str) -> OwnerFiles:
        """``user``'s files, acted on with the rights its jobs run with (an account that is
        gone or not allowed: no one's, so nothing private is reached)."""
        if user == self.settings.user:
            return OwnerFiles(None)
        try:  # a store that fails is not an account's answer: that error goes on up
            account = self.accounts.account_in(self.store, user)
            return OwnerFiles.of(None if account is None else RunAs.of(account))
        except StoreError:
            raise
        except RotaError:
            return OwnerFiles.nobody()

    def _resume_point(self, run: Running) -> str | None:
        """The newest valid checkpoint of this job for a retry to continue from (a first
        attempt starts fresh): found under its checkpoint_dir, or reported by rota.job."""
        if run.attempt_no < 2:
            return None
        best = checkpoints.newest_valid(checkpoints_of(run, since=run.submitted_at,
                                                       now=self.clock()))
        if best is None:
            return None
        self.store.add_event(job_id=run.job_id, kind="resume", now=self.clock(),
                             message=f"attempt {run.attempt_no} resumes from {best.path}"
                                     + (f" (step {best.step})" if best.step is not None else ""))
        return best.path

    # --- adopting a process ----------------------------------------------------------------
    def adopt(self, run: Running, handle: Handle, src: JobState) -> None:
        """A process exists for the job (just launched, or found after a restart): record
        its handle, the job running, and watch it with its timers armed."""
        self._record_handle(run, handle, src)
        self._take_handle(run, handle)

    def _record_handle(self, run: Running, handle: Handle, src: JobState) -> None:
        """The store's part of adopting a process: its handle, and the job running. A job
        handed to a cluster's engine stays STARTING while it waits in the engine's queue;
        it runs once the engine starts it (``engine_started``)."""
        if src is JobState.STARTING:
            self.metrics.starts.inc()
        self.store.update_attempt(run.attempt_id, handle=handle.to_json())
        if src is JobState.STARTING and run.backend.capabilities.engine \
                and not run.engine_started:
            self.store.add_event(job_id=run.job_id, kind="handed", now=self.clock(),
                                 message=f"handed to {handle.backend} as job "
                                         f"{handle.extra.get('engine_id')}")
            return
        if src is not JobState.RUNNING:
            self.table.transition(run.job_id, src, JobState.RUNNING,
                                  message=f"pid {handle.pid} via {handle.backend}",
                                  started_at=run.started_at)

    def _take_handle(self, run: Running, handle: Handle) -> None:
        """Memory's part: the process is its job's, watched, with its timers armed."""
        run.handle = handle
        self.monitor.place(run)  # simulated GPUs: the job drives their figures
        self.exits.watch(run)
        if run.stop_reason is not None:  # stopped while its launch was in flight
            self.stopper.signal_now(run)
        if not run.backend.capabilities.engine:  # an engine's job: once it starts there
            self.stopper.arm_time_limit(run)

    def engine_started(self, status_path: str, started_at: float | None) -> None:
        """A cluster's engine has started the attempt of ``status_path`` (at ``started_at``,
        by the engine's clock if it says): the job runs from then on, and its time limit
        counts from then, not from its hand-over. Told once per attempt by each adapter
        (again after a daemon restart, when only the time limit is armed)."""
        job = Path(status_path).name.removesuffix(".json").rpartition("-")[0]
        run = self.table.running.get(int(job)) if job.isdigit() else None
        if run is None or run.handle is None or run.engine_started \
                or str(run.status_path) != status_path:
            return
        now = self.clock()
        with self.batch():
            self.write_launches()  # its handle first
            run.engine_started = True
            # within the hand-over and now: the engine's clock may not be this machine's
            run.started_at = min(max(started_at or now, run.started_at), now)
            if self.table.state(run.job_id) is JobState.STARTING:
                self.table.transition(run.job_id, JobState.STARTING, JobState.RUNNING,
                                      message=f"started by {run.backend.name}",
                                      started_at=run.started_at)
        self.stopper.arm_time_limit(run)
