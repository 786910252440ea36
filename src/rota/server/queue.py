"""The in-memory pending queue, kept in scheduling order so a pass needs no sort."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping

from rota.core.schedule import queue_order
from rota.core.snapshot import PendingJob


class PendingQueue:
    def __init__(self) -> None:
        self._jobs: list[PendingJob] = []
        self._by_id: dict[int, PendingJob] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._by_id

    def add(self, job: PendingJob) -> None:
        if job.id in self._by_id:
            self.remove(job.id)
        insort(self._jobs, job, key=queue_order)
        self._by_id[job.id] = job

    def load(self, jobs: list[PendingJob]) -> None:
        """Take up jobs already in queue order, as Store.queued reads them (an insort each
        moved the list's tail every time: minutes for a million). The list is kept."""
        if self._jobs:
            for job in jobs:
                self.add(job)
            return
        self._jobs = jobs
        self._by_id = {job.id: job for job in jobs}

    def remove(self, job_id: int) -> PendingJob | None:
        job = self._by_id.pop(job_id, None)
        if job is None:
            return None
        i = bisect_left(self._jobs, queue_order(job), key=queue_order)
        while self._jobs[i].id != job_id:
            i += 1
        del self._jobs[i]
        return job

    def get(self, job_id: int) -> PendingJob | None:
        return self._by_id.get(job_id)

    def index(self) -> Mapping[int, PendingJob]:
        """The queue by job id (live: it changes with the queue), for Snapshot.by_id."""
        return self._by_id

    def ordered(self) -> list[PendingJob]:
        """The queue in order; the list is shared, do not change it."""
        return self._jobs
