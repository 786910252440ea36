"""The daemon's control loop: the only writer of state.

Every change happens on the asyncio loop thread: API handlers, exits, timers and the
scheduling pass run one at a time, so the pass never races a submit or a cancel. A pass runs
at once after anything that can change a decision (submit, exit, release, device change)
and otherwise on a slow safety tick; there is no polling delay between a freed GPU and the
next start.

The loop itself is short; the work is done by its collaborators:

- ``JobTable`` (job_table.py): the jobs in memory (queue, running, states) and their
  transitions; the API reads its ``LiveJobs`` view;
- ``DeviceMonitor`` (device_monitor.py): GPU readings, peaks, history, the pass's views;
- ``Launcher`` (launcher.py): launch intents, launches, the records of their handles;
- ``Exits`` (exits.py): watching processes end and applying ``core.outcome``'s decision;
- ``Stopper`` (stopper.py): the stop handshake and time limits;
- ``JobCommands`` (job_commands.py): cancel, hold, release, preempt, requeue;
- ``BackendSet`` (backend_set.py): the backends, and whether one can run a job at all;
- ``IdleWatch`` (idle_watch.py): jobs holding GPUs that stay idle (flag, stop, waste).
- ``AlertSender`` (alert_sender.py): alerts (``alerts.alert(key, text, ...)``) out to the
  webhook, each once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence

from rota.backends.base import Backend
from rota.config import Settings
from rota.core.lifecycle import JobState
from rota.core.outcome import StopReason
from rota.core.plan import Plan
from rota.core.schedule import schedule
from rota.core.snapshot import GpuView, PendingJob, Policy, Snapshot
from rota.core.spec import JobSpec
from rota.devices.base import DeviceSource, GpuReading
from rota.errors import StoreError
from rota.server.access.secrets import Secrets
from rota.server.jobs.batch import each
from rota.server.jobs.device_monitor import DeviceMonitor
from rota.server.jobs.job_commands import JobCommands
from rota.server.jobs.job_output import next_read_in, read_ended, read_outputs
from rota.server.jobs.job_table import JobTable, LiveJobs, pending_of
from rota.server.jobs.queue import PendingQueue
from rota.server.jobs.running import Running, preemption_view
from rota.server.jobs.stopper import Stopper
from rota.server.loop.backend_set import BackendSet
from rota.server.loop.exits import Exits
from rota.server.loop.forwarding import forwarded
from rota.server.loop.launcher import Launcher
from rota.server.loop.resync import Resync
from rota.server.policy.alert_sender import AlertSender, webhook_url
from rota.server.policy.fair_order import FairOrder
from rota.server.policy.idle_watch import IdleWatch
from rota.server.policy.quotas import Quotas
from rota.server.schedules.eval_schedules import EvalSchedules
from rota.server.schedules.pipelines import Pipelines
from rota.server.storage.artifacts import Artifacts
from rota.server.storage.datasets import Datasets
from rota.server.storage.share_links import ShareLinks
from rota.server.storage.workspaces import Workspaces
from rota.server.tracking.log_limit import configure as bound_logs_to
from rota.server.tracking.metrics import Metrics
from rota.server.tracking.outputs import PARSE_BUDGET_S, READ_EVERY_S
from rota.server.tracking.trackers import Tracking
from rota.store.repo import JobRecord, Store

log = logging.getLogger("rota.daemon")
# the longest a started job waits to be stored as running when nothing else is written
LAUNCH_RECORD_S = 0.01
#: recorded exits between two tidy-ups of the backends' records of ended attempts (the
#: local runner's journal segments)
TIDY_EVERY_EXITS = 5000
Clock = Callable[[], float]


class Daemon:
    def __init__(self, settings: Settings, store: Store, devices: DeviceSource, *,
                 clock: Clock = time.time) -> None:
        self.settings, self.store, self.devices, self.clock = settings, store, devices, clock
        bound_logs_to(settings.max_log_bytes)  # (read at each read of the jobs' output)
        self.draining = False
        self.last_plan = Plan()
        self.pass_seconds: list[float] = []
        self._wake = asyncio.Event()
        self.metrics = Metrics()
        self.secrets = Secrets(store, settings.secrets_key_path, clock)
        self.tracking = Tracking(settings, self.secrets, post=self._post, store=store,
                                 run_as=lambda user: self.launcher.run_as(user), clock=clock)
        self.table = JobTable(settings, store, clock, self.tracking, self.kick)
        self.stopper = Stopper(store, clock, self.table.running)
        self.monitor = DeviceMonitor(devices, store, clock, self.table.running,
                                     on_lost=self._gpu_lost)
        self.idle = IdleWatch(settings.idle, store, clock, self.table.running, self.stopper)
        self.quotas = Quotas(store, clock, self.table.running,
                             lambda job_id, why: self.preempt(job_id, why),
                             settings.quota_check,
                             alert=lambda key, text, **facts: self.alert(key, text, **facts))
        self.commands = JobCommands(store, clock, self.table, self.stopper, self.kick)
        self.backends = BackendSet(settings, simulated_gpus=devices.kind == "simulated")
        self.artifacts = Artifacts(settings, store, clock, post=self._post,
                                   run_as=lambda user: self.launcher.run_as(user),
                                   later=self.later)
        self.share_links = ShareLinks(settings, store, self.artifacts, clock)
        self.workspaces = Workspaces(settings, store, clock, post=self._post, kick=self.kick,
                                     later=self.later,
                                     run_as=lambda user: self.launcher.run_as(user))
        self.datasets = Datasets(settings, store, clock, post=self._post, kick=self.kick,
                                 later=self.later, objects=self.artifacts.objects,
                                 state=self.table.states.get,
                                 run_as=lambda user: self.launcher.run_as(user))
        self.exits = Exits(store=store, clock=clock, table=self.table, monitor=self.monitor,
                           tracking=self.tracking, metrics=self.metrics, batch=self.batch,
                           write_launches=lambda: self.launcher.write_launches(),
                           kick=self.kick, tidy=self._tidy, tidy_every=TIDY_EVERY_EXITS,
                           artifacts=self.artifacts, datasets=self.datasets,
                           workspaces=self.workspaces)
        self.launcher = Launcher(settings=settings, store=store, clock=clock, table=self.table,
                                 backends=self.backends, monitor=self.monitor,
                                 tracking=self.tracking, metrics=self.metrics,
                                 stopper=self.stopper, exits=self.exits, batch=self.batch,
                                 record_after=LAUNCH_RECORD_S, workspaces=self.workspaces,
                                 datasets=self.datasets)
        self.fair = FairOrder(settings.priority, store, clock)  # [priority] fair_share
        self.eval_schedules = EvalSchedules(self)  # evaluations that run by themselves
        self.pipelines = Pipelines(self)  # recurring fine-tuning rounds
        self.alerts = AlertSender(
            settings.alerts, store, clock=clock, batch=self.batch, rng=random.Random(),
            url=lambda: webhook_url(settings.alerts, self.secrets, settings.user))
        self.metrics.watch(self)  # reads the collaborators' figures at once
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        # set once every pending job is in the queue (_load_queue, after start() returns)
        self.queue_ready = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.resync = Resync(self)  # after a batch that could not be stored
        for d in (settings.logs_dir, settings.status_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)

    # --- what the API, metrics and recovery read (see job_table / device_monitor) --------
    @property
    def queue(self) -> PendingQueue:
        return self.table.queue

    @property
    def running(self) -> dict[int, Running]:
        return self.table.running

    @property
    def states(self) -> dict[int, JobState]:
        return self.table.states

    @property
    def live(self) -> LiveJobs:
        return self.table.live

    @property
    def readings(self) -> dict[int, GpuReading]:
        return self.monitor.readings

    @property
    def paused(self) -> set[int]:
        return self.monitor.paused

    @property
    def history(self) -> dict[int, deque[tuple[float, float, int, float]]]:
        return self.monitor.history

    # --- start and stop ------------------------------------------------------------------
    async def start(self) -> None:
        from rota.server.loop.recovery import recover

        self.loop = asyncio.get_running_loop()
        for part in (self.stopper, self.exits, self.launcher, self.quotas):
            part.loop = self.loop
        self.quotas.kick = self.kick
        self.tracking.instance = self.backends.install = self._instance_id()
        self.backends.on_engine_start = self._engine_started
        self.monitor.read()
        self.monitor.load_paused()
        self.quotas.load()
        self.draining = self.store.get_setting("draining") == "1"
        with self.store.transaction():
            recover(self, pending=False)  # the pending jobs come page by page, answering
        self.artifacts.resume()
        self.workspaces.start(self.running.values())  # (a bucket's copies: see held)
        self.datasets.start()
        self._tidy()
        self.monitor.refresh()
        self.monitor.sample_history(self.clock())
        self._tasks = [asyncio.create_task(self._load_queue(), name="queue"),
                       asyncio.create_task(self._scheduler_loop(), name="scheduler"),
                       asyncio.create_task(self._device_loop(), name="devices"),
                       asyncio.create_task(self._outputs_loop(), name="outputs")]
        self.eval_schedules.start()
        self.pipelines.start()
        self.alerts.start()
        self.kick()

    async def stop(self) -> None:
        """Stop the loop; running jobs keep running and are re-adopted at the next start."""
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        self.resync.cancel()
        if self.launcher.unrecorded:
            self.launcher.record_launches()
        self.exits.record_exits()  # those gathered, not yet recorded
        for r in self.running.values():
            r.cancel_timers()
            self.exits.unwatch(r)
        await self.alerts.stop()
        self.devices.close()
        self.tracking.close()
        self.artifacts.close()
        self.workspaces.close()
        self.datasets.close()
        self.backends.on_engine_start = None
        self.backends.close()

    def _engine_started(self, status_path: str, started_at: float | None) -> None:
        """From an engine's poller thread: onto the event loop."""
        if self.loop is not None and not self._stopping:
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                self.loop.call_soon_threadsafe(self.launcher.engine_started, status_path,
                                               started_at)

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop after ``delay`` seconds, unless the daemon stops first."""
        if self.loop is not None and not self._stopping:
            self.loop.call_later(delay, lambda: None if self._stopping else fn())

    def _post(self, fn: Callable[..., None], *args: object) -> None:
        """Run ``fn`` on the event loop thread (called from worker threads)."""
        assert self.loop is not None, "the daemon has not started"
        self.loop.call_soon_threadsafe(fn, *args)

    def _instance_id(self) -> str:
        """This daemon's id, made once and kept in its store (names W&B runs)."""
        found = self.store.get_setting("instance_id")
        if found is None:
            found = secrets.token_hex(4)
            self.store.set_setting("instance_id", found)
        return found

    def kick(self) -> None:
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def queue_loaded(self) -> bool:
        """Every pending job is in the queue (passes wait for it; so should a caller that
        runs passes itself after ``start``: ``await daemon.queue_ready.wait()``)."""
        return self.queue_ready.is_set()

    async def _load_queue(self) -> None:
        """The pending jobs join the queue after the start (recovery.load_pending); no pass
        runs before they all have, so none starts a job ahead of one not read yet."""
        from rota.server.loop.recovery import load_pending

        t0 = time.perf_counter()
        if await load_pending(self):
            log.info("%d waiting jobs taken up in %.1f s", len(self.queue),
                     time.perf_counter() - t0)
        self.queue_ready.set()  # (or a resync took the queue up whole meanwhile)
        gc.freeze()  # the queue lives as long as the daemon (serve._tune_gc)
        self.kick()

    async def _scheduler_loop(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.safety_tick)
            self._wake.clear()
            if self.diverged:  # memory is not to be trusted until it is taken up again
                continue
            if not self.queue_loaded:  # _load_queue kicks once it has
                continue
            try:
                self.schedule_pass()
            except Exception:  # the loop must survive one bad pass; the error is logged
                log.exception("scheduling pass failed")

    async def _device_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.settings.device_poll)
            try:
                if self.read_devices():
                    self.kick()
                now = self.clock()
                self.idle.observe(self.readings, now)
                self.monitor.sample_history(now)
            except Exception:
                log.exception("reading GPUs failed")

    async def _outputs_loop(self) -> None:
        wait = READ_EVERY_S
        while not self._stopping:
            await asyncio.sleep(wait)
            wait = READ_EVERY_S
            try:
                with self.batch():
                    now, deadline = self.clock(), time.perf_counter() + PARSE_BUDGET_S
                    runs = list(self.running.values())
                    read_outputs(self.store, self.tracking, runs, now, deadline=deadline)
                    read_ended(self.store, self.tracking, self.table.ended_output,
                               self.running, now, deadline=deadline)
                    self.idle.write(now)
                wait = next_read_in(runs, self.table.ended_output)
            except Exception:
                log.exception("reading jobs' output failed")

    # --- devices and backends ------------------------------------------------------------
    def read_devices(self) -> bool:
        """Take a reading (jobs on GPUs that vanished or turned unhealthy are stopped and
        queued again); True when something changed that the scheduler should look at."""
        return self.monitor.read()

    def _gpu_lost(self, run: Running, gpus: list[int]) -> None:
        self.stopper.stop(run, StopReason.GPU_LOST, f"GPU {gpus} vanished or became unhealthy")

    def gpu_views(self) -> list[GpuView]:
        return self.monitor.gpu_views()

    def backend(self, name: str) -> Backend:
        return self.backends.get(name)

    # --- the scheduling pass ---------------------------------------------------------------
    def policy(self) -> Policy:
        s = self.settings
        return Policy(mem_threshold=s.mem_threshold, util_threshold=s.util_threshold,
                      backfill=s.backfill, draining=self.draining,
                      packing=s.packing, packing_seed=s.packing_seed,
                      estimate_jobs=s.start_estimates)

    def snapshot(self) -> Snapshot:
        gpus = self.gpu_views()
        self.queue.fit_to({g.index: g.memory_total for g in gpus})  # never-runnable aside
        deps = {d: self.job_state(d) for job in self.queue.with_dependencies()
                for d in job.after}
        over_quota, allowance = self.quotas.for_pass(self.clock())
        if self.workspaces.over:  # workspaces over their size quota hold their jobs
            over_quota = {**(over_quota or {}), **self.workspaces.over}
        running = preemption_view(self.running.values(), self.clock(), self.table.run_times)
        if self.fair.on:  # the multifactor order; no index by (priority, seq) then
            pending = self.fair.ordered(self.queue, len(gpus), self.running.keys())
            by_id = None
        else:
            pending, by_id = self.queue.ordered(), self.queue.index()
        # held back outside the pass: datasets being fetched, workspaces being brought
        held = self.workspaces.held(self.datasets.held(), self.queue.get,
                                    lambda: list(self.queue.index()))
        return Snapshot(gpus=gpus, pending=pending, over_quota=over_quota,
                        gpu_allowance=allowance, held=held,
                        dependency_states=deps, presorted=True,
                        by_id=by_id, smallest_milli=self.queue.smallest_milli(),
                        running=running)

    def schedule_pass(self) -> Plan:
        """Plan, then carry the plan out: starts (see Launcher.start), preemptions, and
        jobs whose dependency failed."""
        t0 = time.perf_counter()
        now = self.clock()
        plan = schedule(self.snapshot(), self.policy(), now)
        took = time.perf_counter() - t0
        self.pass_seconds = ([*self.pass_seconds, took])[-1000:]
        self.metrics.pass_seconds.observe(took)
        self.last_plan = plan
        starts = plan.starts + forwarded(
            self.queue.engine_queues(), self.running.values(), self.settings.pool_set,
            self.job_state, plan, now=now, draining=self.draining)
        if starts:
            self.launcher.start(starts, now)
            self.workspaces.started(self.running.get(s.job_id) for s in plan.starts)
        for p in plan.preemptions:
            victim = self.running.get(p.victim)
            if victim is not None and victim.stop_reason is None:
                self.preempt(p.victim, f"preempted to make room for job {p.for_job} "
                                       f"(priority {victim.pending.priority} yields)")
        doomed = [(job_id, reason.message) for job_id, reason in plan.reasons.items()
                  if reason.code == "dependency_failed" and job_id in self.queue]
        if doomed:
            with self.batch():
                for job_id, why in doomed:
                    each(self._dependency_failed, job_id, why, now)
        self._arm_backoff_timer(now)
        return plan

    def _dependency_failed(self, job_id: int, why: str, now: float) -> None:
        self.queue.remove(job_id)
        self.table.transition(job_id, JobState.PENDING, JobState.CANCELLED, message=why,
                              end_reason=why, ended_at=now)

    def _arm_backoff_timer(self, now: float) -> None:
        """Wake exactly when the earliest retry backoff ends, not on a poll."""
        soonest = min((r.until for r in self.last_plan.reasons.values() if r.until), default=None)
        if soonest is not None and self.loop is not None:
            self.loop.call_later(max(0.0, soonest - now) + 0.005, self.kick)

    # --- batches, and taking the work up again when one could not be stored ---------------
    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for a batch whose changes to the daemon's memory are made before
        it commits (exits, launch answers, output read). Should the commit fail, memory is
        ahead of the store: the daemon then takes its work up again from the store and the
        backends' records, as a restart would, rather than go on from a state it could not
        store (a job would look ended, or running, to it alone)."""
        try:
            with self.store.transaction():
                yield
        except StoreError:
            self.resync.after_failed_batch()

    @property
    def diverged(self) -> bool:
        """Memory is ahead of the store until the work is taken up again (no pass runs)."""
        return self.resync.diverged

    def _resync_soon(self, delay: float) -> None:
        self.resync.soon(delay)

    def _tidy(self) -> bool:
        """Let the backends drop their records of attempts whose end is stored (only once it
        is committed: a restart reads those records for what it has not stored). Not while
        memory is ahead of the store: the records of ends it holds alone are still needed."""
        if self.diverged:
            return False
        self.backends.tidy({str(r.status_path) for r in self.running.values()})
        return True

    # --- requests from people (called on the loop thread by the API: see job_commands) ---
    def preempt(self, job_id: int, why: str = "preempted by request") -> None:
        self.commands.preempt(job_id, why)

    def cancel(self, job_id: int) -> JobState:
        return self.commands.cancel(job_id)

    def requeue(self, job_id: int) -> None:
        self.commands.requeue(job_id)

    def hold(self, job_id: int) -> None:
        self.commands.hold(job_id)

    def release(self, job_id: int) -> None:
        self.commands.release(job_id)

    def set_paused(self, index: int, paused: bool) -> None:
        self.monitor.set_paused(index, paused)
        self.kick()

    def set_draining(self, on: bool) -> None:
        self.draining = on
        self.store.set_setting("draining", "1" if on else "0")
        self.store.add_event(job_id=None, kind="drain" if on else "undrain", now=self.clock())
        self.kick()

    def quotas_changed(self) -> None:
        """A quota was set, lifted or removed: read them again and run a pass (jobs it held
        may start now)."""
        self.quotas.load()
        self.kick()

    async def wait_for_end(self, job_id: int, timeout: float | None) -> JobState:
        return await self.table.wait_for_end(job_id, timeout)

    def job_state(self, job_id: int) -> JobState:
        return self.table.state(job_id)

    # --- alerts (rota.server.policy.alert_sender) -------------------------------------------------
    def alert(self, key: str, text: str, *, kind: str = "alert", user: str | None = None,
              **facts: object) -> bool:
        """Send ``text`` to the webhook once per ``key`` (e.g. "quota:7:2026-W48:80"); False
        when that key was alerted already. Stored now (in the caller's batch, if any), sent
        by the alerts task: never waits on the receiver."""
        return self.alerts.alert(key, text, kind=kind, user=user, **facts)

    # --- jobs joining the queue (intake, recovery.load_queue) ------------------------------
    def pending_of(self, row: JobRecord) -> PendingJob:
        return pending_of(row, self.table.run_times)

    def accept(self, rows: list[JobRecord], specs: Sequence[JobSpec] = ()) -> None:
        """Newly stored jobs join the queue and a pass runs (``specs``: what they were
        stored from, in order, kept for their first launch)."""
        self.table.accept(rows, specs)
        if specs:  # (a cluster pool's job fetches its datasets itself)
            self.datasets.want((r.id, s) for r, s in zip(rows, specs, strict=True)
                               if s.datasets and r.pool is None)

    def enqueue(self, row: JobRecord, *, queue: bool = True) -> None:
        self.table.enqueue(row, queue=queue)
