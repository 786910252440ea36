"""The discrete-event loop: a virtual clock, arrivals and ends, and a pass after each batch.

Every decision is core's: ``core.schedule`` decides what starts where, ``core.outcome.decide``
what an ended attempt becomes. The loop only keeps the books:

- After a batch of events, ONE pass of core over the whole cluster: every node's GPUs in
  one list, each GpuView carrying its node, so core keeps a job of k whole GPUs (and its
  reservation) on one node and puts a share of a GPU on any GPU (best fit over the
  cluster); whole jobs go to the fullest node that holds them. A pass that starts a wide
  job's node (below) is followed by another, until one starts nothing.
- A pass is skipped when it could start nothing: no GPU has room for the smallest waiting
  job, or the last pass started nothing, no GPU was freed since, and the only new jobs are
  at the tail of the queue and fit nowhere (the pass would decide as the last one did).
- A job wider than the largest node (Tiresias' 8-GPU jobs on 4-GPU nodes) asks core for
  a whole node at a time; the nodes core grants it are held (idle, and unusable to core:
  "held for job N") until it has enough, then it runs on all of them. One such job
  gathers nodes at a time; the others wait.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rota.core import outcome
from rota.core.fairshare import DEFAULT_HALF_LIFE_S, Usage
from rota.core.plan import Plan, Start
from rota.core.pool import GpuPool
from rota.core.schedule import queue_order, schedule
from rota.core.snapshot import MILLI, GpuView, PendingJob, Snapshot
from rota.errors import InvalidSpec
from rota.sim.cluster import Cluster
from rota.sim.policies import SimPolicy, fairshare_priorities
from rota.sim.queue import SimQueue
from rota.sim.trace import SimJob

#: the most fragmentation samples taken over one run (evenly spread over its batches)
FRAG_SAMPLES = 5_000


@dataclass(slots=True)
class JobRecord:
    job: SimJob
    start: float | None = None
    end: float | None = None
    outcome: str = ""  # core.outcome's record: completed, timeout, ...
    estimate: float | None = None  # the first start estimate a plan gave it, if any


@dataclass
class SimResult:
    policy: str
    cluster: Cluster
    records: list[JobRecord]
    fragmentation: list[float] = field(default_factory=list)  # samples, 0..1
    estimates_offered: bool = False  # whether plans carried start_estimates at all
    passes: int = 0
    reasons: dict[int, str] = field(default_factory=dict)  # when asked: last reason per job


class _Node:
    __slots__ = ("free", "free_mem", "holder", "index", "memory", "offset")

    def __init__(self, index: int, offset: int, memory: tuple[int, ...]) -> None:
        self.index, self.offset, self.memory = index, offset, memory
        self.free = [MILLI] * len(memory)
        self.free_mem = list(memory)
        self.holder: int | None = None  # the wide job this node is held for

    def views(self) -> list[GpuView]:
        return [GpuView(index=self.offset + i, memory_total=m, node=self.index)
                for i, m in enumerate(self.memory)]


class Simulation:
    def __init__(self, trace: Sequence[SimJob], cluster: Cluster, policy: SimPolicy,
                 *, half_life: float = DEFAULT_HALF_LIFE_S, record_reasons: bool = False
                 ) -> None:
        if not cluster.nodes:
            raise InvalidSpec("the simulated cluster has no GPUs", field="gpus")
        self.trace = sorted(trace, key=lambda j: (j.submit, j.id))
        self.cluster, self.sp = cluster, policy
        self.half_life, self.record_reasons = half_life, record_reasons
        self.nodes: list[_Node] = []
        offset = 0
        for k, n in enumerate(cluster.nodes):
            self.nodes.append(_Node(k, offset, n.memory))
            offset += n.gpus
        self.node_of = [k for k, n in enumerate(cluster.nodes) for _ in range(n.gpus)]
        self.width = cluster.largest_node  # GPUs of the largest node
        self.queue = SimQueue()
        self.records = {j.id: JobRecord(j) for j in self.trace}
        self.ends: list[tuple[float, int]] = []  # (time, job id)
        self.held: dict[int, list[int]] = {}  # wide job -> nodes granted so far
        self.gathering: int | None = None  # the wide job gathering nodes now
        self.wide_waiting = 0
        self.alloc: dict[int, list[Start]] = {}  # running job -> its starts (one per node)
        self.usage: dict[str, Usage] = {}  # fair share: finished work, decayed
        self.running_by_user: dict[str, list[float]] = {}  # user -> [milli, milli*start]
        self.result = SimResult(policy.name, cluster, list(self.records.values()))
        # the cluster as core's GpuPool, kept up to date with every start and end: each pass
        # works on a copy (Snapshot.pool), not on a pool built from 1,024 GpuViews
        self.pool = GpuPool([v for node in self.nodes for v in node.views()], policy.policy)
        self.gpu_version = 0  # bumped whenever a node's GPUs change
        # (queue version, gpu version) after a pass that started nothing: core's fixed point
        self.settled: tuple[int, int] | None = None

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> SimResult:
        trace, n = self.trace, len(self.trace)
        every = max(1, (2 * n) // FRAG_SAMPLES)
        i = batch = 0
        while i < n or self.ends:
            t = min(trace[i].submit if i < n else math.inf,
                    self.ends[0][0] if self.ends else math.inf)
            while self.ends and self.ends[0][0] == t:  # ends first: their GPUs are free
                self._end(heapq.heappop(self.ends)[1], t)
            while i < n and trace[i].submit == t:
                self._arrive(trace[i], i)
                i += 1
            self._passes(t)
            batch += 1
            if batch % every == 0:
                self._sample_fragmentation()
        return self.result

    def _arrive(self, job: SimJob, seq: int) -> None:
        milli = job.gpus_milli
        if milli > self.width * MILLI:
            if milli % MILLI:
                raise InvalidSpec(f"job {job.id}: a share of a GPU cannot span nodes")
            milli = self.width * MILLI  # a whole node at a time (see the module docstring)
            self.wide_waiting += 1
        prio = self.sp.ordering(job, {}) if self.sp.ordering else 0
        pending = PendingJob(job.id, prio, seq, milli, job.gpu_mem)
        q = self.queue
        # still settled if the pass would decide as the last: a job at the tail that
        # fits nowhere changes nothing ahead of it and cannot start itself
        still = self.settled == (q.version, self.gpu_version) and (
            not q.jobs or queue_order(pending) > queue_order(q.jobs[-1])) \
            and not self._could_fit(milli)
        q.add(pending)
        if still:
            self.settled = (q.version, self.gpu_version)

    def _could_fit(self, milli: int) -> bool:
        """Whether some node has room for a job of ``milli`` (memory not counted)."""
        pool = self.pool
        if milli < MILLI:
            return pool.max_free_share() >= milli
        most = pool.most_whole_on_a_node() if pool.multi else pool.whole_free()
        return most >= milli // MILLI

    def _passes(self, now: float) -> None:
        q = self.queue
        if not q:
            return
        if self.sp.ordering is None:
            self._fair_order(now)
        while q and self.settled != (q.version, self.gpu_version):
            smallest = q.smallest() or 0
            if self.pool.max_free_share() < max(min(smallest, MILLI), 1):
                break  # no GPU has room for any waiting job
            plan = schedule(Snapshot((), self._visible(), presorted=True, by_id=q.by_id,
                                     smallest_milli=smallest, pool=self.pool),
                            self.sp.policy, now)
            self.result.passes += 1
            self._note(plan)
            gathering, wide = False, self.width * MILLI
            for s in plan.starts:
                if self.gathering not in (None, s.job_id) \
                        and self.records[s.job_id].job.gpus_milli > wide:
                    continue  # one wide job gathers at a time: this one waits (left free)
                gathering = self._start(s, now) or gathering
            if not plan.starts:
                self.settled = (q.version, self.gpu_version)
            elif not gathering:
                # core placed what it could over the whole cluster; a wide job granted a
                # node asks again for the next (that node is now left out)
                break

    def _visible(self) -> list[PendingJob]:
        """The queue core sees: while one wide job gathers nodes, the other wide ones wait."""
        if self.gathering is None or self.wide_waiting <= 1:
            return self.queue.jobs
        wide = self.width * MILLI
        return [j for j in self.queue.jobs
                if j.id == self.gathering or j.gpus_milli != wide
                or self.records[j.id].job.gpus_milli <= wide]

    def _note(self, plan: Plan) -> None:
        estimates: dict[int, float] | None = getattr(plan, "start_estimates", None)
        if estimates is not None:
            self.result.estimates_offered = True
            for job_id, at in estimates.items():
                rec = self.records.get(job_id)
                if rec is not None and rec.estimate is None and rec.start is None:
                    rec.estimate = at
        if self.record_reasons:
            for j in self.queue.jobs:
                text = plan.reason_text(j.id)
                if text:
                    self.result.reasons[j.id] = text

    # --- starts and ends ------------------------------------------------------------------
    def _start(self, s: Start, now: float) -> bool:
        """Take the start; True when it granted a wide job one more node (not yet all)."""
        rec = self.records[s.job_id]
        job = rec.job
        node = self.nodes[self.node_of[s.gpu_indices[0]]] if s.gpu_indices else None
        if node is not None:
            for g in s.gpu_indices:
                node.free[g - node.offset] -= s.milli_per_gpu
                node.free_mem[g - node.offset] -= s.gpu_mem or 0
            self.pool.take(s.gpu_indices, s.milli_per_gpu, s.gpu_mem)
            self.gpu_version += 1
        self.alloc.setdefault(job.id, []).append(s)
        if job.gpus_milli > self.width * MILLI:  # a wide job: one more node granted
            assert node is not None
            node.holder = job.id
            for g in s.gpu_indices:
                self.pool.set_unusable(g, f"held for job {job.id}")
            nodes = self.held.setdefault(job.id, [])
            nodes.append(self.node_of[s.gpu_indices[0]])
            self.gathering = job.id
            self.queue.version += 1
            if len(nodes) * self.width * MILLI < job.gpus_milli:
                return True
            self.gathering = None
            self.wide_waiting -= 1
            for k in nodes:
                self.nodes[k].holder = None
                for g in range(self.nodes[k].offset, self.nodes[k].offset + self.width):
                    self.pool.set_unusable(g, None)
        self.queue.remove(job.id)
        rec.start = now
        ru = self.running_by_user.setdefault(job.user, [0.0, 0.0])
        ru[0] += job.gpus_milli
        ru[1] += job.gpus_milli * now
        heapq.heappush(self.ends, (now + job.runs_for, job.id))
        return False

    def _end(self, job_id: int, now: float) -> None:
        rec = self.records[job_id]
        job = rec.job
        timed_out = job.runs_for < job.duration
        facts = outcome.AttemptFacts(
            stop=outcome.StopReason.TIMEOUT if timed_out else None, failures=0,
            policy=outcome.RetryPolicy(), milli=min(job.gpus_milli, MILLI),
            gpu_mem=job.gpu_mem, time_limit=job.time_limit)
        end = outcome.Exited(code=None, signal=9) if timed_out else outcome.Exited(code=0)
        rec.outcome = outcome.decide(facts, end, now).record
        rec.end = now
        for s in self.alloc.pop(job_id, []):
            if s.gpu_indices:
                node = self.nodes[self.node_of[s.gpu_indices[0]]]
                for g in s.gpu_indices:
                    node.free[g - node.offset] += s.milli_per_gpu
                    node.free_mem[g - node.offset] += s.gpu_mem or 0
                self.pool.give(s.gpu_indices, s.milli_per_gpu, s.gpu_mem)
                self.gpu_version += 1
        self.held.pop(job_id, None)  # a wide job's nodes: freed with its starts above
        assert rec.start is not None
        ru = self.running_by_user[job.user]
        ru[0] -= job.gpus_milli
        ru[1] -= job.gpus_milli * rec.start
        used = job.gpus * (now - rec.start)
        self.usage[job.user] = self.usage.get(job.user, Usage(0.0, now)).charged(
            used, (rec.start + now) / 2, now, self.half_life)

    # --- fair share -----------------------------------------------------------------------
    def _fair_order(self, now: float) -> None:
        """Queue priorities from the users' decayed usage (finished work decayed, running
        work counted as used so far), through policies.fairshare_priorities."""
        used: dict[str, float] = {u: x.decayed(now, self.half_life).gpu_seconds
                                  for u, x in self.usage.items()}
        for u, (milli, milli_t) in self.running_by_user.items():
            used[u] = used.get(u, 0.0) + (milli * now - milli_t) / MILLI
        users = {self.records[j.id].job.user for j in self.queue.jobs}
        prio = fairshare_priorities(users | set(used), used)
        jobs = [j._replace(priority=prio[self.records[j.id].job.user])
                for j in self.queue.jobs]
        if any(a.priority != b.priority for a, b in zip(jobs, self.queue.jobs, strict=True)):
            self.queue.reorder(jobs)

    # --- fragmentation --------------------------------------------------------------------
    def _sample_fragmentation(self) -> None:
        """The share of free GPU capacity that cannot hold the smallest waiting job."""
        smallest = self.queue.smallest()
        if not smallest:
            return
        free = stuck = 0
        for node in self.nodes:
            if node.holder is not None:
                continue
            whole = sum(1 for f in node.free if f == MILLI)
            for f in node.free:
                if not f:
                    continue
                free += f
                fits = f >= smallest if smallest < MILLI else \
                    f == MILLI and whole >= smallest // MILLI
                if not fits:
                    stuck += f
        if free:
            self.result.fragmentation.append(stuck / free)


def simulate(trace: Sequence[SimJob], cluster: Cluster, policy: SimPolicy,
             **options: Any) -> SimResult:
    """Replay ``trace`` on ``cluster`` under ``policy`` (rota.sim.policies.POLICIES)."""
    return Simulation(trace, cluster, policy, **options).run()
