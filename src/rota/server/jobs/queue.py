"""The in-memory pending queue, kept in scheduling order so a pass needs no sort.

Jobs of a cluster engine's pool are kept apart, a queue per pool: an engine places them,
so they never enter this machine's pass (rota.core.forward hands them over). Two more
kinds of job are kept apart so that a pass over a million-job queue touches only what can
matter to it: the jobs that depend on others (their dependencies' states are read for
each pass), and the jobs that can never start on this machine as it is (forced in anyway:
rota.core.feasibility), which a pass would otherwise walk past one by one every time. The
latter are decided when they join and again whenever the machine's GPUs change.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterator, Mapping
from heapq import merge
from operator import attrgetter

from rota.core.feasibility import never_runnable
from rota.core.schedule import queue_order
from rota.core.snapshot import PendingJob

Shape = tuple[int, int | None, frozenset[int] | None]


class PendingQueue:
    def __init__(self) -> None:
        self._jobs: list[PendingJob] = []  # the ones a pass looks at, in queue order
        self._milli: Counter[int] = Counter()  # how many of them ask for each gpus_milli
        self._by_id: dict[int, PendingJob] = {}  # every job, those set aside included
        self._with_deps: dict[int, PendingJob] = {}
        self._aside: dict[int, str] = {}  # never-runnable job id -> why
        self._aside_jobs: list[PendingJob] = []  # the same jobs, in queue order
        self._engines: dict[str, list[PendingJob]] = {}  # cluster pool -> its jobs, in order
        self._machine: dict[int, int] | None = None  # GPU index -> total memory
        self._never: dict[Shape, str | None] = {}  # per shape, on self._machine
        # bumped at every change of the jobs a pass looks at (an order kept of them is stale)
        self.version = 0
        # what happened to those jobs since changes() was last asked, (added?, job) in
        # order; None: taken up afresh (or too many changes to replay), or never asked
        self._journal: list[tuple[bool, PendingJob]] | None = None

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._by_id

    def add(self, job: PendingJob) -> None:
        self.version += 1
        if job.id in self._by_id:
            self.remove(job.id)
        self._by_id[job.id] = job
        if job.after:
            self._with_deps[job.id] = job
        if job.pool is not None:  # an engine places it: never in this machine's pass
            insort(self._engines.setdefault(job.pool, []), job, key=queue_order)
            return
        why = self._why_never(job)
        if why is not None:
            self._aside[job.id] = why
            insort(self._aside_jobs, job, key=queue_order)
        else:
            insort(self._jobs, job, key=queue_order)
            self._milli[job.gpus_milli] += 1
            self._note(True, job)

    def load(self, jobs: list[PendingJob]) -> None:
        """Take up jobs already in queue order, as Store.queued reads them (an insort each
        moved the list's tail every time: minutes for a million). The list is kept."""
        self.version += 1
        if self._by_id:
            for job in jobs:
                self.add(job)
            return
        self._journal = None
        self._by_id = {job.id: job for job in jobs}
        self._with_deps = {job.id: job for job in jobs if job.after}
        if any(map(_pool_of, jobs)):
            for job in jobs:
                if job.pool is not None:
                    self._engines.setdefault(job.pool, []).append(job)  # still in order
            jobs = [job for job in jobs if job.pool is None]
        self._jobs = jobs
        self._milli = Counter(map(_milli_of, jobs))
        if self._machine is not None:
            self._sort_out()

    def extend(self, jobs: list[PendingJob]) -> None:
        """Take up a page of jobs in queue order, each after every job a page before it
        brought (a restart's queue read page by page while the daemon already answers),
        among jobs added meanwhile one by one; a job the queue holds already is left as it
        is (what was added meanwhile is newer than the page). Each run is merged in where
        it goes: the cost is the page's and that of the jobs queued behind it."""
        jobs = [job for job in jobs if job.id not in self._by_id]
        if not jobs:
            return
        self.version += 1
        self._journal = None
        self._by_id.update((job.id, job) for job in jobs)
        self._with_deps.update((job.id, job) for job in jobs if job.after)
        if any(map(_pool_of, jobs)):
            for pool in {job.pool for job in jobs if job.pool is not None}:
                _merge(self._engines.setdefault(pool, []), [j for j in jobs if j.pool == pool])
            jobs = [job for job in jobs if job.pool is None]
        aside: list[PendingJob] = []
        if self._machine is not None:
            never = {shape for shape in set(map(_shape_of, jobs)) if self._shape_never(shape)}
            if never:
                aside = [j for j in jobs if not j.after and _shape_of(j) in never]
                jobs = [j for j in jobs if j.after or _shape_of(j) not in never]
                self._aside.update((j.id, self._never[_shape_of(j)] or "") for j in aside)
                _merge(self._aside_jobs, aside)
        _merge(self._jobs, jobs)
        self._milli.update(map(_milli_of, jobs))

    def remove(self, job_id: int) -> PendingJob | None:
        job = self._by_id.pop(job_id, None)
        if job is None:
            return None
        self.version += 1
        self._with_deps.pop(job_id, None)
        if job.pool is not None:
            queue = self._engines[job.pool]
            _drop(queue, job)
            if not queue:
                del self._engines[job.pool]
            return job
        if self._aside.pop(job_id, None) is not None:
            _drop(self._aside_jobs, job)
            return job
        _drop(self._jobs, job)
        self._milli[job.gpus_milli] -= 1
        if not self._milli[job.gpus_milli]:
            del self._milli[job.gpus_milli]
        self._note(False, job)
        return job

    def get(self, job_id: int) -> PendingJob | None:
        return self._by_id.get(job_id)

    def index(self) -> Mapping[int, PendingJob]:
        """The queue by job id (live: it changes with the queue), for Snapshot.by_id."""
        return self._by_id

    def ordered(self) -> list[PendingJob]:
        """The jobs a pass looks at, in order; the list is shared, do not change it."""
        return self._jobs

    def changes(self) -> list[tuple[bool, PendingJob]] | None:
        """What joined (True) and left (False) the jobs a pass looks at since the last
        call, in order, for an order kept of them (rota.server.policy.fair_order); None when they
        must be taken afresh from ``ordered()``. The next record starts now."""
        taken, self._journal = self._journal, []
        return taken

    def _note(self, added: bool, job: PendingJob) -> None:
        if self._journal is not None:
            self._journal.append((added, job))
            if len(self._journal) > max(4096, len(self._jobs) // 4):  # afresh is cheaper
                self._journal = None

    def engine_queues(self) -> Mapping[str, list[PendingJob]]:
        """Each cluster pool's waiting jobs, in queue order (shared: do not change them)."""
        return self._engines

    def smallest_milli(self) -> int:
        """The least gpus_milli among the jobs a pass looks at (Snapshot.smallest_milli)."""
        return min(self._milli, default=0)

    def with_dependencies(self) -> Iterator[PendingJob]:
        """The jobs that name others in ``after`` (set aside or not)."""
        return iter(self._with_deps.values())

    # --- jobs that can never start on this machine -----------------------------------------
    def fit_to(self, memory_totals: Mapping[int, int]) -> None:
        """The machine's GPUs (index -> total memory), at every pass: when they changed,
        which jobs can never start is decided again."""
        if self._machine == memory_totals:
            return
        self._machine = dict(memory_totals)
        self._never.clear()
        self._sort_out()

    def never_reason(self, job_id: int) -> str | None:
        """Why a job set aside can never start (None for any other job)."""
        return self._aside.get(job_id)

    def aside(self) -> list[PendingJob]:
        """The jobs set aside, in queue order; the list is shared, do not change it."""
        return self._aside_jobs

    def _why_never(self, job: PendingJob) -> str | None:
        # a job with dependencies stays in the pass: a failed one must still cancel it
        if self._machine is None or job.after or not job.gpus_milli:
            return None
        return self._shape_never(job.shape)

    def _shape_never(self, shape: Shape) -> str | None:
        if shape not in self._never:
            assert self._machine is not None
            self._never[shape] = never_runnable(*shape, self._machine)
        return self._never[shape]

    def _sort_out(self) -> None:
        """Set aside the jobs that cannot start, take back those that now can: once per
        change of the machine, a few distinct shapes, list comprehensions over the queue
        (a method call per job took 0.8 s for a million)."""
        self.version += 1
        self._journal = None
        merged = bool(self._aside_jobs)
        jobs = self._jobs + self._aside_jobs if merged else self._jobs
        never = {shape for shape in set(map(_shape_of, jobs)) if self._shape_never(shape)}
        if never:
            kept = [j for j in jobs if j.after or _shape_of(j) not in never]
            aside = [j for j in jobs if not j.after and _shape_of(j) in never]
        else:
            kept, aside = jobs, []
        if kept is not self._jobs:
            self._milli = Counter(map(_milli_of, kept))
        if merged:  # two sorted runs each: a sort merges them in linear time
            kept.sort(key=queue_order)
            aside.sort(key=queue_order)
        self._jobs, self._aside_jobs = kept, aside
        self._aside = {j.id: self._never[_shape_of(j)] or "" for j in aside}  # never None


_shape_of = attrgetter("gpus_milli", "gpu_mem", "allowed")  # PendingJob.shape, in C
_milli_of = attrgetter("gpus_milli")
_pool_of = attrgetter("pool")


def _merge(into: list[PendingJob], run: list[PendingJob]) -> None:
    """Merge ``run`` (in queue order) into ``into`` (in queue order), in place."""
    if not run:
        return
    k = bisect_left(into, queue_order(run[0]), key=queue_order)
    into[k:] = merge(run, into[k:], key=queue_order)


def _drop(jobs: list[PendingJob], job: PendingJob) -> None:
    """Remove ``job`` from ``jobs``, which are in queue order."""
    i = bisect_left(jobs, queue_order(job), key=queue_order)
    while jobs[i].id != job.id:
        i += 1
    del jobs[i]
