"""EASY backfill with reservations, and start estimates (rota.core.backfill).

Time is a number handed in (``NOW``): no clock is read.
"""

from __future__ import annotations

from builders import a_gpu, a_job, job_of, machine, placed

from rota.core.backfill import shadow_time
from rota.core.plan import Plan, ReasonCode
from rota.core.preempt import RunningJob
from rota.core.schedule import schedule
from rota.core.snapshot import GpuView, PendingJob, Policy, Snapshot

NOW = 10_000.0


def running(job_id: int, gpus: tuple[int, ...], ends_in: float | None,
            milli: int = 1000) -> RunningJob:
    return RunningJob(id=job_id, priority=0, gpu_indices=gpus, milli=milli, gpu_mem=None,
                      expected_end=None if ends_in is None else NOW + ends_in)


def plan_of(gs: list[GpuView], jobs: list, runs: list[RunningJob],
            policy: Policy | None = None) -> Plan:
    return schedule(Snapshot(gpus=gs, pending=[job_of(j) for j in jobs], running=runs),
                    policy or Policy(), NOW)


def two_busy_of_four() -> list[GpuView]:
    """GPUs 0 and 1 held by a running 2-GPU job; 2 and 3 free."""
    return machine(a_gpu(0).allocated(1.0), a_gpu(1).allocated(1.0), a_gpu(2), a_gpu(3))


def test_the_reservation_has_the_shadow_time_the_kept_gpus_free_at() -> None:
    plan = plan_of(two_busy_of_four(), [a_job(1).gpus(4)], [running(9, (0, 1), 3600)])
    [res] = plan.reservations
    assert res.job_id == 1 and set(res.gpu_indices) == {0, 1, 2, 3}
    assert res.shadow == NOW + 3600


def test_a_short_job_that_ends_before_the_shadow_time_backfills_onto_kept_gpus() -> None:
    plan = plan_of(two_busy_of_four(), [a_job(1).gpus(4), a_job(2).expected(600)],
                   [running(9, (0, 1), 3600)])
    assert list(placed(plan)) == [2]
    assert set(placed(plan)[2]) <= {2, 3}


def test_a_job_that_ends_exactly_at_the_shadow_time_backfills() -> None:
    plan = plan_of(two_busy_of_four(), [a_job(1).gpus(4), a_job(2).expected(3600)],
                   [running(9, (0, 1), 3600)])
    assert list(placed(plan)) == [2]


def test_a_job_that_would_end_after_the_shadow_time_does_not_backfill() -> None:
    plan = plan_of(two_busy_of_four(), [a_job(1).gpus(4), a_job(2).expected(3601)],
                   [running(9, (0, 1), 3600)])
    assert placed(plan) == {}
    r = plan.reason(2)
    assert r is not None and r.code in (ReasonCode.PRIORITY, ReasonCode.RESOURCES)
    assert "kept for job 1" in r.message


def test_a_job_with_no_expected_run_time_never_backfills_onto_kept_gpus() -> None:
    plan = plan_of(two_busy_of_four(), [a_job(1).gpus(4), a_job(2)],
                   [running(9, (0, 1), 3600)])
    assert placed(plan) == {}


def test_no_backfill_onto_kept_gpus_when_a_running_job_there_has_no_expected_end() -> None:
    plan = plan_of(two_busy_of_four(), [a_job(1).gpus(4), a_job(2).expected(1)],
                   [running(9, (0, 1), None)])
    assert plan.reservations[0].shadow is None
    assert placed(plan) == {}


def test_a_short_job_of_a_shape_that_already_failed_still_backfills() -> None:
    # job 2 (long) fails the shape first; job 3 (short, same shape) must still be tried
    plan = plan_of(two_busy_of_four(),
                   [a_job(1).gpus(4), a_job(2).expected(9000), a_job(3).expected(60),
                    a_job(4).expected(60), a_job(5).expected(60)],
                   [running(9, (0, 1), 3600)])
    assert sorted(placed(plan)) == [3, 4]  # two free GPUs, both kept for job 1


