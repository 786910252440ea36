"""Property tests: what every plan keeps, whatever the GPUs and the queue look like.

Invariant 1 of DESIGN.md (no over-commit) and the scheduler's promises: gangs are
all-or-nothing, nothing lands on a GPU it may not use, every job either starts or has a
reason, an identical job never overtakes one ahead of it, and the same input gives the
same plan. A replay of random events through a small model checks invariant 1 over time.
"""

from __future__ import annotations

import dataclasses

from builders import GATES, GIB, apply, normalised
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from rota.core.lifecycle import JobState, check_transition
from rota.core.plan import Plan, ReasonCode, Start
from rota.core.schedule import schedule
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy, Snapshot

NOW = 100.0
MAX_INDEX = 17  # allowed sets may name GPUs that do not exist
MEMORIES = [16 * GIB, 24 * GIB, 40 * GIB, 80 * GIB]
DEP_IDS = range(1, 6)  # jobs outside the queue that pending jobs may depend on

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- strategies -------------------------------------------------------------------------------


def _gpu(index: int, total: int, allocated: int, reserved_gib: int, external_gib: int,
         utilization: float, unhealthy: int, paused: int) -> GpuView:
    return GpuView(index=index, memory_total=total,
                   memory_external=min(external_gib * GIB, total),
                   utilization=utilization, healthy=unhealthy != 0, paused=paused == 0,
                   allocated_milli=allocated,
                   reserved_memory=min(reserved_gib * GIB, total) if allocated else 0)


_gpu_facts = st.tuples(
    st.sampled_from(MEMORIES),
    st.sampled_from([0, 0, 0, 250, 500, 750, 1000]) | st.integers(0, MILLI),  # allocated
    st.integers(0, 80),  # GiB Rota's jobs asked for
    st.just(0) | st.integers(0, 80),  # GiB held by outside processes
    st.sampled_from([0.0, 0.3, 0.9, 1.0]),
    st.integers(0, 4),  # 0: unhealthy
    st.integers(0, 5),  # 0: paused
)
gpu_sets = st.lists(_gpu_facts, min_size=1, max_size=16).map(
    lambda facts: [_gpu(i, *f) for i, f in enumerate(facts)])

shares = st.one_of(
    st.just(0),  # CPU only
    st.integers(100, MILLI),  # a share of one GPU, in thousandths
    st.sampled_from([250, 500, 500, 1000]),  # the common shares, so jobs collide
    st.integers(1, 8).map(lambda k: k * MILLI),  # whole GPUs
)

_job_facts = st.tuples(
    st.integers(0, 10_000),  # seq
    st.integers(0, 3),  # priority
    shares,
    st.none() | st.integers(0, 90).map(lambda g: g * GIB),
    st.none() | st.frozensets(st.integers(0, MAX_INDEX), min_size=1, max_size=6),
    st.just(()) | st.lists(st.sampled_from(DEP_IDS), max_size=2).map(tuple),
    st.none() | st.sampled_from([50.0, NOW, 150.0]),
)
pending_jobs = st.lists(_job_facts, max_size=30, unique_by=lambda f: f[0]).map(
    lambda facts: [PendingJob(100 + k, priority, seq, milli, mem, allowed, after, not_before)
                   for k, (seq, priority, milli, mem, allowed, after, not_before)
                   in enumerate(facts)])


dependency_states = st.dictionaries(st.sampled_from(DEP_IDS), st.sampled_from(list(JobState)))
policies = st.builds(Policy, mem_threshold=st.sampled_from([0.5, 0.8, 1.0]),
                     util_threshold=st.sampled_from([0.5, 0.8, 1.0]),
                     backfill=st.booleans(), reserve_for_blocked=st.booleans(),
                     draining=st.integers(0, 9).map(lambda n: n == 0))


cases = st.tuples(
    st.builds(Snapshot, gpus=gpu_sets, pending=pending_jobs, dependency_states=dependency_states),
    policies,
)


def usable_gpus(snap: Snapshot, policy: Policy) -> set[int]:
    """GPUs new work may go to: healthy, not paused, not crowded by outside processes."""
    return {g.index for g in snap.gpus if g.healthy and not g.paused
            and g.memory_external / g.memory_total <= policy.mem_threshold
            and not (g.allocated_milli == 0 and g.utilization > policy.util_threshold)}


