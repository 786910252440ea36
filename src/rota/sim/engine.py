"""The discrete-event loop: a virtual clock, arrivals and ends, and a pass after each batch.

Every decision is core's: ``core.schedule`` decides what starts where (one call per node:
core places a job on one machine's GPU list, so a job of up to a node's GPUs lands on ONE
node), ``core.outcome.decide`` what an ended attempt becomes. The loop only keeps the books:

- Nodes are offered to core in index order (first fit across nodes; best fit inside one,
  as core does). After a batch of events, every node whose GPUs or queue changed since its
  last pass gets a pass; rounds repeat while some pass starts a job (a start changes the
  queue for every node: under strict FIFO the next job may fit elsewhere).
- Only the first reservation of a round is kept: later nodes in that round pass with
  ``reserve_for_blocked`` off, so a blocked job keeps GPUs on one node, not on all.
- A job wider than the largest node (Tiresias' 8-GPU jobs on 4-GPU nodes) asks core for
  a whole node at a time; the nodes core grants it are held (idle) until it has enough,
  then it runs on all of them. One such job gathers nodes at a time; the others wait.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rota.core import outcome
from rota.core.fairshare import DEFAULT_HALF_LIFE_S, Usage
from rota.core.plan import Plan, Start
from rota.core.schedule import schedule
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
    __slots__ = ("free", "free_mem", "holder", "memory", "offset", "seen", "version")

    def __init__(self, offset: int, memory: tuple[int, ...]) -> None:
        self.offset, self.memory = offset, memory
        self.free = [MILLI] * len(memory)
        self.free_mem = list(memory)
        self.version = 0
        self.seen: tuple[int, int] | None = None  # (queue version, own version) last passed
        self.holder: int | None = None  # the wide job this node is held for

    def views(self) -> list[GpuView]:
        return [GpuView(index=self.offset + i, memory_total=m, allocated_milli=MILLI - f,
                        reserved_memory=m - fm)
                for i, (m, f, fm) in enumerate(zip(self.memory, self.free, self.free_mem,
                                                   strict=True))]


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
        for n in cluster.nodes:
            self.nodes.append(_Node(offset, n.memory))
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
        self.queue.add(PendingJob(job.id, prio, seq, milli, job.gpu_mem))

    def _passes(self, now: float) -> None:
        q = self.queue
        if not q:
            return
        if self.sp.ordering is None:
            self._fair_order(now)
        while q:
            started = kept = False
            smallest = q.smallest() or 0
            for node in self.nodes:
                if not q:
                    break
                if node.holder is not None or max(node.free) < min(smallest, MILLI) or (
                        smallest == 0 and max(node.free) == 0):
                    continue
                if node.seen == (q.version, node.version):
                    continue  # nothing changed since its last pass: the same answer
                node.seen = (q.version, node.version)
                policy = self.sp.policy if not kept else \
                    replace(self.sp.policy, reserve_for_blocked=False)
                plan = schedule(Snapshot(node.views(), self._visible(), presorted=True,
                                         by_id=q.by_id, smallest_milli=smallest), policy, now)
                self.result.passes += 1
                kept = kept or bool(plan.reservations)
                self._note(plan)
                for s in plan.starts:
                    self._start(s, now)
                    started = True
                if plan.starts:
                    smallest = q.smallest() or 0
            if not started:
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
    def _start(self, s: Start, now: float) -> None:
        rec = self.records[s.job_id]
        job = rec.job
        node = self.nodes[self.node_of[s.gpu_indices[0]]] if s.gpu_indices else None
        if node is not None:
            for g in s.gpu_indices:
                node.free[g - node.offset] -= s.milli_per_gpu
                node.free_mem[g - node.offset] -= s.gpu_mem or 0
            node.version += 1
        if job.gpus_milli > self.width * MILLI:  # a wide job: one more node granted
            assert node is not None
            node.holder = job.id
            nodes = self.held.setdefault(job.id, [])
            nodes.append(self.node_of[s.gpu_indices[0]])
            self.gathering = job.id
            self.queue.version += 1
            if len(nodes) * self.width * MILLI < job.gpus_milli:
                return
            self.gathering = None
            self.wide_waiting -= 1
            for k in nodes:
                self.nodes[k].holder = None
        self.alloc.setdefault(job.id, []).append(s)
        self.queue.remove(job.id)
        rec.start = now
        ru = self.running_by_user.setdefault(job.user, [0.0, 0.0])
        ru[0] += job.gpus_milli
        ru[1] += job.gpus_milli * now
        heapq.heappush(self.ends, (now + job.runs_for, job.id))

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
                node.version += 1
        for k in self.held.pop(job_id, []):  # a wide job's other nodes
            node = self.nodes[k]
            node.free = [MILLI] * len(node.memory)
            node.free_mem = list(node.memory)
            node.version += 1
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
