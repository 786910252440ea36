"""A cluster engine's pool as the daemon sees it: a :class:`rota.backends.base.Backend`.

The daemon launches, watches, collects, signals and re-finds jobs through the backend
protocol; a cluster engine (:class:`rota.backends.engine.Engine`) speaks another one. This
adapter translates, so that the daemon's launcher, exits, stopper and recovery drive engine
jobs unchanged:

- ``launch`` hands the request's :class:`EngineJob` to the engine (on a worker thread:
  ``capabilities.launch_blocks``). Crash safety: a small record next to the attempt's status
  file (``<status_path>.engine``, ``rota.backends.engine_record``) is written *before* the
  submit; a launch that finds it from an earlier try asks ``engine.find(key)`` first, so an
  attempt never reaches the engine twice. A fresh attempt (no record) skips that round trip.
- Arrays (an engine with ``capabilities.arrays``): first attempts of one ``launch_later``
  (or ``launch_many``) that differ only in their command, name and Rota's own per-attempt
  integers (a sweep's points) go as one engine job (``submit_array``). Every member's record
  names the group's key, its index and the group's size before the one submit; a later try
  asks ``find_array`` by that key. Retries, jobs with dependencies and multi-node jobs go
  alone, as do members whose attempt already has a record.
- Watching: one poller thread per adapter (``rota.backends.engine_poller``) polls every
  followed job at once, copies its output into its log, makes its watch fd readable once
  it has ended, and tells ``on_start`` when the engine has started an attempt it held.
- ``signal`` hands the stop to a command thread: ``engine.stop`` may block (scancel).
- Secret values (``req.env`` for the variables named by ``engine_job.secret_env``) live in
  memory only while their own submit runs, under names of that attempt alone
  (``job<id>.<attempt>.<VAR>``): one job's secrets never reach another's.

Errors: a refusal (the engine cannot honour the job) is a LaunchFailed that is not
retryable; an engine that fails to answer (unreachable, timing out) gives a retryable one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import signal as signals
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rota.backends.base import (
    Capabilities,
    ExitInfo,
    Handle,
    Launched,
    LaunchFailed,
    LaunchOutcome,
    LaunchRequest,
    Located,
    NotStarted,
    TakenBack,
)
from rota.backends.common import KILLED
from rota.backends.engine import (
    TASK_VARIABLES,
    ArrayEngine,
    Engine,
    EngineJob,
    EngineState,
    EngineStatus,
    array_key,
)
from rota.backends.engine_poller import _ENDED, OnStart, Poller, _size
from rota.backends.engine_record import SUFFIX, _read_record, _write_record, key_of, state_path
from rota.errors import BackendError

log = logging.getLogger("rota.backends.engine")

_GRACE = 30.0  # EngineJob's default, for a record that lacks it
_ARRAY_MAX = 1000  # tasks per array (Slurm's MaxArraySize is 1001 by default)

MakeEngine = Callable[[Callable[[str], str]], Engine]


def exit_info(status: EngineStatus | None) -> ExitInfo | None:
    """How a job ended by its engine's status; None while it waits or runs. LOST (gone
    with no record of its end) reads as killed, as a process that vanished does."""
    if status is None or status.state not in _ENDED:
        return None
    if status.state is EngineState.LOST:
        return KILLED
    if status.unmet_dependency:
        return NotStarted(None, None, status.ended_at,
                          why=f"its engine dropped it: {status.reason or 'unmet dependency'}")
    if status.preempted:
        return TakenBack(status.exit_code, status.signal, status.ended_at,
                         why=f"its engine ended it: {status.reason or 'preempted'}")
    if status.exit_code is None and status.signal is None:  # cancelled there, or the like
        return ExitInfo(None, None, status.ended_at,
                        why=f"its engine ended it: {status.reason or 'no exit code or signal'}")
    return ExitInfo(status.exit_code, status.signal, status.ended_at)


class EngineBackend:
    """One pool's engine behind the backend protocol (see the module's docstring)."""

    capabilities = Capabilities(attachable=False, gpu_pinning=True, adopt_after_restart=True,
                                launch_blocks=True, stop_signal=True, engine=True)

    def __init__(self, pool_name: str, make_engine: MakeEngine, *,
                 poll_every: float = 2.0, install: str = "",
                 on_start: OnStart | None = None) -> None:
        self.pool_name = pool_name
        self.install = install  # this installation's id, in every engine key
        self._secrets: dict[str, str] = {}  # only while the submit that needs them runs
        self.engine = make_engine(self._secret)
        self.name = f"{self.engine.name}:{pool_name}"
        self.capabilities = dataclasses.replace(  # its engine's, per pool
            EngineBackend.capabilities, run_as=self.engine.capabilities.run_as)
        self._poller = Poller(self.engine, self.name, poll_every, on_start)
        self._commands: ThreadPoolExecutor | None = None

    # --- secrets ----------------------------------------------------------------------------
    def _secret(self, name: str) -> str:
        return self._secrets[name]  # KeyError: the engine names the missing secret

    def _job_with_secrets(self, req: LaunchRequest, job: EngineJob
                          ) -> tuple[EngineJob, dict[str, str]]:
        """The job with its secrets renamed to this attempt's own names, and their values."""
        names: dict[str, str] = {}
        values: dict[str, str] = {}
        for var in job.secret_env:  # ``check`` made sure each has its value
            names[var] = f"job{job.job_id}.{job.attempt}.{var}"
            values[names[var]] = req.env[var]
        return dataclasses.replace(job, secret_env=names), values

    def _submit(self, req: LaunchRequest, job: EngineJob) -> str:
        job, values = self._job_with_secrets(req, job)
        self._secrets.update(values)
        try:
            return self.engine.submit(job)
        finally:
            for name in values:
                self._secrets.pop(name, None)

    # --- checks -----------------------------------------------------------------------------
    def missing(self) -> str | None:
        return None  # an engine that is down now may be up at launch: it is not refused

    def _engine_job(self, req: LaunchRequest) -> EngineJob:
        if req.engine_job is None:
            raise BackendError(f"job {req.job_id}: the {self.name} pool runs engine jobs "
                               "only, and this request carries none")
        return req.engine_job

    def check(self, req: LaunchRequest) -> None:
        job = self._engine_job(req)
        lacking = sorted(var for var in job.secret_env if var not in req.env)
        reason = self.engine.refusal(job) or (
            f"no value for the secret variable {', '.join(lacking)}" if lacking else None)
        if reason:
            raise BackendError(f"job {req.job_id}: {reason}")

    # --- launch -----------------------------------------------------------------------------
    def launch(self, req: LaunchRequest) -> Handle:
        got = self._launch_one(req)
        if isinstance(got, LaunchFailed):
            raise BackendError(got.reason)
        return got.handle

    def launch_many(self, reqs: list[LaunchRequest]) -> list[LaunchOutcome]:
        got = dict(self._launch_all(reqs))
        return [got[i] for i in range(len(reqs))]

    def launch_later(self, reqs: list[LaunchRequest],
                     done: Callable[[int, LaunchOutcome], None]) -> bool:
        """On a worker thread, in order (the engine sees Rota's priority order; an array
        goes where its first member is); each outcome posted to the event loop as soon as
        it is known."""
        loop = asyncio.get_running_loop()

        def work() -> None:
            for i, got in self._launch_all(reqs):
                loop.call_soon_threadsafe(done, i, got)

        loop.run_in_executor(None, work)
        return True

    def _launch_all(self, reqs: list[LaunchRequest]) -> Iterator[tuple[int, LaunchOutcome]]:
        """Each request's outcome by its index, group by group."""
        for group in self._groups(reqs):
            if len(group) == 1:
                yield group[0], self._launch_one(reqs[group[0]])
            else:
                yield from zip(group, self._launch_group([reqs[i] for i in group]),
                               strict=True)

    # --- arrays ---------------------------------------------------------------------------
    def _groups(self, reqs: list[LaunchRequest]) -> list[list[int]]:
        """The requests' indices, in groups that may go as one array, in order of each
        group's first member."""
        out: list[list[int]] = []
        open_groups: dict[str, list[int]] = {}
        arrays = self.engine.capabilities.arrays and isinstance(self.engine, ArrayEngine)
        for i, req in enumerate(reqs):
            shape = self._array_shape(req) if arrays else None
            group = open_groups.get(shape) if shape is not None else None
            if group is None or len(group) >= _ARRAY_MAX:
                group = []
                out.append(group)
                if shape is not None:
                    open_groups[shape] = group
            group.append(i)
        return out

    @staticmethod
    def _array_shape(req: LaunchRequest) -> str | None:
        """What members of one array share (all but their command, name and Rota's own
        integers); None for an attempt that goes alone."""
        job = req.engine_job
        if job is None or job.attempt != 1 or job.nodes != 1 or job.after \
                or not all(job.env.get(v, "0").isdigit() for v in TASK_VARIABLES) \
                or state_path(req.status_path).exists():  # tried before: it goes alone
            return None
        shared = dataclasses.replace(job, job_id=0, name="", argv=(), env={
            k: v for k, v in job.env.items() if k not in TASK_VARIABLES})
        secrets = hashlib.sha256(json.dumps(  # equal values, without keeping them
            sorted((var, req.env.get(var, "")) for var in job.secret_env)).encode())
        return json.dumps([dataclasses.asdict(shared), secrets.hexdigest()], sort_keys=True,
                          default=str)

    def _launch_group(self, reqs: list[LaunchRequest]) -> list[LaunchOutcome]:
        """Members the engine refuses fail alone; the rest go as one array (or alone, when
        only one is left)."""
        got: dict[int, LaunchOutcome] = {}
        ok: list[int] = []
        for i, req in enumerate(reqs):
            try:
                self.check(req)
                ok.append(i)
            except BackendError as e:
                got[i] = LaunchFailed(str(e))
        if len(ok) == 1:
            got[ok[0]] = self._launch_one(reqs[ok[0]])
        elif ok:
            got.update(zip(ok, self._launch_array([reqs[i] for i in ok]), strict=True))
        return [got[i] for i in range(len(reqs))]

    def _launch_array(self, reqs: list[LaunchRequest]) -> list[LaunchOutcome]:
        """Every member's record first (the group's key, its index), then one submit."""
        jobs = [self._engine_job(req) for req in reqs]
        key = array_key(jobs[0])
        records = []
        try:
            for index, (req, job) in enumerate(zip(reqs, jobs, strict=True)):
                record = self._new_record(req, job)
                record.update(array=key, index=index, size=len(jobs))
                _write_record(state_path(req.status_path), record)
                records.append(record)
            ids = self._submit_array(reqs, jobs, key)
        except (BackendError, OSError) as e:
            return [LaunchFailed(str(e), retryable=True) for _ in reqs]
        except Exception as e:  # a defect must not leave the launches unanswered
            log.exception("jobs %s: array launch on %s failed", [r.job_id for r in reqs],
                          self.name)
            return [LaunchFailed(f"job {r.job_id}: {e}", retryable=True) for r in reqs]
        return [self._member_submitted(req, record, eid)
                for req, record, eid in zip(reqs, records, ids, strict=True)]

    def _member_submitted(self, req: LaunchRequest, record: dict[str, Any],
                          engine_id: str) -> LaunchOutcome:
        try:
            return Launched(self._submitted(req, record, engine_id))
        except OSError as e:  # as for one job: its record could not be written
            return LaunchFailed(f"job {req.job_id}: {e}", retryable=True)

    def _submit_array(self, reqs: list[LaunchRequest], jobs: list[EngineJob],
                      key: str) -> list[str]:
        engine = self.engine
        assert isinstance(engine, ArrayEngine)
        named: list[EngineJob] = []
        values: dict[str, str] = {}
        for req, job in zip(reqs, jobs, strict=True):
            job, secret = self._job_with_secrets(req, job)
            named.append(job)
            values.update(secret)
        self._secrets.update(values)
        try:
            ids = engine.submit_array(named, key)
        finally:
            for name in values:
                self._secrets.pop(name, None)
        if len(ids) != len(jobs):
            raise BackendError(f"{self.name} answered {len(ids)} ids for {len(jobs)} jobs")
        return ids

    def _find_id(self, record: dict[str, Any], key: str) -> str | None:
        """The engine's id of the attempt whose record this is, asked by its key (or its
        array's key and its index there)."""
        array = record.get("array")
        if array is None:
            return self.engine.find(key)
        if not isinstance(self.engine, ArrayEngine):
            raise BackendError(f"{self.name} cannot find array {array}: it has no arrays")
        ids = self.engine.find_array(str(array), int(record["size"]))
        return None if ids is None else ids[int(record["index"])]

    # --- one attempt ------------------------------------------------------------------------
    def _launch_one(self, req: LaunchRequest) -> LaunchOutcome:
        try:
            self.check(req)
        except BackendError as e:
            return LaunchFailed(str(e))
        try:
            return Launched(self._hand_over(req, self._engine_job(req)))
        except (BackendError, OSError) as e:  # the engine did not answer as it should
            return LaunchFailed(str(e), retryable=True)
        except Exception as e:  # a defect must not leave the launch unanswered
            log.exception("job %s: launch on %s failed", req.job_id, self.name)
            return LaunchFailed(f"job {req.job_id}: {e}", retryable=True)

    def _hand_over(self, req: LaunchRequest, job: EngineJob) -> Handle:
        """Submit once: the record is written before the submit, so a later try of the same
        attempt (after a crash or a timeout) asks the engine before it submits again."""
        path = state_path(req.status_path)
        record = _read_record(path)
        engine_id: str | None = None
        if record is None:
            record = self._new_record(req, job)
            _write_record(path, record)
        else:
            engine_id = record.get("engine_id") or self._find_id(record, job.key)
        if engine_id is None:
            engine_id = self._submit(req, job)
        return self._submitted(req, record, engine_id)

    def _new_record(self, req: LaunchRequest, job: EngineJob) -> dict[str, Any]:
        return {"key": job.key, "engine_id": None, "grace": job.grace,
                "log_path": str(req.log_path), "offset": 0, "log_size": self._start_log(req)}

    def _submitted(self, req: LaunchRequest, record: dict[str, Any], engine_id: str) -> Handle:
        """The engine's id in the attempt's record, and the attempt followed from now on."""
        record["engine_id"] = engine_id
        _write_record(state_path(req.status_path), record)
        handle = self._handle(str(req.status_path), record)
        self._poller.follow(handle, record)
        return handle

    def _handle(self, status_path: str, record: dict[str, Any]) -> Handle:
        """The handle of the attempt whose record (with its engine id) this is."""
        key = str(record.get("key") or key_of(status_path, self.install))
        # the launcher's layout (ROTA_HOME/status/J-A.json, ROTA_HOME/logs/J.log), for a
        # record lost before its first write
        job = Path(status_path).name.removesuffix(".json").rpartition("-")[0]
        job_log = Path(status_path).parent.parent / "logs" / f"{job}.log"
        return Handle(backend=self.name, pid=0, status_path=status_path,
                      extra={"engine_id": str(record["engine_id"]), "pool": self.pool_name,
                             "key": key, "grace": float(record.get("grace", _GRACE)),
                             "log_path": str(record.get("log_path") or job_log)})

    @staticmethod
    def _start_log(req: LaunchRequest) -> int:
        """The log's folders and Rota's header line; the log's size after it."""
        req.log_path.parent.mkdir(parents=True, exist_ok=True)
        req.status_path.parent.mkdir(parents=True, exist_ok=True)
        if req.log_header:
            with open(req.log_path, "ab") as fh:
                fh.write(req.log_header.encode() + b"\n")
        return _size(req.log_path)

    # --- watch and collect --------------------------------------------------------------
    def watch(self, handle: Handle) -> int | None:
        """A pipe the poller writes to once the job has ended; None when it has already.
        The daemon holds the job's handle from now on: it is told when the job starts."""
        return self._poller.watch(handle)

    def poll_once(self) -> None:
        """One round of the poller (``Poller.poll_once``), now."""
        self._poller.poll_once()

    def status(self, handle: Handle) -> EngineStatus | None:
        """The engine's last word on the job (QUEUED with its reason, RUNNING since when);
        None before the first poll."""
        return self._poller.status(handle)

    def is_alive(self, handle: Handle) -> bool:
        """Not known to have ended. Never asks the engine (the event loop calls this): a
        job not followed yet is followed from now on."""
        return exit_info(self._poller.follow(handle).last) is None

    def collect(self, handle: Handle, watched: bytes = b"") -> ExitInfo | None:
        return exit_info(self.status(handle))

    # --- after a restart ------------------------------------------------------------------
    def locate(self, handle: Handle | None, status_path: str, started_at: float) -> Located:
        """By the stored handle; else by the attempt's record, else by its key (the daemon
        died between the submit and storing its answer). Raises BackendError when the
        engine cannot say whether it ever got the attempt: launching again could run it
        twice."""
        if handle is None:
            handle = self._find(status_path)
            if handle is None:
                return Located(None)
        job = self._poller.known(handle)
        try:
            status = self.engine.poll([job.engine_id])[job.engine_id]
        except (BackendError, KeyError) as e:  # still ours: the poller follows it
            log.warning("%s: job %s not polled after the restart: %s", self.name,
                        job.engine_id, e)
            self._poller.follow(handle)
            return Located(handle)
        self._poller.update(job, status)
        ended = exit_info(status)
        if ended is None:
            self._poller.follow(handle)
        return Located(handle, ended)

    def _find(self, status_path: str) -> Handle | None:
        record = _read_record(state_path(status_path)) or {}
        engine_id = record.get("engine_id") or self._find_id(
            record, str(record.get("key") or key_of(status_path, self.install)))
        return None if engine_id is None else self._handle(status_path,
                                                           {**record, "engine_id": engine_id})

    def tidy(self, status_dir: Path, active: set[str]) -> None:
        """Drop the records (and statuses kept in memory) of attempts whose end is stored."""
        followed = self._poller.forget(active)
        for path in status_dir.glob(f"*{SUFFIX}"):
            status_path = str(path)[:-len(SUFFIX)]
            if status_path not in active and status_path not in followed:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    # --- stop -------------------------------------------------------------------------------
    def signal(self, handle: Handle, sig: int) -> None:
        """The engine's stop handshake, on the command thread (scancel may block). SIGKILL:
        cancel now; another signal: the engine kills after the job's grace."""
        engine_id = str(handle.extra["engine_id"])
        name = signals.Signals(sig).name
        grace = 0.0 if sig == signals.SIGKILL else float(handle.extra.get("grace", _GRACE))
        if self._commands is None:
            self._commands = ThreadPoolExecutor(1, thread_name_prefix=f"rota-{self.name}")
        self._commands.submit(self._stop, engine_id, name, grace)

    def _stop(self, engine_id: str, name: str, grace: float) -> None:
        try:
            self.engine.stop(engine_id, name, grace)
        except BackendError as e:  # gone already, or the engine is down: the kill timer retries
            log.warning("%s: %s to job %s failed: %s", self.name, name, engine_id, e)

    def close(self) -> None:
        """Stop the poller and the command thread (waiting for stops already asked for)."""
        self._poller.stop()
        if self._commands is not None:
            self._commands.shutdown(wait=True)
        self._poller.close_pipes()

    # --- the rest -----------------------------------------------------------------------
    def attach_argv(self, handle: Handle) -> list[str] | None:
        return None

    def list_sessions(self) -> list[str]:
        return []
