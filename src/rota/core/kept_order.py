"""The fair-share order of a queue that changes a few jobs at a time, kept between orders.

``rota.core.fairshare.order_queue`` is the definition (the simulator calls it); this gives
the very same order without touching every job in Python each time. A job's weighted total
is its group's constant (user, project, priority, size) plus its age term, so what each job
brings to an order is three numbers: its group, its submission time and its seq. They are
kept in arrays as jobs come and go (one O(1) step each: appended, or swapped with the last),
and an order is the group constants worked out once per group (hundreds), the totals and a
sort, all in numpy: at 100,000 jobs about a fifth of order_queue's time (docs/benchmarks.md).

Pure: no I/O, no clock; ``now`` and the standing come from the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter

import numpy as np

from rota.core.fairshare import Standing, Weights, group_of, priority_term, size_term
from rota.core.snapshot import PendingJob

_Group = tuple[str, str | None, int, int]


class KeptOrder:
    def __init__(self, jobs: Iterable[PendingJob] = ()) -> None:
        self._jobs: list[PendingJob] = []  # in no order: a removal swaps in the last
        self._at: dict[int, int] = {}  # job id -> its place in _jobs and the arrays
        self._groups: dict[_Group, int] = {}
        # each group's owner (user, project), priority and size, by the group's number
        self._owners: dict[tuple[str, str | None], int] = {}
        self._g_owner: list[int] = []
        self._g_priority: list[int] = []
        self._g_milli: list[int] = []
        self._n = 0
        self._seq = np.empty(0, dtype=np.int64)
        self._submitted = np.empty(0, dtype=np.float64)
        self._group = np.empty(0, dtype=np.intp)
        self._milli = np.empty(0, dtype=np.int64)
        self.reset(jobs)

    def __len__(self) -> int:
        return self._n

    def reset(self, jobs: Iterable[PendingJob]) -> None:
        """Keep exactly ``jobs`` (a queue taken up afresh)."""
        self._jobs = list(jobs)
        self._n = n = len(self._jobs)
        self._at = {job.id: i for i, job in enumerate(self._jobs)}
        if len(self._at) != n:
            raise ValueError("a job id appears twice in the queue")
        self._groups, self._owners = {}, {}
        self._g_owner, self._g_priority, self._g_milli = [], [], []
        number = self._number
        grow = max(n, 1024)
        self._seq = np.empty(grow, dtype=np.int64)
        self._submitted = np.empty(grow, dtype=np.float64)
        self._group = np.empty(grow, dtype=np.intp)
        self._milli = np.empty(grow, dtype=np.int64)
        if n:
            self._seq[:n] = [j.seq for j in self._jobs]
            self._submitted[:n] = [j.submitted for j in self._jobs]
            self._milli[:n] = [j.gpus_milli for j in self._jobs]
            self._group[:n] = [number(g) for g in map(group_of, self._jobs)]

    def add(self, job: PendingJob) -> None:
        """A job joins (one already kept under its id is replaced)."""
        if job.id in self._at:
            self.remove(job.id)
        i = self._n
        if i == len(self._seq):
            self._grow()
        self._seq[i], self._submitted[i], self._milli[i] = job.seq, job.submitted, job.gpus_milli
        self._group[i] = self._number(group_of(job))
        self._at[job.id] = i
        self._jobs.append(job)
        self._n = i + 1

    def remove(self, job_id: int) -> None:
        """A job leaves (one not kept is ignored)."""
        i = self._at.pop(job_id, None)
        if i is None:
            return
        last = self._n - 1
        moved = self._jobs.pop()
        if i != last:  # the last takes its place
            self._jobs[i] = moved
            self._at[moved.id] = i
            for a in (self._seq, self._submitted, self._group, self._milli):
                a[i] = a[last]
        self._n = last

    def order(self, standing: Standing, weights: Weights, now: float,
              largest_milli: int | None = None) -> list[PendingJob]:
        """The kept jobs in order_queue's order (the same arguments, the same result)."""
        n = self._n
        if n <= 1:
            return list(self._jobs)
        scale = largest_milli if largest_milli is not None else int(self._milli[:n].max())
        # each group's constant (rota.core.fairshare.group_constant) from its three parts,
        # each worked out once per distinct value: groups are many (tens of thousands of
        # priorities x sizes x owners), the values few
        fs = weights.fair_share
        owner = np.array([fs * min(1.0, max(0.0, standing.factor(*o))) for o in self._owners],
                         dtype=np.float64)
        priorities, p_at = np.unique(np.array(self._g_priority, dtype=np.int64),
                                     return_inverse=True)
        sizes, m_at = np.unique(np.array(self._g_milli, dtype=np.int64), return_inverse=True)
        pt = np.array([priority_term(int(p), weights) for p in priorities], dtype=np.float64)
        st = np.array([size_term(int(m), weights, scale) for m in sizes], dtype=np.float64)
        consts = pt[p_at] + owner[np.array(self._g_owner, dtype=np.intp)] + st[m_at]
        total = consts[self._group[:n]]
        t = self._submitted[:n]
        dated = t != 0.0  # a job with no submission time has no age
        if not weights.max_age_s:
            total = total + np.where(dated, weights.age, 0.0)
        else:
            x = (now - t) / weights.max_age_s
            total = total + np.where(dated, weights.age * np.clip(x, 0.0, 1.0), 0.0)
        # the highest total first, then seq: np.lexsort sorts by its last key first
        picked = np.lexsort((self._seq[:n], -total)).tolist()
        return list(itemgetter(*picked)(self._jobs))

    def _number(self, group: _Group) -> int:
        """The group's number, a new one the first time it is seen."""
        number = self._groups.get(group)
        if number is None:
            number = self._groups[group] = len(self._groups)
            owner = (group[0], group[1])
            self._g_owner.append(self._owners.setdefault(owner, len(self._owners)))
            self._g_priority.append(group[2])
            self._g_milli.append(group[3])
        return number

    def _grow(self) -> None:
        size = max(2 * len(self._seq), 1024)
        for name in ("_seq", "_submitted", "_group", "_milli"):
            old = getattr(self, name)
            new = np.empty(size, dtype=old.dtype)
            new[: self._n] = old[: self._n]
            setattr(self, name, new)

