"""Following a pool's engine jobs: the jobs one ``EngineBackend`` follows, and its poller.

``EngineBackend`` (``rota.backends.engine_backend``) launches, locates and stops; this is
what it knows of its jobs once they are the engine's, kept apart because it runs on a
thread of its own:

- One poller thread per adapter asks ``engine.poll`` about every followed job at once
  every ``poll_every`` seconds, copies new output into the job's log (the engine-side
  offset kept in the attempt's record, ``rota.backends.engine_record``), and makes the
  job's watch fd readable once it has ended.
- ``on_start(status_path, started_at)`` tells the daemon when the engine has started an
  attempt it held in its queue (the first time this adapter sees it running, or ended
  after a start): the job runs from then on, and its time limit counts from then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rota.backends.base import Handle
from rota.backends.engine import Engine, EngineState, EngineStatus
from rota.backends.engine_record import _read_record, _write_record, state_path
from rota.errors import BackendError

log = logging.getLogger("rota.backends.engine")

_ENDED = (EngineState.ENDED, EngineState.LOST)
_READS_PER_POLL = 8  # log reads per job per poll while it runs (a chatty job cannot starve)
_FINAL_READS = 1024  # after its end: the rest of its output, bounded all the same

#: Told an attempt's status path and when its engine started it, if the engine says
#: (called from the poller thread, or the daemon's during recovery).
OnStart = Callable[[str, float | None], None]


@dataclasses.dataclass
class _Job:
    """One attempt's engine job as the adapter follows it."""

    engine_id: str
    status_path: str
    log_path: Path
    offset: int = 0  # engine-side: how much of its output is in the log already
    log_size: int = 0  # the log's size right after the last copy
    last: EngineStatus | None = None
    following: bool = False  # polled by the poller
    watched: bool = False  # the daemon holds its handle (it can be told of its start)
    told_start: bool = False  # on_start has been called for it
    pipes: list[int] = dataclasses.field(default_factory=list)  # watch fds' write ends
    copying: threading.Lock = dataclasses.field(default_factory=threading.Lock)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class Poller:
    """The engine jobs one pool's adapter knows, by engine id, and the thread that polls
    the followed ones (see the module's docstring)."""

    def __init__(self, engine: Engine, name: str, poll_every: float,
                 on_start: OnStart | None) -> None:
        self.engine = engine
        self.name = name  # the adapter's, in log lines and the thread's name
        self.poll_every = poll_every
        self.on_start = on_start
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}  # by engine id
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    def known(self, handle: Handle, record: dict[str, Any] | None = None) -> _Job:
        eid = str(handle.extra["engine_id"])
        with self._lock:
            job = self._jobs.get(eid)
            if job is None:
                job = self._jobs[eid] = self._job_of(handle, record)
        return job

    def follow(self, handle: Handle, record: dict[str, Any] | None = None) -> _Job:
        """Poll this job from now on (its output copied from where the record says)."""
        job = self.known(handle, record)
        with self._lock:
            if job.last is None or job.last.state not in _ENDED:
                job.following = True
            self._start_poller()
        return job

    def _job_of(self, handle: Handle, record: dict[str, Any] | None) -> _Job:
        """Where its output stands. The log is appended before the record is written, so
        a daemon killed in between finds the log longer than the record says: those bytes
        are the engine's next ones, and are not copied twice."""
        eid = str(handle.extra["engine_id"])
        log_path = Path(handle.extra["log_path"])
        record = record or _read_record(state_path(handle.status_path)) or {}
        offset, recorded = int(record.get("offset") or 0), record.get("log_size")
        size = _size(log_path)
        if recorded is not None and size > int(recorded):
            offset += size - int(recorded)
        return _Job(engine_id=eid, status_path=handle.status_path, log_path=log_path,
                    offset=offset, log_size=size)

    def _start_poller(self) -> None:
        if self._thread is None and not self._closing.is_set():
            self._thread = threading.Thread(target=self._poll_loop, daemon=True,
                                            name=f"rota-poll-{self.name}")
            self._thread.start()

    def _poll_loop(self) -> None:
        while not self._closing.wait(self.poll_every):
            try:
                self.poll_once()
            except Exception:  # keep polling: the next round may succeed
                log.exception("%s: polling failed", self.name)

    def poll_once(self) -> None:
        """One round: every followed job's status in one ``engine.poll``, new output copied,
        ended jobs' watch fds made readable."""
        with self._lock:
            ids = [eid for eid, job in self._jobs.items() if job.following]
        if not ids:
            return
        try:
            statuses = self.engine.poll(ids)
        except BackendError as e:
            log.warning("%s: polling %d jobs failed: %s", self.name, len(ids), e)
            return
        for eid in ids:
            status = statuses.get(eid)
            job = self._jobs.get(eid)
            if status is not None and job is not None:
                self.update(job, status)

    def update(self, job: _Job, status: EngineStatus) -> None:
        ended = status.state in _ENDED
        if status.state is not EngineState.QUEUED:
            self._copy_log(job, _FINAL_READS if ended else _READS_PER_POLL)
        with self._lock:
            job.last = status
            started = self._to_tell(job)
            pipes: list[int] = []
            if ended:
                job.following = False
                pipes, job.pipes = job.pipes, []
        self._tell_start(job, started)  # before its end: it ran
        for fd in pipes:  # the output is in the log before the daemon hears of the end
            with contextlib.suppress(OSError):  # the daemon stopped watching it
                os.write(fd, b"ended\n")
            os.close(fd)

    def _copy_log(self, job: _Job, reads: int) -> None:
        with job.copying:  # one copier at a time, or output would be copied twice
            for _ in range(reads):
                if not self._copy_once(job):
                    return

    def _copy_once(self, job: _Job) -> bool:
        """One read of new output into the log; False when there was none (or no answer)."""
        try:
            data = self.engine.read_log(job.engine_id, job.offset)
        except (BackendError, OSError) as e:
            log.warning("%s: reading job %s's output failed: %s", self.name, job.engine_id, e)
            return False
        if data:
            self._append(job, data)
        return bool(data)

    def _append(self, job: _Job, data: bytes) -> None:
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(job.log_path, "ab") as fh:
            fh.write(data)
            job.log_size = fh.tell()
        job.offset += len(data)
        path = state_path(job.status_path)
        record = _read_record(path) or {"engine_id": job.engine_id}
        record.update(offset=job.offset, log_size=job.log_size)
        _write_record(path, record)

    # --- watch ------------------------------------------------------------------------------
    def watch(self, handle: Handle) -> int | None:
        """A pipe the poller writes to once the job has ended; None when it has already.
        The daemon holds the job's handle from now on: it is told when the job starts."""
        job = self.follow(handle)
        with self._lock:
            job.watched = True
            started = self._to_tell(job)
            read_end: int | None = None
            if job.following:
                read_end, write_end = os.pipe()
                job.pipes.append(write_end)
        self._tell_start(job, started)
        return read_end

    @staticmethod
    def _to_tell(job: _Job) -> EngineStatus | None:
        """Under the lock: the status that says the job started, if the daemon watches it
        and has not been told yet (it then has been)."""
        last = job.last
        if job.told_start or not job.watched or last is None or not (
                last.state is EngineState.RUNNING or last.started_at is not None):
            return None
        job.told_start = True
        return last

    def _tell_start(self, job: _Job, started: EngineStatus | None) -> None:
        if started is not None and self.on_start is not None:
            self.on_start(job.status_path, started.started_at)

    def status(self, handle: Handle) -> EngineStatus | None:
        """The engine's last word on the job (QUEUED with its reason, RUNNING since when);
        None before the first poll."""
        job = self._jobs.get(str(handle.extra.get("engine_id")))
        return None if job is None else job.last

    # --- forgetting, closing ----------------------------------------------------------------
    def forget(self, active: set[str]) -> set[str]:
        """Drop the statuses kept in memory of attempts whose end is stored (not followed,
        not in ``active``); the status paths of the jobs still followed."""
        with self._lock:
            followed = {j.status_path for j in self._jobs.values() if j.following}
            for eid, job in list(self._jobs.items()):
                if not job.following and job.status_path not in active:
                    del self._jobs[eid]
        return followed

    def stop(self) -> None:
        """Stop the poller thread (the round under way ends first)."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join()

    def close_pipes(self) -> None:
        """Close the watch fds' write ends still held (the daemon's reads see EOF)."""
        with self._lock:
            for job in self._jobs.values():
                for fd in job.pipes:
                    os.close(fd)
                job.pipes.clear()