def queue_of(snap: Snapshot) -> list[PendingJob]:
    return sorted(snap.pending, key=lambda j: (j.priority, j.seq))


# -- single passes ----------------------------------------------------------------------------


@PROPS
@given(cases)
def test_no_gpu_is_over_committed(case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    plan = schedule(snap, policy, NOW)
    before = {g.index: g for g in snap.gpus}
    asked_memory = {i for s in plan.starts if s.gpu_mem is not None for i in s.gpu_indices}
    for g in apply(snap.gpus, plan):
        if g.allocated_milli != before[g.index].allocated_milli:
            assert g.allocated_milli <= MILLI, g
        if g.index in asked_memory:
            assert g.reserved_memory + g.memory_external <= g.memory_total, g


@PROPS
@given(cases)
def test_gangs_are_all_or_nothing_and_shares_take_one_gpu(case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    plan = schedule(snap, policy, NOW)
    jobs = {j.id: j for j in snap.pending}
    for s in plan.starts:
        job = jobs[s.job_id]
        assert s.gpu_mem == (job.gpu_mem if job.gpus_milli else None)
        if job.gpus_milli == 0:
            assert s.gpu_indices == () and s.milli_per_gpu == 0
        elif job.gpus_milli < MILLI:
            assert len(s.gpu_indices) == 1 and s.milli_per_gpu == job.gpus_milli
        else:
            k = job.gpus_milli // MILLI
            assert len(s.gpu_indices) == len(set(s.gpu_indices)) == k
            assert s.milli_per_gpu == MILLI


@PROPS
@given(cases)
def test_nothing_starts_on_a_gpu_it_may_not_use(case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    plan = schedule(snap, policy, NOW)
    usable = usable_gpus(snap, policy)
    jobs = {j.id: j for j in snap.pending}
    for s in plan.starts:
        assert set(s.gpu_indices) <= usable, s
        allowed = jobs[s.job_id].allowed
        if allowed is not None:
            assert set(s.gpu_indices) <= allowed, s


@PROPS
@given(cases)
def test_every_job_starts_or_has_a_reason_never_both(case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    plan = schedule(snap, policy, NOW)
    ids = {j.id for j in snap.pending}
    starts = [s.job_id for s in plan.starts]
    assert len(starts) == len(set(starts)) and set(starts) <= ids
    for job_id in ids:
        assert (job_id in starts) != (plan.reason(job_id) is not None), job_id
    waiting = [job_id for job_id, _ in plan.waiting()]
    assert len(waiting) == len(set(waiting))
    assert set(waiting) == ids - set(starts)
    for job_id in waiting:
        assert plan.reason_text(job_id)


@PROPS
@given(cases)
def test_a_job_waits_only_for_a_reason_that_holds(case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    plan = schedule(snap, policy, NOW)
    for job in snap.pending:
        r = plan.reason(job.id)
        if r is None:  # started: its gates are open
            assert all(snap.dependency_states.get(d) is JobState.COMPLETED for d in job.after)
            assert job.not_before is None or job.not_before <= NOW
        elif r.code is ReasonCode.BACKOFF:
            assert job.not_before is not None and r.until == job.not_before > NOW
        elif r.code in (ReasonCode.DEPENDENCY, ReasonCode.DEPENDENCY_FAILED):
            assert r.blocker in job.after
            assert snap.dependency_states.get(r.blocker) is not JobState.COMPLETED


@PROPS
@given(cases)
def test_an_identical_job_never_overtakes_one_ahead_of_it(case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    plan = schedule(snap, policy, NOW)
    started = {s.job_id for s in plan.starts}
    queue = queue_of(snap)
    for n, job in enumerate(queue):
        if job.id not in started or job.allowed is not None:
            continue
        for ahead in queue[:n]:
            if ahead.shape != job.shape:
                continue
            r = plan.reason(ahead.id)
            assert r is None or r.code in GATES, (ahead, r, job)


@PROPS
@given(cases)
def test_backfill_never_takes_gpus_kept_for_the_blocked_job(
        case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    plan = schedule(snap, policy, NOW)
    assert len(plan.reservations) <= 1
    if not plan.reservations:
        return
    kept = plan.reservations[0]
    assert plan.reason(kept.job_id) is not None
    assert plan.reason(kept.job_id).code is ReasonCode.RESOURCES  # type: ignore[union-attr]
    queue = [j.id for j in queue_of(snap)]
    behind = set(queue[queue.index(kept.job_id) + 1:])
    for s in plan.starts:
        if s.job_id in behind:
            assert set(s.gpu_indices).isdisjoint(kept.gpu_indices), (s, kept)


def idle(gpus: list[GpuView]) -> list[GpuView]:
    return [GpuView(index=g.index, memory_total=g.memory_total) for g in gpus]


@PROPS
@given(cases)
def test_unsatisfiable_means_it_would_not_start_even_on_an_idle_machine(
        case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    policy = dataclasses.replace(policy, draining=False)
    plan = schedule(snap, policy, NOW)
    for job in snap.pending:
        r = plan.reason(job.id)
        if r is None or r.code in GATES:
            continue
        alone = job._replace(after=(), not_before=None)
        on_idle = schedule(Snapshot(gpus=idle(list(snap.gpus)), pending=[alone]), policy, NOW)
        fits = bool(on_idle.starts)
        assert fits == (r.code is not ReasonCode.UNSATISFIABLE), (job, r)


@PROPS
@given(cases, st.randoms(use_true_random=False))
def test_the_plan_depends_on_the_input_not_its_order(case: tuple[Snapshot, Policy],
                                                    rng: object) -> None:
    snap, policy = case
    plan = normalised(schedule(snap, policy, NOW))
    assert normalised(schedule(snap, policy, NOW)) == plan
    pending, gpus = list(snap.pending), list(snap.gpus)
    rng.shuffle(pending)  # type: ignore[attr-defined]
    rng.shuffle(gpus)  # type: ignore[attr-defined]
    shuffled = dataclasses.replace(snap, pending=pending, gpus=gpus)
    assert normalised(schedule(shuffled, policy, NOW)) == plan
    presorted = dataclasses.replace(snap, pending=queue_of(snap), presorted=True)
    assert normalised(schedule(presorted, policy, NOW)) == plan


# -- a replay of random events ----------------------------------------------------------------


@dataclasses.dataclass
class Gpu:
    """The model's GPU: fixed facts; Rota's allocations are derived from running jobs."""

    index: int
    memory_total: int
    memory_external: int
    utilization: float
    healthy: bool = True
    paused: bool = False


_submission = st.tuples(
    st.sampled_from([0, 250, 500, 500, 1000, 1000, 2000, 4000]) | shares,  # gpus_milli
    st.none() | st.integers(1, 30).map(lambda g: g * GIB),  # gpu_mem
    st.integers(0, 2),  # priority
    st.none() | st.none() | st.frozensets(st.integers(0, 9), min_size=1),  # allowed
    st.integers(0, 3).map(lambda n: n == 0),  # depends on the job submitted before it
)


class Replay(RuleBasedStateMachine):
    """A tiny daemon: a queue, running jobs, GPUs that pause and fail, plans applied."""

    def __init__(self) -> None:
        super().__init__()
        self.gpus: dict[int, Gpu] = {}
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, Start] = {}
        self.states: dict[int, JobState] = {}
        self.policy = Policy()
        self.now = 0.0
        self.last: Plan | None = None

    def _move(self, job_id: int, dst: JobState) -> None:
        check_transition(job_id, self.states[job_id], dst)
        self.states[job_id] = dst

    def views(self) -> list[GpuView]:
        out = []
        for g in self.gpus.values():
            on = [s for s in self.running.values() if g.index in s.gpu_indices]
            out.append(GpuView(index=g.index, memory_total=g.memory_total,
                               memory_external=g.memory_external, utilization=g.utilization,
                               healthy=g.healthy, paused=g.paused,
                               allocated_milli=sum(s.milli_per_gpu for s in on),
                               reserved_memory=sum(s.gpu_mem or 0 for s in on)))
        return out

    @initialize(n=st.integers(1, 8), memory=st.sampled_from(MEMORIES),
                external=st.lists(st.integers(0, 12), min_size=8, max_size=8),
                policy=policies.filter(lambda p: not p.draining))
    def machine(self, n: int, memory: int, external: list[int], policy: Policy) -> None:
        self.policy = policy
        for i in range(n):
            self.gpus[i] = Gpu(i, memory, external[i] * GIB, utilization=0.2)

    @rule(batch=st.lists(_submission, min_size=1, max_size=4))
    def submit(self, batch: list[tuple[int, int | None, int, frozenset[int] | None, bool]]
               ) -> None:
        for milli, gpu_mem, priority, allowed, depend in batch:
            job_id = len(self.states) + 1
            after = (job_id - 1,) if depend and job_id > 1 else ()
            self.pending[job_id] = PendingJob(job_id, priority, job_id, milli, gpu_mem, allowed,
                                              after)
            self.states[job_id] = JobState.PENDING

    @rule()
    def schedule_and_apply(self) -> None:
        self.now += 1.0
        snap = Snapshot(gpus=self.views(), pending=list(self.pending.values()),
                        dependency_states=dict(self.states))
        plan = schedule(snap, self.policy, self.now)
        for s in plan.starts:
            job = self.pending.pop(s.job_id)
            self._move(job.id, JobState.STARTING)
            self._move(job.id, JobState.RUNNING)
            self.running[job.id] = s
        self.last = plan
        for job_id in self.pending:
            assert plan.reason(job_id) is not None

    @precondition(lambda self: bool(self.running))
    @rule(pick=st.integers(0, 1_000), ok=st.booleans())
    def finish(self, pick: int, ok: bool) -> None:
        job_id = sorted(self.running)[pick % len(self.running)]
        del self.running[job_id]
        self._move(job_id, JobState.COMPLETED if ok else JobState.FAILED)

    @rule(pick=st.integers(0, 15), paused=st.booleans())
    def pause(self, pick: int, paused: bool) -> None:
        self.gpus[pick % len(self.gpus)].paused = paused

    @rule(pick=st.integers(0, 15))
    def gpu_fails(self, pick: int) -> None:
        """A lost GPU: its jobs go back to the queue with a short backoff."""
        g = self.gpus[pick % len(self.gpus)]
        g.healthy = False
        for job_id, s in list(self.running.items()):
            if g.index in s.gpu_indices:
                del self.running[job_id]
                self._move(job_id, JobState.PENDING)
                old = self.submitted_as(job_id, s)
                self.pending[job_id] = old._replace(not_before=self.now + 2.0)

    @rule(pick=st.integers(0, 15))
    def gpu_recovers(self, pick: int) -> None:
        self.gpus[pick % len(self.gpus)].healthy = True

    def submitted_as(self, job_id: int, s: Start) -> PendingJob:
        milli = s.milli_per_gpu * max(1, len(s.gpu_indices))
        return PendingJob(job_id, 0, job_id, milli, s.gpu_mem)

    @invariant()
    def no_gpu_is_over_committed(self) -> None:
        for g in self.views():
            assert g.allocated_milli <= MILLI, g
            if any(s.gpu_mem is not None and g.index in s.gpu_indices
                   for s in self.running.values()):
                assert g.reserved_memory + g.memory_external <= g.memory_total, g

    @invariant()
    def nothing_runs_on_a_lost_gpu(self) -> None:
        lost = {i for i, g in self.gpus.items() if not g.healthy}
        for s in self.running.values():
            assert lost.isdisjoint(s.gpu_indices), s

    @invariant()
    def states_match_the_model(self) -> None:
        for job_id in self.pending:
            assert self.states[job_id] is JobState.PENDING
        for job_id in self.running:
            assert self.states[job_id] is JobState.RUNNING


Replay.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])
TestReplay = Replay.TestCase


@PROPS
@given(cases)
def test_draining_starts_nothing_and_gives_every_job_the_reason(
        case: tuple[Snapshot, Policy]) -> None:
    snap, policy = case
    assume(snap.pending)
    plan = schedule(snap, dataclasses.replace(policy, draining=True), NOW)
    assert plan.starts == []
    assert {r.code for _, r in plan.waiting()} == {ReasonCode.DRAINING}
