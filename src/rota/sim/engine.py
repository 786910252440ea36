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
- Each job carries the run time it is expected to run (``expected``, see EXPECTED): as the
  daemon, its time limit, else the p90 of the last runs of its name (rota.core.runtime),
  so core's EASY backfill and start estimates work as they do in the daemon.
- Fair share orders the queue with rota.core.fairshare.order_queue, over the decayed usage
  of ended and running jobs (fairshare.EndedUsage), as rota.server.policy.fair_order does.
- A job wider than the largest node (Tiresias' 8-GPU jobs on 4-GPU nodes) asks core for
  a whole node at a time; the nodes core grants it are held (idle, and unusable to core:
  "held for job N") until it has enough, then it runs on all of them. One such job
  gathers nodes at a time; the others wait.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from rota.config import PrioritySettings
from rota.core import outcome
from rota.core.backfill import Occupant, start_estimates
from rota.core.fairshare import EndedUsage, Standing, order_queue
from rota.core.plan import Plan, Start
from rota.core.pool import GpuPool
from rota.core.preempt import RunningJob
from rota.core.runtime import History
from rota.core.runtime import expected as expected_of
from rota.core.schedule import queue_order, schedule
from rota.core.snapshot import MILLI, GpuView, PendingJob, Snapshot
from rota.errors import InvalidSpec
from rota.sim.cluster import Cluster
from rota.sim.policies import SimPolicy
from rota.sim.queue import SimQueue
from rota.sim.trace import SimJob

#: the most fragmentation samples taken over one run (evenly spread over its batches)
FRAG_SAMPLES = 5_000
#: where a job's expected run time comes from: history = the daemon's way (its time limit,
#: else the p90 of the completed runs of its name so far); limit = its time limit only;
#: oracle = its true run time (an upper bound on what estimates can do); none = unknown
EXPECTED = ("history", "limit", "oracle", "none")
#: start estimates for at most this many waiting jobs a pass (Policy.estimate_jobs)
ESTIMATE_JOBS = 100


class _Run(NamedTuple):
    """A started job as fair share reads it (rota.core.fairshare.Run)."""

    user: str
    project: str | None
    gpus: float
    started_at: float
    ended_at: float | None = None


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


@dataclass(frozen=True)
class Shares:
    """The fair shares the fairshare policy orders by, as ``rota share set`` stores them
    (a user or project not named has 1)."""

    users: Mapping[str, float] = field(default_factory=dict)
    projects: Mapping[str, float] = field(default_factory=dict)


class Simulation:
    def __init__(self, trace: Sequence[SimJob], cluster: Cluster, policy: SimPolicy,
                 *, priority: PrioritySettings | None = None, expected: str = "history",
                 estimate_jobs: int = ESTIMATE_JOBS, record_reasons: bool = False,
                 shares: Shares | None = None) -> None:
        if not cluster.nodes:
            raise InvalidSpec("the simulated cluster has no GPUs", field="gpus")
        if expected not in EXPECTED:
            raise InvalidSpec(f"expected run times {expected!r}: use one of "
                              f"{', '.join(EXPECTED)}", field="expected")
        if estimate_jobs < 0:
            raise InvalidSpec(f"estimate jobs {estimate_jobs}: give 0 or more",
                              field="estimate_jobs")
        self.trace = sorted(trace, key=lambda j: (j.submit, j.id))
        self.cluster, self.sp = cluster, policy
        self.record_reasons, self.expected_from = record_reasons, expected
        self.priority = priority or PrioritySettings()
        self.weights = self.priority.weights()
        self.shares = shares or Shares()
        # the pass itself gives no estimates: _estimate asks core for them when a job
        # at the head of the queue waits with none yet (only the first is measured)
        self.policy = replace(policy.policy, estimate_jobs=estimate_jobs)
        self.policy_quiet = replace(policy.policy, estimate_jobs=0)
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
        self.base: dict[int, PendingJob] = {}  # waiting job -> as it came (its own priority)
        self.running: dict[int, list[RunningJob]] = {}  # for backfill's shadow time
        self.known_ends = 0  # how many of them have an expected end
        self.offered: set[int] = set()  # jobs a pass with start estimates has looked at
        self.history = History()  # completed run times by name, for predictions
        self.ended_usage = EndedUsage(self.priority.half_life)  # fair share: ended work
        self.runs: dict[int, _Run] = {}  # running job -> its run, for fair share
        self.result = SimResult(policy.name, cluster, list(self.records.values()))
        # the cluster as core's GpuPool, kept up to date with every start and end: each pass
        # works on a copy (Snapshot.pool), not on a pool built from 1,024 GpuViews
        self.pool = GpuPool([v for node in self.nodes for v in node.views()], self.policy)
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
        prio = self.sp.ordering(job, {}) if self.sp.ordering else job.priority
        pending = PendingJob(job.id, prio, seq, milli, job.gpu_mem, user=job.user,
                             project=job.project, submitted=job.submit,
                             expected=self._expected(job))
        if self.sp.ordering is None:
            self.base[job.id] = pending
        q = self.queue
        # still settled if the pass would decide as the last: a job at the tail that
        # fits nowhere changes nothing ahead of it and cannot start itself
        still = self.settled == (q.version, self.gpu_version) and (
            not q.jobs or queue_order(pending) > queue_order(q.jobs[-1])) \
            and not self._could_fit(milli)
        q.add(pending)
        if still:
            self.settled = (q.version, self.gpu_version)

    def _expected(self, job: SimJob) -> float | None:
        how = self.expected_from
        if how == "history":
            return expected_of(job.time_limit, self.history.predicted(job.name))
        if how == "limit":
            return job.time_limit
        return job.runs_for if how == "oracle" else None

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
        while q:
            # a pass that can start nothing is skipped, unless a job at the head of the
            # queue has not yet been offered a start estimate (the daemon's pass gives one)
            visible = self._visible()
            estimate = self._wants_estimates(visible)
            if self.settled == (q.version, self.gpu_version) and not estimate:
                break
            smallest = q.smallest() or 0
            if self.pool.max_free_share() < max(min(smallest, MILLI), 1) and not estimate:
                break  # no GPU has room for any waiting job
            # with no expected end known, running jobs change no shadow time nor estimate
            # (core counts unknown ends as never): not listed, 900 of them cost 85 us a pass
            running = [r for rs in self.running.values() for r in rs] \
                if self.known_ends and (self.sp.policy.backfill or estimate) else []
            plan = schedule(Snapshot((), visible, presorted=True, by_id=q.by_id,
                                     smallest_milli=smallest, running=running,
                                     pool=self.pool), self.policy_quiet, now)
            self.result.passes += 1
            if estimate:
                self._estimate(plan, visible, running, now)
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

    def _estimate(self, plan: Plan, visible: list[PendingJob], running: list[RunningJob],
                  now: float) -> None:
        """The plan's start estimates, by the pass's own code (core.backfill
        .start_estimates, as schedule() calls it), when a job in the window that was never
        offered one waits (a pass where they all start builds none: 1,024 GPUs cost)."""
        limit = self.policy.estimate_jobs
        window = visible[:limit]
        started = {s.job_id for s in plan.starts}
        offered = self.offered
        if all(j.id in offered or j.id in started for j in window):
            return
        offered.update(j.id for j in window)
        by_id = self.queue.by_id
        if not self.known_ends and all(by_id[st.job_id].expected is None
                                       for st in plan.starts):
            # no end is known: core would only say "now" for jobs that fit GPUs kept for
            # the reservation (where they may not go); skipped, as 1,024 GPUs cost 7 ms
            return
        occupants: list[Occupant] = [(r.expected_end, r.gpu_indices, r.milli, r.gpu_mem)
                                     for r in running]
        for st in plan.starts:
            exp = by_id[st.job_id].expected
            occupants.append((None if exp is None else now + exp, st.gpu_indices,
                              st.milli_per_gpu, st.gpu_mem))
        plan.start_estimates = start_estimates(self._views(), visible, plan, occupants,
                                               self.policy, now, limit)
        self.result.estimates_offered = True

    def _wants_estimates(self, visible: list[PendingJob]) -> bool:
        """Whether some job among the first estimate_jobs was never in a pass's estimates
        (one that got none then, its GPUs' ends unknown, is not asked again each batch)."""
        offered = self.offered
        return any(j.id not in offered for j in visible[:self.policy.estimate_jobs])

    def _views(self) -> list[GpuView]:
        """The cluster's GPUs as they stand, for start estimates (held nodes unusable).
        Built directly: dataclasses.replace over 1,024 GPUs took 12 ms a call."""
        pool = self.pool
        free_milli, free_mem, unusable = pool.free_milli, pool.free_mem, pool.unusable
        return [GpuView(i, g.memory_total, g.memory_external, g.utilization,
                        g.healthy and i not in unusable, g.paused, MILLI - free_milli[i],
                        g.memory_total - g.memory_external - free_mem[i], g.node)
                for i, g in pool.views.items()]

    def _visible(self) -> list[PendingJob]:
        """The queue core sees: while one wide job gathers nodes, the other wide ones wait."""
        if self.gathering is None or self.wide_waiting <= 1:
            return self.queue.jobs
        wide = self.width * MILLI
        return [j for j in self.queue.jobs
                if j.id == self.gathering or j.gpus_milli != wide
                or self.records[j.id].job.gpus_milli <= wide]

    def _note(self, plan: Plan) -> None:
        estimates = plan.start_estimates
        if estimates:
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
        exp = self.queue.by_id[job.id].expected
        end = None if exp is None else now + exp
        wide = job.gpus_milli > self.width * MILLI
        # a wide job's nodes are held, no end known, until it has them all and runs
        self.running.setdefault(job.id, []).append(RunningJob(
            job.id, 0, s.gpu_indices, s.milli_per_gpu, s.gpu_mem,
            expected_end=None if wide else end))
        self.known_ends += end is not None and not wide
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
            # it runs from now: all its nodes are expected to free with it
            self.running[job.id] = [replace(r, expected_end=end)
                                    for r in self.running[job.id]]
            self.known_ends += len(nodes) if end is not None else 0
            for k in nodes:
                self.nodes[k].holder = None
                for g in range(self.nodes[k].offset, self.nodes[k].offset + self.width):
                    self.pool.set_unusable(g, None)
        self.queue.remove(job.id)
        self.base.pop(job.id, None)
        rec.start = now
        self.runs[job.id] = _Run(job.user, job.project, job.gpus, now)
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
        for r in self.running.pop(job_id, ()):
            self.known_ends -= r.expected_end is not None
        assert rec.start is not None
        if rec.outcome == "completed":  # the store's completed_run_times counts these
            self.history.completed(job.name, now - rec.start)
        run = self.runs.pop(job_id)
        self.ended_usage.advance(now)
        self.ended_usage.add(run._replace(ended_at=now), now)

    # --- fair share -----------------------------------------------------------------------
    def _fair_order(self, now: float) -> None:
        """The queue in the daemon's fair-share order (rota.server.policy.fair_order): the shares
        given (1 each where none is), each job's own priority, age and size weighed as
        [priority] says; each job's queue priority becomes its place in that order."""
        ended = self.ended_usage
        ended.advance(now)
        standing = Standing.of(ended.with_running(self.runs.values(), now), self.shares.users,
                               self.shares.projects)
        base = self.base
        ordered = order_queue([base[j.id] for j in self.queue.jobs], standing, self.weights,
                              now, largest_milli=self.cluster.gpus * MILLI)
        if any(a.id != b.id for a, b in zip(ordered, self.queue.jobs, strict=True)):
            self.queue.reorder([j._replace(priority=n) for n, j in enumerate(ordered)])

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
