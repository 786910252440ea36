"""Choosing which running jobs to stop for a higher-priority one (pure)."""

from __future__ import annotations

from rota.core.plan import ReasonCode
from rota.core.preempt import RunningJob, victims_for
from rota.core.schedule import schedule
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy, Snapshot

GIB = 1 << 30
POLICY = Policy()


def gpus_with(running: list[RunningJob], n: int = 4) -> list[GpuView]:
    """n 80G GPUs carrying the given running jobs' allocations."""
    alloc = dict.fromkeys(range(n), 0)
    mem = dict.fromkeys(range(n), 0)
    for r in running:
        for i in r.gpu_indices:
            alloc[i] += r.milli
            mem[i] += r.gpu_mem or 0
    return [GpuView(index=i, memory_total=80 * GIB, allocated_milli=alloc[i],
                    reserved_memory=mem[i], utilization=0.9 if alloc[i] else 0.0)
            for i in range(n)]


def run(job_id: int, gpus: tuple[int, ...], *, milli: int = MILLI, priority: int = 5,
        preemptible: bool = True, lost: float = 100.0, stopping: bool = False) -> RunningJob:
    return RunningJob(id=job_id, priority=priority, gpu_indices=gpus, milli=milli,
                      gpu_mem=None, preemptible=preemptible, since_checkpoint_s=lost,
                      stopping=stopping)


def wants(gpus: float, priority: int = 0, allowed: frozenset[int] | None = None) -> PendingJob:
    return PendingJob(id=100, priority=priority, seq=100, gpus_milli=round(gpus * MILLI),
                      allowed=allowed)


def test_the_cheapest_victims_that_make_room() -> None:
    running = [run(1, (0,), lost=500), run(2, (1,), lost=10), run(3, (2,), lost=50),
               run(4, (3,), lost=20)]
    # two whole GPUs: the two that lose the least work since their last checkpoint
    assert victims_for(wants(2), gpus_with(running), running, POLICY) == (2, 4)
    # a share: one victim is enough, the cheapest
    assert victims_for(wants(0.5), gpus_with(running), running, POLICY) == (2,)


def test_fewer_gpus_cost_less_for_the_same_lost_time() -> None:
    big = run(1, (0, 1), lost=100)   # 2 GPUs x 100 s
    small = run(2, (2,), lost=150)   # 1 GPU x 150 s
    other = run(3, (3,), preemptible=False)
    running = [big, small, other]
    assert victims_for(wants(1), gpus_with(running), running, POLICY) == (2,)


def test_victims_that_turn_out_unneeded_are_given_back() -> None:
    # the greedy order takes the cheap half-GPU jobs first; the job needs a whole GPU, which
    # only the pair on GPU 0 (or job 3 alone) can give: the cheap one on GPU 1 is given back
    running = [run(1, (0,), milli=500, lost=1), run(2, (1,), milli=500, lost=2),
               run(5, (1,), milli=500, preemptible=False), run(3, (2,), lost=5),
               run(4, (0,), milli=500, lost=3), run(6, (3,), preemptible=False)]
    got = victims_for(wants(1), gpus_with(running), running, POLICY)
    assert got == (1, 4)


def test_only_lower_priority_preemptible_jobs_on_allowed_gpus() -> None:
    running = [run(1, (0,), priority=0), run(2, (1,), preemptible=False),
               run(3, (2,), priority=9), run(4, (3,), priority=-1)]
    assert victims_for(wants(1, priority=0), gpus_with(running), running, POLICY) == (3,)
    # job 3 is on GPU 2, which the job may not use: nobody else qualifies
    assert victims_for(wants(1, allowed=frozenset({0, 1})), gpus_with(running), running,
                       POLICY) is None


def test_never_for_a_job_that_still_would_not_fit() -> None:
    running = [run(1, (0,)), run(2, (1,)), run(3, (2,), preemptible=False),
               run(4, (3,), preemptible=False)]
    assert victims_for(wants(3), gpus_with(running), running, POLICY) is None
    assert victims_for(wants(0), gpus_with(running), running, POLICY) is None


def test_jobs_already_stopping_count_as_freed() -> None:
    running = [run(1, (0,), stopping=True), run(2, (1,)), run(3, (2,)), run(4, (3,))]
    assert victims_for(wants(1), gpus_with(running), running, POLICY) == ()
    assert victims_for(wants(2), gpus_with(running), running, POLICY) in ((2,), (3,), (4,))


def test_the_pass_preempts_for_the_first_blocked_job_only() -> None:
    running = [run(1, (0, 1)), run(2, (2, 3), lost=5)]
    snap = Snapshot(gpus=gpus_with(running), running=running, pending=[
        PendingJob(id=10, priority=0, seq=10, gpus_milli=2 * MILLI),
        PendingJob(id=11, priority=0, seq=11, gpus_milli=2 * MILLI)])
    plan = schedule(snap, POLICY, now=0.0)
    assert [(p.victim, p.for_job) for p in plan.preemptions] == [(2, 10)]
    assert "preempting job 2" in plan.reasons[10].message
    assert plan.reasons[10].code is ReasonCode.RESOURCES and plan.reason(11) is not None
    # once it is stopping, the next pass picks no one new for job 10
    running2 = [run(1, (0, 1)), run(2, (2, 3), stopping=True)]
    again = schedule(Snapshot(gpus=gpus_with(running2), running=running2,
                              pending=snap.pending), POLICY, now=1.0)
    assert again.preemptions == []
    # off by policy, or no preemptible job: nothing
    assert schedule(snap, Policy(preemption=False), now=0.0).preemptions == []
    fixed = [run(1, (0, 1), preemptible=False), run(2, (2, 3), preemptible=False)]
    assert schedule(Snapshot(gpus=gpus_with(fixed), running=fixed, pending=snap.pending),
                    POLICY, now=0.0).preemptions == []
