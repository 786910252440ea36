"""The daemon's view of its GPUs: readings, paused GPUs, each job's peak memory, the
last hour's history, and the views a scheduling pass plans against.

Simulated GPUs' figures follow the jobs placed on them: ``place``/``release`` mark them
changed and ``refresh`` reads them again after a batch.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from rota.core.snapshot import MILLI, GpuView
from rota.devices.base import DeviceSource, GpuReading
from rota.errors import NotFound
from rota.server.jobs.running import Running
from rota.store.repo import Store

HISTORY_STEP = 10.0  # seconds between GPU history points
HISTORY_POINTS = 360  # one hour of them
#: what is done with a job whose GPUs vanished or turned unhealthy (the GPUs' indices)
OnLost = Callable[[Running, list[int]], None]


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


class DeviceMonitor:
    def __init__(self, devices: DeviceSource, store: Store, clock: Callable[[], float],
                 running: Mapping[int, Running], on_lost: OnLost) -> None:
        self.devices, self.store, self.clock = devices, store, clock
        self.running, self.on_lost = running, on_lost
        self.readings: dict[int, GpuReading] = {}
        self.paused: set[int] = set()
        # per GPU: (time, allocated fraction, memory used, utilisation), the last hour
        self.history: dict[int, deque[tuple[float, float, int, float]]] = {}
        self._history_at = 0.0
        self._dirty = False  # simulated GPUs' figures changed since the last read

    def read(self) -> bool:
        """Take a reading; jobs on GPUs that vanished or turned unhealthy go to ``on_lost``.
        True when something changed that the scheduler should look at."""
        new = {r.index: r for r in self.devices.read()}
        old, self.readings = self.readings, new
        lost = {i for i in old if i not in new or not new[i].healthy} | \
               {i for i, r in new.items() if not r.healthy}
        changed = set(old) != set(new) or any(old[i].healthy != new[i].healthy for i in new
                                              if i in old)
        for r in list(self.running.values()):
            if r.stop_reason is None and lost.intersection(r.gpus):
                self.on_lost(r, sorted(lost.intersection(r.gpus)))
        self._note_peaks(new.values())
        if changed:
            self.store.add_event(job_id=None, kind="gpus_changed", now=self.clock(),
                                 message=f"GPUs present: {sorted(new)}; unhealthy: "
                                         f"{sorted(i for i, r in new.items() if not r.healthy)}")
        return changed

    def load_paused(self) -> None:
        """The GPUs paused in the store (by uuid: an index may change between starts)."""
        uuids = self.store.paused_gpus()
        self.paused = {r.index for r in self.readings.values() if r.uuid in uuids}

    def set_paused(self, index: int, paused: bool) -> None:
        g = self.readings.get(index)
        if g is None:
            raise NotFound(f"no GPU {index}; GPUs present: {sorted(self.readings)}")
        self.store.set_gpu_paused(g.uuid, index, paused)
        (self.paused.add if paused else self.paused.discard)(index)
        self.store.add_event(job_id=None, kind="gpu_paused" if paused else "gpu_resumed",
                             now=self.clock(), message=f"GPU {index}")

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

    def _allocated(self) -> tuple[dict[int, int], dict[int, int]]:
        """Per GPU: the share Rota's jobs hold (thousandths) and the memory they reserve."""
        alloc: dict[int, int] = {}
        mem: dict[int, int] = {}
        for r in self.running.values():
            for i in r.gpus:
                alloc[i] = alloc.get(i, 0) + r.milli
                mem[i] = mem.get(i, 0) + (r.gpu_mem or 0)
        return alloc, mem

    def gpu_views(self) -> list[GpuView]:
        alloc, mem = self._allocated()
        shims = {r.handle.pid for r in self.running.values() if r.handle is not None}
        real = self.devices.kind == "nvml"  # simulated outside use has no real process
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

    def sample_history(self, now: float) -> None:
        """One point per GPU every HISTORY_STEP seconds, the last hour kept (dashboard)."""
        if now - self._history_at < HISTORY_STEP:
            return
        self._history_at = now
        alloc, _ = self._allocated()
        for i, g in self.readings.items():
            points = self.history.setdefault(i, deque(maxlen=HISTORY_POINTS))
            points.append((round(now, 1), alloc.get(i, 0) / MILLI, g.memory_used,
                           round(g.utilization, 3)))

    # --- simulated GPUs: their figures follow their jobs ---------------------------------
    def place(self, run: Running) -> None:
        place = getattr(self.devices, "place", None)
        if place is not None and run.gpus and run.handle is not None:
            place(f"job-{run.job_id}", list(run.gpus), run.milli / MILLI, run.gpu_mem,
                  run.handle.pid)
            self._dirty = True

    def release(self, job_id: int) -> None:
        release = getattr(self.devices, "release", None)
        if release is not None and release(f"job-{job_id}"):
            self._dirty = True

    def refresh(self) -> None:
        """Read simulated GPUs again after a batch that changed their figures."""
        if self._dirty:
            self._dirty = False
            self.read()
