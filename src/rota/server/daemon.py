"""The daemon's control loop: the only writer of state.

Every change happens on the asyncio loop thread: API handlers, exits, timers and the
scheduling pass run one at a time, so the pass never races a submit or a cancel. A pass runs
at once after anything that can change a decision (submit, exit, release, device change)
and otherwise on a slow safety tick; there is no polling delay between a freed GPU and the
next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from rota.backends.base import Backend, ExitInfo, Handle, LaunchRequest
from rota.backends.common import reap
from rota.backends.registry import make_backend
from rota.config import Settings
from rota.core.argv import cuda_visible_devices, inject_cuda_arg, substitute_checkpoint
from rota.core.lifecycle import JobState
from rota.core.plan import Plan, Start
from rota.core.preempt import RunningJob
from rota.core.schedule import schedule
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy, Snapshot, to_milli
from rota.core.spec import JobSpec
from rota.devices.base import DeviceSource, GpuReading
from rota.errors import BackendError, Conflict, NotFound, StoreError, TrackerError
from rota.ml import checkpoints, oom
from rota.ml.parse import LineParser
from rota.server.logstream import read_tail
from rota.server.metrics import Metrics
from rota.server.outputs import READ_EVERY_S, OutputReader, Progress, events_path, stop_file
from rota.server.queue import PendingQueue
from rota.server.running import Running
from rota.server.secrets import Secrets
from rota.server.tracking import Tracking
from rota.store.repo import JobRecord, LaunchInfo, Store
from rota.units import format_memory

log = logging.getLogger("rota.daemon")
HISTORY_STEP = 10.0  # seconds between GPU history points
HISTORY_POINTS = 360  # one hour of them
# the longest a started job waits to be stored as running when nothing else is written
LAUNCH_RECORD_S = 0.01
#: recorded exits between two tidy-ups of the backends' records of ended attempts (the
#: local runner's journal segments)
TIDY_EVERY_EXITS = 5000
#: after a batch could not be stored: the first wait before the work is taken up again from
#: the store, and the longest between tries while the store still fails
RESYNC_FIRST_S = 0.0
RESYNC_MAX_S = 30.0
RESYNC_POLL_S = 0.05  # while launches are still unanswered
Clock = Callable[[], float]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _in_sessions(pid: int, shims: set[int]) -> bool:
    """Whether a process belongs to one of Rota's jobs: every job runs in the session its
    shim leads (one syscall, where walking each job's process tree would scan /proc)."""
    if pid in shims:
        return True
    try:
        return os.getsid(pid) in shims
    except OSError:
        return False


def _read_watched(fd: int) -> bytes:
    """What a watch fd holds at the job's end: the local runner's end record from its pipe;
    nothing from a pidfd (reading one is an error) or a runner that went away (EOF)."""
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


def _gpu_text(gpus: tuple[int, ...]) -> str:
    return ",".join(map(str, gpus)) or "none"


class Daemon:
    def __init__(self, settings: Settings, store: Store, devices: DeviceSource, *,
                 clock: Clock = time.time) -> None:
        self.settings, self.store, self.devices, self.clock = settings, store, devices, clock
        self.queue = PendingQueue()
        self.running: dict[int, Running] = {}
        self.states: dict[int, JobState] = {}  # every job the daemon has seen this run
        self.readings: dict[int, GpuReading] = {}
        self.paused: set[int] = set()
        self.draining = False
        self.last_plan = Plan()
        self.pass_seconds: list[float] = []
        self._backends: dict[str, Backend] = {}
        self._wake = asyncio.Event()
        self._exited: dict[int, asyncio.Event] = {}  # job id -> set when it ends
        self._exits: list[int] = []  # jobs whose process ended, recorded at the next turn
        self._exits_since_tidy = 0
        # launches answered and not yet stored (see _launch_answered)
        self._unrecorded: list[tuple[Running, Handle | str]] = []
        self._record_timer: asyncio.TimerHandle | None = None
        self._launches_in_flight = 0  # sent to a backend that answers later, not answered
        # set when memory is ahead of the store (a batch's commit failed) until the work is
        # taken up again from the store; no pass runs meanwhile
        self.diverged = False
        self._resync_timer: asyncio.TimerHandle | None = None
        self._resync_wait = RESYNC_FIRST_S
        self._simulated_dirty = False  # simulated GPUs' figures changed since the last read
        # per GPU: (time, allocated fraction, memory used, utilisation), the last hour
        self.history: dict[int, deque[tuple[float, float, int, float]]] = {}
        self._history_at = 0.0
        self.metrics = Metrics()
        self.metrics.watch(self)
        self.secrets = Secrets(store, settings.secrets_key_path, clock)
        self.tracking = Tracking(settings, self.secrets, post=self._post)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        for d in (settings.logs_dir, settings.status_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)

    # --- start and stop ------------------------------------------------------------------
    async def start(self) -> None:
        from rota.server.recovery import recover

        self.loop = asyncio.get_running_loop()
        self.tracking.instance = self._instance_id()
        self.read_devices()
        paused_uuids = self.store.paused_gpus()
        self.paused = {r.index for r in self.readings.values() if r.uuid in paused_uuids}
        self.draining = self.store.get_setting("draining") == "1"
        with self.store.transaction():
            recover(self)
        self._tidy()
        self._refresh_simulated()
        self._sample_history(self.clock())
        self._tasks = [asyncio.create_task(self._scheduler_loop(), name="scheduler"),
                       asyncio.create_task(self._device_loop(), name="devices"),
                       asyncio.create_task(self._outputs_loop(), name="outputs")]
        self.kick()

    async def stop(self) -> None:
        """Stop the loop; running jobs keep running and are re-adopted at the next start."""
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        if self._resync_timer is not None:
            self._resync_timer.cancel()
        if self._unrecorded:
            self._record_launches()
        for r in self.running.values():
            r.cancel_timers()
            self._unwatch(r)
        self.devices.close()
        self.tracking.close()

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

    async def _scheduler_loop(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.safety_tick)
            self._wake.clear()
            if self.diverged:  # memory is not to be trusted until it is taken up again
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
                self._sample_history(self.clock())
            except Exception:
                log.exception("reading GPUs failed")

    async def _outputs_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(READ_EVERY_S)
            try:
                with self._batch():
                    self.read_outputs()
            except Exception:
                log.exception("reading jobs' output failed")

    def read_outputs(self, runs: Iterable[Running] | None = None, *, final: bool = False) -> None:
        """Metrics and progress from what running jobs wrote since the last read, stored
        in one transaction (or in the caller's)."""
        now = self.clock()
        rows: list[dict[str, object]] = []
        progress: dict[int, dict[str, object]] = {}
        for run in list(self.running.values()) if runs is None else runs:
            out = run.output
            if out is None:
                continue
            out.read(now, final=final)
            rows += out.drain()
            if out.changed:  # offsets alone change with every line: stored with progress
                out.changed = False
                progress[run.job_id] = out.progress.to_json()
        if rows or progress:
            self.store.add_metrics(rows, progress)
        if rows:
            self.tracking.mirror(rows)

    def output_reader(self, run: Running, stored: dict[str, object] | None) -> OutputReader:
        """The reader of an attempt's output; a re-adopted attempt goes on where the stored
        progress says reading had got to, a new one starts at the log's current end."""
        progress = Progress.from_json(stored, run.attempt_no)
        # a later attempt's output follows the earlier ones' in the job's log (the first
        # attempt's log starts empty: no stat for it)
        if run.attempt_no > 1 and (stored is None or stored.get("attempt") != run.attempt_no):
            with contextlib.suppress(OSError):
                progress.log_offset = run.log_path.stat().st_size
        tb = run.spec.tensorboard_dir
        if tb is not None and not os.path.isabs(tb):
            tb = os.path.join(run.spec.cwd or ".", tb)
        return OutputReader(job_id=run.job_id, log_path=run.log_path,
                            events_path=events_path(run.status_path),
                            parser=LineParser(run.spec.metric_patterns), progress=progress,
                            tensorboard_dir=tb)

    def _sample_history(self, now: float) -> None:
        """One point per GPU every HISTORY_STEP seconds, the last hour kept (dashboard)."""
        if now - self._history_at < HISTORY_STEP:
            return
        self._history_at = now
        alloc: dict[int, int] = {}
        for r in self.running.values():
            for i in r.gpus:
                alloc[i] = alloc.get(i, 0) + r.milli
        for i, g in self.readings.items():
            points = self.history.setdefault(i, deque(maxlen=HISTORY_POINTS))
            points.append((round(now, 1), alloc.get(i, 0) / MILLI, g.memory_used,
                           round(g.utilization, 3)))

    # --- backends ------------------------------------------------------------------------
    def backend(self, name: str) -> Backend:
        name = "local" if name in ("none", "local") else name
        b = self._backends.get(name)
        if b is None:
            b = self._backends[name] = make_backend(
                name, tmux_socket=self.settings.tmux_socket,
                runner_socket=self.settings.home / "runner.sock")
        return b

    @staticmethod
    def backend_name(spec: JobSpec) -> str:
        return "local" if spec.session == "none" else spec.session

    # --- devices -------------------------------------------------------------------------
    def read_devices(self) -> bool:
        """Take a reading; requeue jobs on GPUs that vanished or turned unhealthy.

        Returns True when something changed that the scheduler should look at.
        """
        new = {r.index: r for r in self.devices.read()}
        old = self.readings
        self.readings = new
        lost = {i for i in old if i not in new or not new[i].healthy} | \
               {i for i, r in new.items() if not r.healthy}
        changed = set(old) != set(new) or any(old[i].healthy != new[i].healthy for i in new
                                              if i in old)
        for r in list(self.running.values()):
            if r.stop_reason is None and lost.intersection(r.gpus):
                bad = sorted(lost.intersection(r.gpus))
                self._stop_job(r, "gpu_lost", f"GPU {bad} vanished or became unhealthy")
        self._note_peaks(new.values())
        if changed:
            self.store.add_event(job_id=None, kind="gpus_changed", now=self.clock(),
                                 message=f"GPUs present: {sorted(new)}; unhealthy: "
                                         f"{sorted(i for i, r in new.items() if not r.healthy)}")
        return changed

    def _note_peaks(self, readings: Iterable[GpuReading]) -> None:
        """Each running job's peak GPU memory: what the driver lists for the processes of
        its session, per GPU (NVML per process; simulated GPUs report their jobs too)."""
        by_session = {r.handle.pid: r for r in self.running.values() if r.handle is not None}
        if not by_session:
            return
        for g in readings:
            per_job: dict[int, int] = {}
            for pid, used in g.process_memory.items():
                run = by_session.get(pid)
                if run is None:
                    with contextlib.suppress(OSError):
                        run = by_session.get(os.getsid(pid))
                if run is not None:
                    per_job[run.job_id] = per_job.get(run.job_id, 0) + used
            for job_id, used in per_job.items():
                run = self.running[job_id]
                run.peak_gpu_mem = max(run.peak_gpu_mem, used)

    def gpu_views(self) -> list[GpuView]:
        alloc: dict[int, int] = {}
        mem: dict[int, int] = {}
        shims = {r.handle.pid for r in self.running.values() if r.handle is not None}
        real = self.devices.kind == "nvml"  # simulated outside use has no real process
        for r in self.running.values():
            for i in r.gpus:
                alloc[i] = alloc.get(i, 0) + r.milli
                mem[i] = mem.get(i, 0) + (r.gpu_mem or 0)
        views = []
        for i, g in sorted(self.readings.items()):
            if g.process_memory:
                # a reading can be up to one poll old: skip processes that are gone since
                external = sum(b for pid, b in g.process_memory.items()
                               if not _in_sessions(pid, shims) and (not real or _alive(pid)))
            else:  # the driver lists no processes: count it all as outside use unless ours
                external = 0 if alloc.get(i) else g.memory_used
            views.append(GpuView(index=i, memory_total=g.memory_total, memory_external=external,
                                 utilization=g.utilization, healthy=g.healthy,
                                 paused=i in self.paused, allocated_milli=alloc.get(i, 0),
                                 reserved_memory=mem.get(i, 0)))
        return views

    # --- the scheduling pass ---------------------------------------------------------------
    def policy(self) -> Policy:
        s = self.settings
        return Policy(mem_threshold=s.mem_threshold, util_threshold=s.util_threshold,
                      backfill=s.backfill, draining=self.draining)

    def snapshot(self) -> Snapshot:
        deps: dict[int, JobState] = {}
        for job in self.queue.ordered():
            for d in job.after:
                deps[d] = self.job_state(d)
        return Snapshot(gpus=self.gpu_views(), pending=self.queue.ordered(),
                        dependency_states=deps, presorted=True, running=self._running_view())

    def _running_view(self) -> list[RunningJob]:
        """Running jobs as preemption weighs them (only worth building when one may be
        preempted or is being stopped)."""
        if not any(r.spec.preemptible or r.stop_reason for r in self.running.values()):
            return []
        now = self.clock()
        out = []
        for r in self.running.values():
            saved = ((r.output.progress.checkpoint or {}).get("ts") if r.output else None) or 0.0
            out.append(RunningJob(
                id=r.job_id, priority=r.pending.priority, gpu_indices=r.gpus, milli=r.milli,
                gpu_mem=r.gpu_mem, preemptible=r.spec.preemptible and r.handle is not None,
                since_checkpoint_s=max(0.0, now - max(r.started_at, float(saved))),
                stopping=r.stop_reason is not None))
        return out

    def schedule_pass(self) -> Plan:
        """Plan, then start what the plan says.

        The launch intents of every start are committed together before any process exists
        (write-ahead), then the processes are spawned; their handles are stored with the
        next write (see _launch_answered), or in one commit where the backend answers at
        once.
        """
        t0 = time.perf_counter()
        now = self.clock()
        plan = schedule(self.snapshot(), self.policy(), now)
        took = time.perf_counter() - t0
        self.pass_seconds = ([*self.pass_seconds, took])[-1000:]
        self.metrics.pass_seconds.observe(took)
        self.last_plan = plan
        if plan.starts:
            runs: list[Running] = []
            try:
                with self.store.transaction():
                    self._write_launches()
                    rows = self.store.launch_info(s.job_id for s in plan.starts)
                    self._intend(plan.starts, rows, now, runs)
            except Exception:
                # the commit failed: no intent is stored, so none may look started
                for run in runs:
                    self._forget_intent(run)
                raise
            if runs:
                self._launch_all(runs)
        for p in plan.preemptions:
            victim = self.running.get(p.victim)
            if victim is not None and victim.stop_reason is None:
                self.preempt(p.victim, f"preempted to make room for job {p.for_job} "
                                       f"(priority {victim.pending.priority} yields)")
        doomed = [(job_id, reason.message) for job_id, reason in plan.reasons.items()
                  if reason.code == "dependency_failed" and job_id in self.queue]
        if doomed:
            with self._batch():
                for job_id, why in doomed:
                    self._each(self._dependency_failed, job_id, why, now)
        self._arm_backoff_timer(now)
        return plan

    def _dependency_failed(self, job_id: int, why: str, now: float) -> None:
        self.queue.remove(job_id)
        self._transition(job_id, JobState.PENDING, JobState.CANCELLED, message=why,
                         end_reason=why, ended_at=now)

    @staticmethod
    def _each(fn: Callable[..., None], *args: object) -> None:
        """One item of a batch: its failure is logged and must not undo the others; but a
        failure of the store itself fails the whole batch (its transaction is broken)."""
        try:
            fn(*args)
        except StoreError:
            raise
        except Exception:
            log.exception("handling %s%r failed", fn.__name__, args[:1])

    def _arm_backoff_timer(self, now: float) -> None:
        """Wake exactly when the earliest retry backoff ends, not on a poll."""
        soonest = min((r.until for r in self.last_plan.reasons.values() if r.until), default=None)
        if soonest is not None and self.loop is not None:
            self.loop.call_later(max(0.0, soonest - now) + 0.005, self.kick)

    # --- starting a job ------------------------------------------------------------------
    def _intend(self, starts: list[Start], rows: dict[int, LaunchInfo], now: float,
                runs: list[Running]) -> None:
        """Store the launch intents (PENDING -> STARTING and the attempt) of a pass's
        starts; each one stored joins ``runs``. A job the store no longer has pending stays
        queued: the next pass decides."""
        intents: list[tuple[Running, dict[str, object]]] = []
        for start in starts:
            pending = self.queue.remove(start.job_id)
            row = rows.get(start.job_id)
            if pending is None:
                continue
            if row is None:
                log.error("job %s is no longer pending in the store; not started",
                          start.job_id)
                self.queue.add(pending)
                continue
            job_id, number = start.job_id, row.attempts + 1
            spec = JobSpec.model_validate(row.spec)
            backend_name = self.backend_name(spec)
            run = Running(job_id=job_id, attempt_id=0, attempt_no=number, spec=spec,
                          gpus=start.gpu_indices, milli=start.milli_per_gpu,
                          gpu_mem=start.gpu_mem, backend=self.backend(backend_name),
                          started_at=now, pending=pending, failures=row.failures,
                          log_path=self.settings.logs_dir / f"{job_id}.log",
                          status_path=self.settings.status_dir / f"{job_id}-{number}.json",
                          submitted_at=row.created_at, user=row.user)
            intents.append((run, {
                "number": number, "gpu_indices": list(start.gpu_indices),
                "gpu_uuids": [self.readings[i].uuid for i in start.gpu_indices
                              if i in self.readings],
                "milli": start.milli_per_gpu, "gpu_mem": start.gpu_mem,
                "backend": backend_name, "log_path": str(run.log_path),
                "status_path": str(run.status_path), "started_at": now}))
        try:
            ids = self.store.start_attempts(
                [(run.job_id, attempt, f"attempt {run.attempt_no} on GPUs {_gpu_text(run.gpus)}")
                 for run, attempt in intents], now=now)
        except Exception:
            for run, _ in intents:
                self.queue.add(run.pending)
            raise
        for (run, _), attempt_id in zip(intents, ids, strict=True):
            run.attempt_id = attempt_id
            self.metrics.queue_wait.observe(max(0.0, now - rows[run.job_id].updated_at))
            run.output = self.output_reader(run, rows[run.job_id].progress)
            self.states[run.job_id] = JobState.STARTING
            self.running[run.job_id] = run
            runs.append(run)

    def _forget_intent(self, run: Running) -> None:
        """Undo _intend in memory after its transaction was rolled back."""
        self.running.pop(run.job_id, None)
        self.states[run.job_id] = JobState.PENDING
        self.queue.add(run.pending)

    def _launch_all(self, runs: list[Running]) -> None:
        """Spawn the processes (each backend gets its share at once), then record their
        handles in one commit."""
        outcomes: dict[int, Handle | str] = {}
        batches: dict[str, list[tuple[Running, LaunchRequest]]] = {}
        for run in runs:
            try:
                req = self._launch_request(run)
            except (BackendError, TrackerError) as e:
                outcomes[run.job_id] = str(e)
                continue
            batches.setdefault(run.backend.name, []).append((run, req))
        for batch in batches.values():
            backend, reqs = batch[0][0].backend, [req for _, req in batch]
            # where the backend can, the loop goes on while the processes are started
            if self.loop is not None:
                self._launches_in_flight += len(reqs)
                if backend.launch_later(reqs, functools.partial(
                        self._launch_answered, [run for run, _ in batch])):
                    continue
                self._launches_in_flight -= len(reqs)
            for (run, _), outcome in zip(batch, backend.launch_many(reqs), strict=True):
                outcomes[run.job_id] = outcome
        self._launches_done([run for run in runs if run.job_id in outcomes],
                            [outcomes[run.job_id] for run in runs if run.job_id in outcomes])

    def _launches_done(self, runs: list[Running], outcomes: list[Handle | str]) -> None:
        """Record the handles (or failures) of launches, in one commit."""
        if not runs:
            return
        with self._batch():
            for run, outcome in zip(runs, outcomes, strict=True):
                self._each(self._launched, run, outcome)
        self._refresh_simulated()

    def _launched(self, run: Running, outcome: Handle | str) -> None:
        if isinstance(outcome, str):
            self._launch_failed(run, outcome)
        else:
            self._adopted(run, outcome, JobState.STARTING)

    def _launch_answered(self, runs: list[Running], i: int, outcome: Handle | str) -> None:
        """A launch's outcome as soon as the backend knows it, while it starts the rest of
        its batch: a started job is watched at once (a short one ends long before a large
        batch is through). The store learns of it with the next write (an exit or a pass,
        whose transaction takes it first) or within LAUNCH_RECORD_S: a transaction per
        answer would cost more than the job."""
        self._launches_in_flight -= 1
        run = runs[i]
        if isinstance(outcome, Handle):
            self._take_handle(run, outcome)
        self._unrecorded.append((run, outcome))
        if self._record_timer is None and self.loop is not None:
            self._record_timer = self.loop.call_later(LAUNCH_RECORD_S, self._record_launches)

    def _record_launches(self) -> None:
        with self._batch():
            self._write_launches()
        self._refresh_simulated()

    def _write_launches(self) -> None:
        """The launches answered and not yet stored, into the open transaction."""
        if self._record_timer is not None:
            self._record_timer.cancel()
            self._record_timer = None
        todo, self._unrecorded = self._unrecorded, []
        for run, outcome in todo:
            if isinstance(outcome, str):
                self._each(self._launch_failed, run, outcome)
            else:
                self._each(self._record_handle, run, outcome, JobState.STARTING)

    def _launch_request(self, run: Running) -> LaunchRequest:
        spec = run.spec
        resume = self._resume_point(run)
        argv = list(spec.command)
        if spec.cuda_arg and not spec.shell:
            argv = inject_cuda_arg(argv, list(run.gpus))
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
                   ROTA_STOP_SIGNAL=spec.stop_signal)
        if not run.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""
        gpu_tag = ".".join(map(str, run.gpus)) or "cpu"
        return LaunchRequest(job_id=run.job_id, attempt=run.attempt_no, argv=argv,
                             shell=spec.shell, env=env, cwd=spec.cwd, conda=spec.conda,
                             log_path=run.log_path, status_path=run.status_path,
                             session_name=f"rota-{run.job_id}-gpu{gpu_tag}",
                             log_header=f"=== rota: job {run.job_id} attempt {run.attempt_no} "
                                        f"on GPUs {_gpu_text(run.gpus)}")

    def _resume_point(self, run: Running) -> str | None:
        """The newest valid checkpoint of this job for a retry to continue from (a first
        attempt starts fresh): found under its checkpoint_dir, or reported by rota.job."""
        if run.attempt_no < 2:
            return None
        best = checkpoints.newest_valid(self._checkpoints_of(run, since=run.submitted_at))
        if best is None:
            return None
        self.store.add_event(job_id=run.job_id, kind="resume", now=self.clock(),
                             message=f"attempt {run.attempt_no} resumes from {best.path}"
                                     + (f" (step {best.step})" if best.step is not None else ""))
        return best.path

    def _adopted(self, run: Running, handle: Handle, src: JobState) -> None:
        """A process exists for the job: record its handle, watch it, arm its timers."""
        self._record_handle(run, handle, src)
        self._take_handle(run, handle)

    def _record_handle(self, run: Running, handle: Handle, src: JobState) -> None:
        """The store's part of adopting a process: its handle, and the job running."""
        if src is JobState.STARTING:
            self.metrics.starts.inc()
        self.store.update_attempt(run.attempt_id, handle=handle.to_json())
        if src is not JobState.RUNNING:
            self._transition(run.job_id, src, JobState.RUNNING,
                             message=f"pid {handle.pid} via {handle.backend}",
                             started_at=run.started_at)

    def _take_handle(self, run: Running, handle: Handle) -> None:
        """The daemon's part: the process is its job's, watched, with its timers armed."""
        run.handle = handle
        place = getattr(self.devices, "place", None)
        if place is not None and run.gpus:  # simulated GPUs: the job drives their figures
            place(f"job-{run.job_id}", list(run.gpus), run.milli / MILLI, run.gpu_mem,
                  handle.pid)
            self._simulated_dirty = True
        self._watch(run)
        if run.stop_reason is not None:  # stopped while its launch was in flight
            self._signal_stop(run)
        if run.spec.time_limit and self.loop is not None:
            # warned `grace` before the limit (but not before half of it), so that a save
            # fits in before SIGKILL at the limit itself
            limit = run.spec.time_limit
            warn_at = run.started_at + max(limit / 2, limit - run.spec.grace)
            run.timers.append(self.loop.call_later(max(0.0, warn_at - self.clock()),
                                                   self._time_limit, run.job_id))

    def _launch_failed(self, run: Running, why: str) -> None:
        now = self.clock()
        self.store.update_attempt(run.attempt_id, ended_at=now, outcome="launch_failed",
                                  reason=why)
        del self.running[run.job_id]
        if run.stop_reason == "cancel":  # cancelled while its launch was in flight
            self._transition(run.job_id, JobState.STARTING, JobState.CANCELLED,
                             message=f"cancelled (its launch failed: {why})", ended_at=now,
                             end_reason="cancelled by request")
        else:
            self._after_failure(run, JobState.STARTING, f"launch failed: {why}", None, now)
        self.kick()

    # --- watching exits --------------------------------------------------------------------
    def _watch(self, run: Running) -> None:
        assert run.handle is not None and self.loop is not None
        fd = run.backend.watch(run.handle)
        if fd is None:
            self._exited_now(run.job_id)
            return
        run.pidfd = fd
        self.loop.add_reader(fd, self._exited_now, run.job_id)

    def _unwatch(self, run: Running) -> None:
        if run.pidfd is not None and self.loop is not None:
            self.loop.remove_reader(run.pidfd)
            os.close(run.pidfd)
            run.pidfd = None

    def _exited_now(self, job_id: int) -> None:
        """A job's process ended: collect it with the others that end in the same loop turn,
        so a burst of exits is recorded in one commit."""
        run = self.running.get(job_id)
        if run is not None:
            if run.pidfd is not None:
                run.watched = _read_watched(run.pidfd)
            self._unwatch(run)
        if not self._exits and self.loop is not None:
            self.loop.call_soon(self._record_exits)
        self._exits.append(job_id)

    def _record_exits(self) -> None:
        exits, self._exits = self._exits, []
        with self._batch():
            self._write_launches()  # an exit may be of a job whose start is not stored yet
            for job_id in exits:
                self._each(self._on_exit, job_id)
        self._refresh_simulated()
        self._exits_since_tidy += len(exits)
        if self._exits_since_tidy >= TIDY_EVERY_EXITS:
            self._tidy()

    @contextlib.contextmanager
    def _batch(self) -> Iterator[None]:
        """One transaction for a batch whose changes to the daemon's memory are made before
        it commits (exits, launch answers, output read). Should the commit fail, memory is
        ahead of the store: the daemon then takes its work up again from the store and the
        backends' records, as a restart would, rather than go on from a state it could not
        store (a job would look ended, or running, to it alone)."""
        try:
            with self.store.transaction():
                yield
        except StoreError:
            log.exception("a batch could not be stored; taking the work up again from the "
                          "store")
            self._resync_soon(self._resync_wait)

    def _resync_soon(self, delay: float) -> None:
        self.diverged = True
        if self._resync_timer is None and self.loop is not None and not self._stopping:
            self._resync_timer = self.loop.call_later(delay, self._resync)

    def _resync(self) -> None:
        """Forget what memory says of the jobs and read it all again from the store, as at
        start-up. Only once every launch sent has been answered: the runner records a start
        when it answers, and an unanswered one would look never carried out (run twice)."""
        from rota.server.recovery import recover

        self._resync_timer = None
        if self._stopping:
            return
        if self._launches_in_flight > 0:
            self._resync_soon(RESYNC_POLL_S)
            return
        try:
            self._forget_jobs()
            with self.store.transaction():
                recover(self)
        except Exception:
            self._resync_wait = min(max(2 * self._resync_wait, 0.5), RESYNC_MAX_S)
            log.exception("taking the work up again failed; next try in %.1f s",
                          self._resync_wait)
            self._resync_soon(self._resync_wait)
            return
        self.diverged = False
        self._resync_wait = RESYNC_FIRST_S
        log.info("taken up again from the store: %d running, %d pending", len(self.running),
                 len(self.queue))
        self._refresh_simulated()
        self.kick()

    def _forget_jobs(self) -> None:
        """Drop the daemon's memory of jobs (their processes go on; recovery finds them)."""
        for run in self.running.values():
            run.cancel_timers()
            self._unwatch(run)
        if self._record_timer is not None:
            self._record_timer.cancel()
            self._record_timer = None
        self.running.clear()
        self.states.clear()
        self.queue = PendingQueue()
        self.tracking.parked.clear()
        self._unrecorded.clear()
        self._exits.clear()

    def _tidy(self) -> None:
        """Let the backends drop their records of attempts whose end is stored (only once it
        is committed: a restart reads those records for what it has not stored). Not while
        memory is ahead of the store: the records of ends it holds alone are still needed."""
        if self.diverged:
            return
        self._exits_since_tidy = 0
        active = {str(r.status_path) for r in self.running.values()}
        self.backend("local")  # earlier runners' journals go too, before the first launch
        for b in list(self._backends.values()):
            try:
                b.tidy(self.settings.status_dir, active)
            except OSError:
                log.exception("tidying the %s backend's records failed", b.name)

    def _on_exit(self, job_id: int) -> None:
        run = self.running.get(job_id)
        if run is None or run.handle is None:
            return
        self._unwatch(run)
        reap(run.handle.pid)
        info = run.backend.exit_info(run.handle, run.watched)
        if info is None and run.rewatches < 3 and run.backend.is_alive(run.handle):
            # what was watched went away, not the job (the local runner died): watch the
            # job itself from now on
            run.rewatches += 1
            run.watched = b""
            self._watch(run)
            return
        self.finish(run, info or ExitInfo(None, signal.SIGKILL, None))

    def _refresh_simulated(self) -> None:
        """Simulated GPUs' figures follow their jobs: read them again after a batch."""
        if self._simulated_dirty:
            self._simulated_dirty = False
            self.read_devices()

    def finish(self, run: Running, info: ExitInfo) -> None:
        """Record how an attempt ended and decide the job's next state."""
        now = self.clock()
        run.cancel_timers()
        try:
            self.read_outputs([run], final=True)
        except (OSError, StoreError):  # the end must be recorded even so
            log.exception("job %s: reading its last output failed", run.job_id)
        self.running.pop(run.job_id, None)
        if run.output is not None:
            self.tracking.note_checkpoint(run.job_id, run.output.progress.checkpoint)
        release = getattr(self.devices, "release", None)
        if release is not None and release(f"job-{run.job_id}"):
            self._simulated_dirty = True
        code = info.exit_code
        how = f"exit code {code}" if code is not None else f"killed by signal {info.signal}"
        src = self.job_state(run.job_id)
        outcome, reason = "completed", how
        if run.stop_reason == "cancel":
            outcome, reason = "cancelled", f"cancelled ({how})"
            self._transition(run.job_id, src, JobState.CANCELLED, message=reason,
                             ended_at=now, exit_code=code, end_reason=reason)
        elif run.stop_reason == "timeout":
            outcome = "timeout"
            reason = f"time limit {run.spec.time_limit:g}s reached ({how})"
            self._transition(run.job_id, src, JobState.TIMEOUT, message=reason, ended_at=now,
                             exit_code=code, end_reason=reason)
        elif run.stop_reason == "preempt":
            outcome, reason = "preempted", f"preempted ({how}){self._saved_text(run)}; " \
                "queued again in its place"
            self._requeue(run.job_id, src, reason, run.pending, not_before=None)
        elif run.stop_reason in ("gpu_lost", "requeue"):
            why = "its GPU was lost" if run.stop_reason == "gpu_lost" else "requeued by request"
            outcome, reason = "requeued", f"{why} ({how}); queued again"
            self._requeue(run.job_id, src, reason, run.pending, not_before=None)
        elif info.success:
            self._transition(run.job_id, src, JobState.COMPLETED, message=how, ended_at=now,
                             exit_code=0, end_reason=how)
        else:
            outcome = "failed"
            self._after_failure(run, src, how, code, now)
        self.store.update_attempt(run.attempt_id, ended_at=now, exit_code=code,
                                  signal=info.signal, outcome=outcome, reason=reason,
                                  peak_gpu_mem=run.peak_gpu_mem or None)
        self.metrics.ends.labels(outcome).inc()
        self.metrics.run_time.labels(outcome).observe(max(0.0, now - run.started_at))
        ev = self._exited.pop(run.job_id, None)
        if ev is not None and self.job_state(run.job_id).terminal:
            ev.set()
        elif ev is not None:
            self._exited[run.job_id] = ev
        self.kick()

    def _saved_text(self, run: Running) -> str:
        """What the stopped attempt left to resume from, for its record."""
        if run.spec.checkpoint_dir is None and not (run.output and run.output.progress.checkpoint):
            return ""
        # the attempt has just ended: what it wrote counts without waiting for it to settle
        best = checkpoints.newest_valid(self._checkpoints_of(
            run, since=run.started_at, now=self.clock() + checkpoints.SETTLE_S))
        if best is None:
            return "; it saved no checkpoint"
        return f"; last checkpoint {best.path}" + (f" (step {best.step})"
                                                   if best.step is not None else "")

    def _checkpoints_of(self, run: Running, *, since: float,
                        now: float | None = None) -> list[checkpoints.Checkpoint]:
        try:
            return checkpoints.of_job(
                run.spec.checkpoint_dir, run.spec.cwd, since=since,
                reported=run.output.progress.checkpoint if run.output else None,
                now=self.clock() if now is None else now)
        except OSError as e:
            log.warning("job %s: looking for checkpoints failed: %s", run.job_id, e)
            return []

    def _after_failure(self, run: Running, src: JobState, why: str, code: int | None,
                       now: float) -> None:
        bigger = self._oom_retry(run)
        if bigger is not None:
            pending, message = bigger
            self.store.update_job(run.job_id, gpus=pending.gpus_milli / MILLI,
                                  gpu_mem=pending.gpu_mem)
            self._requeue(run.job_id, src, f"{why}; {message}", pending, not_before=None,
                          exit_code=code)
            self.store.add_event(job_id=run.job_id, kind="oom_retry", now=now, message=message)
            return
        failures = run.failures + 1
        spec = run.spec
        if failures <= spec.retries:
            delay = min(spec.retry_backoff * 2 ** (failures - 1), spec.retry_backoff_max)
            self._requeue(run.job_id, src, f"{why}; retry {failures}/{spec.retries} in "
                          f"{delay:g}s", run.pending, not_before=now + delay,
                          failures=failures, exit_code=code)
        else:
            self._transition(run.job_id, src, JobState.FAILED, message=why, ended_at=now,
                             exit_code=code, end_reason=why, failures=failures)

    def _oom_retry(self, run: Running) -> tuple[PendingJob, str] | None:
        """A job that died of GPU out-of-memory runs once more with more memory, when some
        GPU it may use has that much: (its place in the queue with the new need, why)."""
        if not run.gpus or not oom.died_of_oom(read_tail(run.log_path, oom.TAIL_BYTES)):
            return None
        if any(e.kind == "oom_retry" for e in self.store.events(run.job_id)):
            return None  # once only: a second out-of-memory is a failure like any other
        totals = [g.memory_total for i, g in self.readings.items()
                  if run.pending.allowed is None or i in run.pending.allowed]
        need = oom.bigger_request(asked=run.gpu_mem, peak=run.peak_gpu_mem,
                                  milli=run.milli, gpu_total=max(totals, default=0))
        if need is None:
            return None
        milli, mem = need
        gpus = len(run.gpus) * MILLI if run.milli >= MILLI else milli
        message = (f"GPU out of memory (peak {format_memory(run.peak_gpu_mem)} on one GPU, "
                   f"{format_memory(run.gpu_mem) if run.gpu_mem else 'no amount'} asked): "
                   f"retried once with {format_memory(mem)} per GPU")
        return replace(run.pending, gpus_milli=gpus, gpu_mem=mem), message

    def _requeue(self, job_id: int, src: JobState, why: str, pending: PendingJob, *,
                 not_before: float | None, **fields: object) -> None:
        """Back to the queue, in its old place among jobs of its priority (same seq)."""
        self._transition(job_id, src, JobState.PENDING, message=why, kind="requeued",
                         not_before=not_before, **fields)
        self.queue.add(replace(pending, not_before=not_before))

    # --- stopping jobs ---------------------------------------------------------------------
    def _stop_job(self, run: Running, reason: str, message: str, *,
                  kill_in: float | None = None) -> None:
        """The stop handshake: the job's stop signal (SIGTERM unless its spec says another)
        to its process group and its stop file created (``rota.job.should_stop``), then
        SIGKILL after its grace period (or ``kill_in`` seconds).

        A job whose launch is still in flight is signalled as soon as it has a process.
        """
        if run.stop_reason is not None:
            return
        run.stop_reason, run.kill_in = reason, kill_in
        wait = run.spec.grace if kill_in is None else kill_in
        self.store.add_event(job_id=run.job_id, kind=f"stopping:{reason}", now=self.clock(),
                             message=f"{message}; {run.spec.stop_signal}, SIGKILL after "
                                     f"{wait:g}s")
        if run.handle is not None:
            self._signal_stop(run)

    def _signal_stop(self, run: Running) -> None:
        assert run.handle is not None
        with contextlib.suppress(OSError):  # the flag is a courtesy; the signal is the stop
            stop_file(run.status_path).touch()
        run.backend.signal(run.handle, signal.Signals[run.spec.stop_signal])
        if self.loop is not None:
            wait = run.spec.grace if run.kill_in is None else run.kill_in
            run.timers.append(self.loop.call_later(max(0.0, wait), self._kill, run.job_id))

    def _kill(self, job_id: int) -> None:
        run = self.running.get(job_id)
        if run is not None and run.handle is not None:
            run.backend.signal(run.handle, signal.SIGKILL)

    def _time_limit(self, job_id: int) -> None:
        run = self.running.get(job_id)
        if run is not None and run.spec.time_limit:
            left = run.started_at + run.spec.time_limit - self.clock()
            self._stop_job(run, "timeout", f"time limit of {run.spec.time_limit:g}s reached in "
                           f"{max(0.0, left):.3g}s", kill_in=left)

    def preempt(self, job_id: int, why: str = "preempted by request") -> None:
        """Stop a running job through the handshake and queue it again in its old place
        (RUNNING -> PREEMPTED now, -> PENDING when it has exited)."""
        state = self.job_state(job_id)
        run = self.running.get(job_id)
        if run is None or state is not JobState.RUNNING:
            raise Conflict(f"job {job_id} is {state.value}; only running jobs can be preempted")
        if run.stop_reason is not None:
            raise Conflict(f"job {job_id} is already being stopped ({run.stop_reason})")
        self._transition(job_id, state, JobState.PREEMPTED, message=why, kind="preempting")
        self._stop_job(run, "preempt", why)

    # --- requests from people (called on the loop thread by the API) ----------------------
    def cancel(self, job_id: int) -> JobState:
        state = self.job_state(job_id)
        if state.terminal:
            raise Conflict(f"job {job_id} already ended ({state.value})")
        run = self.running.get(job_id)
        if run is not None:
            if run.stop_reason not in (None, "cancel"):  # being stopped to run again: not now
                run.stop_reason = "cancel"
                self.store.add_event(job_id=job_id, kind="stopping:cancel", now=self.clock(),
                                     message="cancelled by request while being stopped")
            self._stop_job(run, "cancel", "cancelled by request")
            return state
        self.queue.remove(job_id)
        self._transition(job_id, state, JobState.CANCELLED, message="cancelled by request",
                         ended_at=self.clock(), end_reason="cancelled by request")
        self._notify_end(job_id)
        self.kick()
        return JobState.CANCELLED

    def requeue(self, job_id: int) -> None:
        """Stop a running job (SIGTERM, then SIGKILL after its grace) and queue it again."""
        state = self.job_state(job_id)
        run = self.running.get(job_id)
        if run is None:
            raise Conflict(f"job {job_id} is {state.value}; only running jobs are stopped and "
                           "queued again (an ended one is submitted anew)")
        self._stop_job(run, "requeue", "requeued by request")

    def hold(self, job_id: int) -> None:
        state = self.job_state(job_id)
        if state is not JobState.PENDING:
            raise Conflict(f"job {job_id} is {state.value}; only pending jobs can be held")
        self.queue.remove(job_id)
        self._transition(job_id, state, JobState.HELD, message="held by request")

    def release(self, job_id: int) -> None:
        state = self.job_state(job_id)
        if state is not JobState.HELD:
            raise Conflict(f"job {job_id} is {state.value}; only held jobs can be released")
        row = self.store.get_job(job_id)
        self._transition(job_id, state, JobState.PENDING, message="released")
        self._enqueue(self.pending_of(row))
        self.kick()

    def set_paused(self, index: int, paused: bool) -> None:
        g = self.readings.get(index)
        if g is None:
            raise NotFound(f"no GPU {index}; GPUs present: {sorted(self.readings)}")
        self.store.set_gpu_paused(g.uuid, index, paused)
        (self.paused.add if paused else self.paused.discard)(index)
        self.store.add_event(job_id=None, kind="gpu_paused" if paused else "gpu_resumed",
                             now=self.clock(), message=f"GPU {index}")
        self.kick()

    def set_draining(self, on: bool) -> None:
        self.draining = on
        self.store.set_setting("draining", "1" if on else "0")
        self.store.add_event(job_id=None, kind="drain" if on else "undrain", now=self.clock())
        self.kick()

    async def wait_for_end(self, job_id: int, timeout: float | None) -> JobState:
        state = self.job_state(job_id)
        if state.terminal:
            return state
        ev = self._exited.setdefault(job_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout)
        return self.job_state(job_id)

    def _notify_end(self, job_id: int) -> None:
        ev = self._exited.pop(job_id, None)
        if ev is not None:
            ev.set()

    # --- bookkeeping -----------------------------------------------------------------------
    def job_state(self, job_id: int) -> JobState:
        st = self.states.get(job_id)
        if st is None:
            try:
                st = JobState(self.store.get_job(job_id).state)
            except NotFound:
                raise NotFound(f"no job {job_id}") from None
            self.states[job_id] = st
        return st

    def _transition(self, job_id: int, src: JobState, dst: JobState, *, message: str,
                    kind: str | None = None, **fields: object) -> None:
        self.store.transition(job_id, src, dst, now=self.clock(), message=message, kind=kind,
                              **fields)
        self.states[job_id] = dst
        if dst.terminal:
            self._notify_end(job_id)
            self.tracking.ended(job_id, dst.value, now=self.clock())

    @staticmethod
    def pending_of(row: JobRecord) -> PendingJob:
        spec = row.spec
        allowed = spec.get("allowed_gpus")
        return PendingJob(id=row.id, priority=row.priority, seq=row.id,
                          gpus_milli=to_milli(row.gpus), gpu_mem=row.gpu_mem,
                          allowed=frozenset(allowed) if allowed else None,
                          after=tuple(spec.get("after") or ()), not_before=row.not_before)

    def accept(self, rows: list[JobRecord]) -> None:
        """Newly stored jobs join the queue and a pass runs."""
        for row in rows:
            st = JobState(row.state)
            self.states[row.id] = st
            if st in (JobState.PENDING, JobState.HELD):
                self.enqueue(row, queue=st is JobState.PENDING)
        self.kick()

    def enqueue(self, row: JobRecord, *, queue: bool = True) -> None:
        """A pending job joins the queue (a held one only gets ready): a job that wants an
        MLflow run it does not have yet waits for it, so its first attempt logs there."""
        wants = self.settings.mlflow if row.spec.get("mlflow") is None else row.spec["mlflow"]
        if wants and row.id not in self.tracking.creating:
            spec = JobSpec.model_validate(row.spec)
            log_path = self.settings.logs_dir / f"{row.id}.log"
            if not self.tracking.adopt(row.id, spec, row.tracking, row.created_at, log_path,
                                       row.attempts):
                self.tracking.open_run(job_id=row.id, user=row.user, spec=spec,
                                       submitted_at=row.created_at, log_path=log_path,
                                       done=self._run_opened)
        if queue:
            self._enqueue(self.pending_of(row))

    def _enqueue(self, pending: PendingJob) -> None:
        if pending.id in self.tracking.creating:
            self.tracking.parked[pending.id] = pending
        else:
            self.queue.add(pending)

    def _run_opened(self, job_id: int, found: dict[str, object] | None,
                    error: str | None) -> None:
        """The job's MLflow run exists (or could not be made): record it, and queue the job
        if it was waiting for it."""
        if found is not None:
            self.store.set_tracking(job_id, {"mlflow": found})
            self.store.add_event(job_id=job_id, kind="mlflow", now=self.clock(),
                                 message=f"MLflow run {found['run_id']} in experiment "
                                         f"{found['experiment']!r} at {found['uri']}")
        else:
            self.store.set_tracking(job_id, {"mlflow": {"error": error}})
            self.store.add_event(job_id=job_id, kind="mlflow_error", now=self.clock(),
                                 message=f"{error}; the job runs without an MLflow run")
        pending = self.tracking.parked.pop(job_id, None)
        if pending is not None and self.job_state(job_id) is JobState.PENDING:
            self.queue.add(pending)
            self.kick()

