"""The simulator's pending queue, kept in (priority, seq) order as the daemon keeps its own
(rota.server.jobs.queue), so every pass may be ``presorted``; insert and remove by bisection."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort

from rota.core.schedule import queue_order
from rota.core.snapshot import PendingJob


class SimQueue:
    def __init__(self) -> None:
        self.jobs: list[PendingJob] = []
        self.by_id: dict[int, PendingJob] = {}
        self._sizes: list[tuple[int, int]] = []  # (gpus_milli, id), stale entries skipped
        self.version = 0  # bumped on every change: a node's last pass is then out of date

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, job: PendingJob) -> None:
        insort(self.jobs, job, key=queue_order)
        self.by_id[job.id] = job
        heapq.heappush(self._sizes, (job.gpus_milli, job.id))
        self.version += 1

    def remove(self, job_id: int) -> PendingJob:
        job = self.by_id.pop(job_id)
        at = bisect_left(self.jobs, queue_order(job), key=queue_order)
        assert self.jobs[at].id == job_id
        del self.jobs[at]
        self.version += 1
        return job

    def reorder(self, jobs: list[PendingJob]) -> None:
        """Take new priorities for every job (fair share moves as usage does)."""
        jobs.sort(key=queue_order)
        self.jobs = jobs
        self.by_id = {j.id: j for j in jobs}
        self.version += 1

    def smallest(self) -> int | None:
        """The least gpus_milli among the waiting jobs (Snapshot.smallest_milli)."""
        sizes = self._sizes
        while sizes and sizes[0][1] not in self.by_id:
            heapq.heappop(sizes)
        return sizes[0][0] if sizes else None