def test_jobs_on_gpus_the_reservation_does_not_need_start_as_before() -> None:
    # a 1-GPU blocked job keeps GPU 1 (the most free); GPU 2 is not needed and is free
    gs = machine(a_gpu(0).allocated(1.0), a_gpu(1).allocated(0.5), a_gpu(2).allocated(0.5))
    plan = plan_of(gs, [a_job(1).gpus(1), a_job(2).gpus(0.5)],
                   [running(8, (0,), 100), running(9, (1,), 200, 500),
                    running(7, (2,), 300, 500)])
    [res] = plan.reservations
    assert len(res.gpu_indices) == 1
    assert set(placed(plan)) == {2}  # no expected time, but it needs no kept GPU
    assert set(placed(plan)[2]).isdisjoint(res.gpu_indices)


def test_the_backfilled_job_does_not_delay_the_reserved_one() -> None:
    plan = plan_of(two_busy_of_four(), [a_job(1).gpus(4).expected(100),
                                        a_job(2).expected(600), a_job(3).expected(3000)],
                   [running(9, (0, 1), 3600)])
    assert sorted(placed(plan)) == [2, 3]
    # replaying the ends: job 1 still starts at the shadow time
    assert plan.start_estimates[1] == plan.reservations[0].shadow == NOW + 3600


def test_shadow_time_counts_shares_and_memory() -> None:
    job = PendingJob(1, 0, 1, 500, gpu_mem=30)
    free_milli, free_mem = {0: 0}, {0: 10}
    # two half-GPU jobs on GPU 0: the first to end frees the share but too little memory
    occ = [(NOW + 50, (0,), 500, 10), (NOW + 90, (0,), 500, 20)]
    assert shadow_time(job, [0], free_milli, free_mem, occ, NOW) == NOW + 90
    assert shadow_time(job, [0], {0: 500}, {0: 40}, [], NOW) == NOW
    assert shadow_time(job, [0], free_milli, free_mem, occ[:1], NOW) is None


def test_start_estimates_on_a_hand_checked_example() -> None:
    # three busy GPUs ending at +100, +300, +600; nothing starts now
    gs = machine(*(a_gpu(i).allocated(1.0) for i in range(3)))
    runs = [running(7, (0,), 100), running(8, (1,), 300), running(9, (2,), 600)]
    jobs = [a_job(1).gpus(2).expected(500),  # GPUs 0+1 at +300, until +800
            a_job(2).expected(100),  # GPU 2 at +600, until +700
            a_job(3).gpus(3),  # all three at +800; no expected run time: holds them
            a_job(4)]  # nothing ever frees again: unknown
    plan = plan_of(gs, jobs, runs)
    assert plan.starts == []
    assert plan.start_estimates == {1: NOW + 300, 2: NOW + 600, 3: NOW + 800}


def test_start_estimates_leave_out_gated_jobs_and_stop_at_the_limit() -> None:
    gs = machine(a_gpu(0).allocated(1.0))
    runs = [running(7, (0,), 100)]
    jobs = [a_job(1).after(99), a_job(2).expected(10), a_job(3).expected(10),
            a_job(4).expected(10)]
    plan = plan_of(gs, jobs, runs, Policy(estimate_jobs=2))
    assert plan.start_estimates == {2: NOW + 100, 3: NOW + 110}


def test_no_estimates_when_asked_for_none() -> None:
    gs = machine(a_gpu(0).allocated(1.0))
    plan = plan_of(gs, [a_job(1)], [running(7, (0,), 100)], Policy(estimate_jobs=0))
    assert plan.start_estimates == {}


def test_once_only_kept_gpus_have_room_the_short_jobs_behind_still_backfill() -> None:
    # the free GPUs are all kept for job 1: the pass stops walking the queue, yet the short
    # jobs far behind start there and the long ones wait in the lazy tail
    gs = machine(a_gpu(0).allocated(1.0), a_gpu(1).allocated(1.0), a_gpu(2), a_gpu(3))
    jobs = [a_job(1).gpus(4), *(a_job(i).expected(9000) for i in range(2, 50)),
            a_job(50).expected(60).after(99), a_job(51).expected(60), a_job(52).gpus(0.5),
            a_job(53).expected(60)]
    plan = plan_of(gs, jobs, [running(9, (0, 1), 3600)])
    assert sorted(placed(plan)) == [51, 53]
    assert plan.tail and 51 not in {j.id for j in plan.tail}
    r = plan.reason(30)
    assert r is not None and r.code is ReasonCode.RESOURCES and "job 1" in r.message
    assert plan.reason(50) is not None and plan.reason(50).code is ReasonCode.DEPENDENCY
