"""schedule(snapshot, policy, now): what one pass starts, keeps, and says to every waiting job."""

from __future__ import annotations

import dataclasses
import random

import pytest
from builders import (
    GIB,
    a_gpu,
    a_job,
    apply,
    code,
    codes,
    gpus,
    machine,
    many_jobs,
    normalised,
    placed,
    plan_for,
    snapshot_of,
    started,
)

from rota.core.lifecycle import JobState
from rota.core.plan import ReasonCode
from rota.core.schedule import schedule
from rota.core.snapshot import Policy

R = ReasonCode

# -- order ----------------------------------------------------------------------------------


def test_lower_priority_number_starts_first() -> None:
    plan = plan_for(gpus(1), [a_job(1).priority(5), a_job(2).priority(1)])
    assert list(placed(plan)) == [2]
    assert code(plan, 1) is R.RESOURCES


def test_equal_priorities_start_in_submission_order() -> None:
    plan = plan_for(gpus(2), [a_job(3).seq(30), a_job(1).seq(10), a_job(2).seq(20)])
    assert placed(plan) == {1: (0,), 2: (1,)}
    assert code(plan, 3) is R.RESOURCES


def test_submission_order_counts_only_among_equal_priorities() -> None:
    plan = plan_for(gpus(1), [a_job(1).seq(1).priority(2), a_job(2).seq(2).priority(0)])
    assert list(placed(plan)) == [2]


def test_the_same_input_gives_the_same_plan() -> None:
    def jobs() -> list:
        return [a_job(i).gpus([0.25, 0.5, 1, 2][i % 4]).priority(i % 3) for i in range(40)]

    first = plan_for(gpus(4), jobs())
    assert normalised(first) == normalised(plan_for(gpus(4), jobs()))


@pytest.mark.parametrize("seed", range(5))
def test_shuffling_the_queue_does_not_change_the_plan(seed: int) -> None:
    jobs = [a_job(i).gpus([0.25, 0.5, 1, 2][i % 4]).priority(i % 3).build() for i in range(40)]
    shuffled = list(jobs)
    random.Random(seed).shuffle(shuffled)
    assert normalised(plan_for(gpus(4), shuffled)) == normalised(plan_for(gpus(4), jobs))


def test_presorted_input_gives_the_same_plan_as_unsorted_input() -> None:
    jobs = [a_job(i).gpus([0.5, 1, 3][i % 3]).priority(-(i % 4)).build() for i in range(30)]
    shuffled = list(jobs)
    random.Random(7).shuffle(shuffled)
    in_order = sorted(jobs, key=lambda j: (j.priority, j.seq))
    assert normalised(plan_for(gpus(4), in_order, presorted=True)) == \
        normalised(plan_for(gpus(4), shuffled))


# -- packing --------------------------------------------------------------------------------


def test_two_half_gpu_jobs_share_one_gpu() -> None:
    plan = plan_for(gpus(2), [a_job(1).gpus(0.5), a_job(2).gpus(0.5)])
    assert placed(plan) == {1: (0,), 2: (0,)}
    assert {s.milli_per_gpu for s in plan.starts} == {500}
    assert apply(gpus(2), plan)[0].allocated_milli == 1000


def test_a_share_goes_to_the_gpu_it_fits_best_not_to_a_free_one() -> None:
    gs = machine(a_gpu(0), a_gpu(1).allocated(0.5), a_gpu(2).allocated(0.75))
    plan = plan_for(gs, [a_job(1).gpus(0.25)])
    assert placed(plan) == {1: (2,)}


def test_a_share_that_fits_no_partly_used_gpu_takes_a_free_one() -> None:
    gs = machine(a_gpu(0), a_gpu(1).allocated(0.75))
    plan = plan_for(gs, [a_job(1).gpus(0.5)])
    assert placed(plan) == {1: (0,)}


def test_a_multi_gpu_job_gets_whole_gpus_only() -> None:
    gs = machine(a_gpu(0).allocated(0.5), a_gpu(1), a_gpu(2).allocated(0.25), a_gpu(3))
    plan = plan_for(gs, [a_job(1).gpus(2)])
    assert placed(plan) == {1: (1, 3)}
    assert started(plan)[1].milli_per_gpu == 1000


def test_a_multi_gpu_job_does_not_start_on_partly_used_gpus() -> None:
    gs = machine(a_gpu(0).allocated(0.5), a_gpu(1), a_gpu(2).allocated(0.25))
    plan = plan_for(gs, [a_job(1).gpus(2)])
    assert plan.starts == []
    assert code(plan, 1) is R.RESOURCES
    text = plan.reason_text(1)
    assert "2 whole GPUs" in text and "1 free" in text


def test_allowed_gpus_are_respected() -> None:
    plan = plan_for(gpus(4), [a_job(1).allowed("2-3"), a_job(2).gpus(2).allowed([1, 2, 3]),
                              a_job(3).allowed([1, 2, 3])])
    assert placed(plan) == {1: (2,), 2: (1, 3)}
    assert code(plan, 3) is R.RESOURCES  # GPU 0 is free, but it may not use it


def test_an_allowed_share_fits_best_among_its_allowed_gpus() -> None:
    gs = machine(a_gpu(0).allocated(0.75), a_gpu(1), a_gpu(2).allocated(0.5))
    plan = plan_for(gs, [a_job(1).gpus(0.25).allowed("1-2")])
    assert placed(plan) == {1: (2,)}


def test_a_job_allowed_every_gpu_is_placed_like_an_unrestricted_one() -> None:
    gs = machine(a_gpu(0), a_gpu(1).allocated(0.5))
    plan = plan_for(gs, [a_job(1).gpus(0.5).allowed("0-5")])
    assert placed(plan) == {1: (1,)}


def test_cpu_only_jobs_start_without_gpus() -> None:
    gs = machine(a_gpu(0).allocated(1.0))
    plan = plan_for(gs, [a_job(1), a_job(2).cpu_only()])
    assert placed(plan) == {2: ()}
    assert started(plan)[2].milli_per_gpu == 0


def test_cpu_only_jobs_start_on_a_machine_without_gpus() -> None:
    plan = plan_for([], [a_job(1).cpu_only(), a_job(2).cpu_only()])
    assert placed(plan) == {1: (), 2: ()}


# -- memory -----------------------------------------------------------------------------------


def test_gpu_mem_must_fit_in_free_memory() -> None:
    gs = machine(a_gpu(0, "24G"), a_gpu(1, "48G"))
    plan = plan_for(gs, [a_job(1).gpus(0.5).mem("30G")])
    assert placed(plan) == {1: (1,)}


def test_memory_used_by_outside_processes_is_not_free() -> None:
    gs = machine(a_gpu(0, "48G").external_mem("20G"), a_gpu(1, "48G").allocated(0.5))
    plan = plan_for(gs, [a_job(1).gpus(0.25).mem("30G")])
    # GPU 1 is the best fit by share, and GPU 0 has only 28G free
    assert placed(plan) == {1: (1,)}


def test_memory_reserved_by_rota_allocations_is_not_free() -> None:
    gs = machine(a_gpu(0, "48G").allocated(0.5).reserved_mem("30G"), a_gpu(1, "48G"))
    plan = plan_for(gs, [a_job(1).gpus(0.5).mem("20G")])
    assert placed(plan) == {1: (1,)}


def test_memory_taken_earlier_in_the_same_pass_is_not_free() -> None:
    plan = plan_for(gpus(2, "40G"), [a_job(1).gpus(0.25).mem("30G"),
                                     a_job(2).gpus(0.25).mem("30G")])
    assert placed(plan) == {1: (0,), 2: (1,)}


def test_a_share_waits_when_no_gpu_has_the_memory_and_says_how_much_there_is() -> None:
    gs = machine(a_gpu(0, "40G").external_mem("25G"), a_gpu(1, "40G").reserved_mem("30G")
                 .allocated(0.25))
    plan = plan_for(gs, [a_job(1).gpus(0.5).mem("20G")])
    assert code(plan, 1) is R.RESOURCES
    text = plan.reason_text(1)
    assert "20G" in text and "15G" in text


def test_a_whole_gpu_job_needs_the_memory_on_every_gpu() -> None:
    gs = machine(a_gpu(0, "40G"), a_gpu(1, "40G").external_mem("20G"), a_gpu(2, "40G"))
    plan = plan_for(gs, [a_job(1).gpus(2).mem("30G")])
    assert placed(plan) == {1: (0, 2)}


# -- thresholds, paused, unhealthy ------------------------------------------------------------


def test_a_gpu_mostly_used_by_outside_processes_gets_nothing_new() -> None:
    gs = machine(a_gpu(0, "80G").external_mem("70G"))
    plan = plan_for(gs, [a_job(1).gpus(0.1).mem("1G")], policy=Policy(mem_threshold=0.8))
    assert plan.starts == []
    assert code(plan, 1) is R.RESOURCES
    assert "GPU 0" in plan.reason_text(1)


def test_external_memory_at_the_threshold_still_takes_work() -> None:
    gs = machine(a_gpu(0, "80G").external_mem("40G"))
    assert placed(plan_for(gs, [a_job(1).gpus(0.1)], policy=Policy(mem_threshold=0.5))) == \
        {1: (0,)}


def test_a_busy_gpu_rota_has_nothing_on_gets_nothing_new() -> None:
    gs = machine(a_gpu(0).util(0.95), a_gpu(1).util(0.5))
    plan = plan_for(gs, [a_job(1), a_job(2)], policy=Policy(util_threshold=0.8))
    assert placed(plan) == {1: (1,)}
    assert code(plan, 2) is R.RESOURCES


def test_a_busy_gpu_where_rota_already_has_a_share_takes_another_share() -> None:
    gs = machine(a_gpu(0).allocated(0.5).util(0.95))
    plan = plan_for(gs, [a_job(1).gpus(0.5)], policy=Policy(util_threshold=0.8))
    assert placed(plan) == {1: (0,)}


def test_paused_and_unhealthy_gpus_get_nothing() -> None:
    gs = machine(a_gpu(0).paused(), a_gpu(1).unhealthy(), a_gpu(2))
    plan = plan_for(gs, [a_job(1), a_job(2).gpus(0.5), a_job(3).cpu_only()])
    assert placed(plan) == {1: (2,), 3: ()}
    assert code(plan, 2) is R.RESOURCES
    text = plan.reason_text(2)
    assert "paused" in text and "unhealthy" in text


def test_a_job_allowed_only_a_paused_gpu_waits() -> None:
    gs = machine(a_gpu(0).paused(), a_gpu(1))
    plan = plan_for(gs, [a_job(1).allowed([0])])
    assert plan.starts == []
    assert code(plan, 1) is R.RESOURCES


# -- gates: dependencies, backoff, draining ---------------------------------------------------


def test_a_job_waits_for_the_job_it_depends_on() -> None:
    plan = plan_for(gpus(1), [a_job(2).after(1)], deps={1: JobState.RUNNING})
    r = plan.reason(2)
    assert r is not None and r.code is R.DEPENDENCY and r.blocker == 1
    assert "job 1" in r.message and "running" in r.message


def test_a_dependency_nobody_knows_of_also_blocks() -> None:
    plan = plan_for(gpus(1), [a_job(2).after(1)])
    assert code(plan, 2) is R.DEPENDENCY


def test_a_job_starts_once_its_dependencies_completed() -> None:
    deps = {1: JobState.COMPLETED, 3: JobState.COMPLETED}
    assert placed(plan_for(gpus(1), [a_job(2).after(1, 3)], deps=deps)) == {2: (0,)}


def test_every_dependency_must_complete() -> None:
    deps = {1: JobState.COMPLETED, 3: JobState.PENDING}
    plan = plan_for(gpus(1), [a_job(2).after(1, 3)], deps=deps)
    r = plan.reason(2)
    assert r is not None and r.code is R.DEPENDENCY and r.blocker == 3


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT])
def test_a_failed_dependency_means_the_job_can_never_start(state: JobState) -> None:
    plan = plan_for(gpus(1), [a_job(2).after(1)], deps={1: state})
    r = plan.reason(2)
    assert r is not None and r.code is R.DEPENDENCY_FAILED and r.blocker == 1
    assert state.value in r.message


def test_a_waiting_dependent_does_not_hold_up_the_queue() -> None:
    plan = plan_for(gpus(1), [a_job(2).after(1), a_job(3)], deps={1: JobState.RUNNING})
    assert placed(plan) == {3: (0,)}


def test_a_job_in_backoff_waits_until_its_time() -> None:
    plan = plan_for(gpus(1), [a_job(1).not_before(160.0), a_job(2)], now=100.0)
    r = plan.reason(1)
    assert r is not None and r.code is R.BACKOFF and r.until == 160.0
    assert "60s" in r.message
    # not "retry backoff": a lost launch or a dependency that moved waits the same way,
    # with no retry charged
    assert r.message == "waits before it is tried again: may start in 60s"
    assert placed(plan) == {2: (0,)}


@pytest.mark.parametrize("not_before", [40.0, 100.0])
def test_a_job_whose_backoff_is_over_starts(not_before: float) -> None:
    assert placed(plan_for(gpus(1), [a_job(1).not_before(not_before)], now=100.0)) == {1: (0,)}


def test_a_draining_machine_starts_nothing() -> None:
    plan = plan_for(gpus(2), [a_job(1), a_job(2).cpu_only()], policy=Policy(draining=True))
    assert plan.starts == []
    assert codes(plan) == {1: R.DRAINING, 2: R.DRAINING}
    assert "draining" in plan.reason_text(1)


# -- the reservation and backfill -------------------------------------------------------------


def busy_four() -> list:
    """Four GPUs, one of them busy with a running whole-GPU job."""
    return machine(a_gpu(0).allocated(1.0), a_gpu(1), a_gpu(2), a_gpu(3))


def test_a_blocked_big_job_keeps_gpus_from_smaller_jobs_behind_it() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(4), *many_jobs(range(2, 6))])
    assert plan.starts == []
    assert [r.job_id for r in plan.reservations] == [1]
    assert set(plan.reservations[0].gpu_indices) == {0, 1, 2, 3}
    assert code(plan, 1) is R.RESOURCES
    for j in range(2, 6):
        r = plan.reason(j)
        assert r is not None
        assert (r.code is R.PRIORITY and r.blocker == 1) or \
            (r.code is R.RESOURCES and "job 1" in r.message)


def test_the_big_job_says_how_many_gpus_it_waits_for_and_how_many_are_free() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(4)])
    text = plan.reason_text(1)
    assert "4 whole GPUs" in text and "3 free" in text


def test_the_first_job_kept_out_by_the_reservation_names_it() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(4), a_job(2)])
    r = plan.reason(2)
    assert r is not None and r.code in (R.PRIORITY, R.RESOURCES)
    assert "job 1" in plan.reason_text(2)


def test_jobs_that_need_no_reserved_gpu_still_start_behind_a_blocked_job() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(4), a_job(2), a_job(3).cpu_only()])
    assert placed(plan) == {3: ()}


def test_backfill_uses_gpus_the_blocked_job_does_not_keep() -> None:
    # 3 whole GPUs free, a 4-GPU job keeps them and the most free of the others
    gs = machine(a_gpu(0), a_gpu(1), a_gpu(2), *(a_gpu(i).allocated(0.5) for i in range(3, 8)))
    plan = plan_for(gs, [a_job(1).gpus(4), a_job(2), a_job(3).gpus(0.5), a_job(4).gpus(0.5)])
    kept = set(plan.reservations[0].gpu_indices)
    assert len(kept) == 4 and {0, 1, 2} <= kept
    assert code(plan, 2) is R.PRIORITY
    assert set(placed(plan)) == {3, 4}
    for indices in placed(plan).values():
        assert kept.isdisjoint(indices)


def test_without_reserve_for_blocked_smaller_jobs_take_the_free_gpus() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(4), *many_jobs(range(2, 5))],
                    policy=Policy(reserve_for_blocked=False))
    assert plan.reservations == []
    assert set(placed(plan)) == {2, 3, 4}


def test_without_backfill_everything_behind_the_first_blocked_job_waits() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(4), a_job(2), a_job(3).gpus(0.5),
                                  a_job(4).cpu_only()], policy=Policy(backfill=False))
    assert plan.starts == []
    for j in (2, 3, 4):
        r = plan.reason(j)
        assert r is not None and r.code is R.PRIORITY and r.blocker == 1


def test_without_backfill_jobs_ahead_of_the_blocked_one_still_start() -> None:
    plan = plan_for(busy_four(), [a_job(1).priority(-1), a_job(2).gpus(4), a_job(3)],
                    policy=Policy(backfill=False))
    assert placed(plan) == {1: (1,)}
    assert code(plan, 3) is R.PRIORITY


def test_without_backfill_waiting_jobs_keep_their_own_gates() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(4), a_job(2).after(9)],
                    policy=Policy(backfill=False))
    assert code(plan, 2) is R.DEPENDENCY


# -- unsatisfiable ----------------------------------------------------------------------------


def test_more_gpus_than_the_machine_has_is_unsatisfiable() -> None:
    plan = plan_for(gpus(4), [a_job(1).gpus(8)])
    assert code(plan, 1) is R.UNSATISFIABLE
    text = plan.reason_text(1)
    assert "8 whole GPUs" in text and "4" in text


def test_more_gpus_than_the_machine_has_is_unsatisfiable_when_it_is_busy_too() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(8)])
    assert code(plan, 1) is R.UNSATISFIABLE


def test_more_memory_than_any_gpu_has_is_unsatisfiable() -> None:
    plan = plan_for(machine(a_gpu(0, "24G"), a_gpu(1, "48G")), [a_job(1).gpus(0.5).mem("60G")])
    assert code(plan, 1) is R.UNSATISFIABLE
    text = plan.reason_text(1)
    assert "60G" in text and "48G" in text


def test_more_memory_than_any_allowed_gpu_has_is_unsatisfiable() -> None:
    gs = machine(a_gpu(0, "24G"), a_gpu(1, "80G"))
    plan = plan_for(gs, [a_job(1).gpus(0.5).mem("40G").allowed([0])])
    assert code(plan, 1) is R.UNSATISFIABLE
    assert "{0}" in plan.reason_text(1)


def test_a_gang_needs_as_many_gpus_with_the_memory_as_it_has_members() -> None:
    # one 48G GPU and two 24G ones: 2 GPUs with 30G each can never be found
    gs = machine(a_gpu(0, "24G"), a_gpu(1, "24G"), a_gpu(2, "48G"))
    plan = plan_for(gs, [a_job(1).gpus(2).mem("30G"), a_job(2)], policy=Policy(backfill=False))
    assert code(plan, 1) is R.UNSATISFIABLE
    text = plan.reason_text(1)
    assert "2 whole GPUs" in text and "only 1" in text and "30G" in text
    assert plan.reservations == []
    assert placed(plan) == {2: (0,)}


def test_allowed_gpus_that_do_not_exist_are_unsatisfiable() -> None:
    plan = plan_for(gpus(4), [a_job(1).allowed("6-7")])
    assert code(plan, 1) is R.UNSATISFIABLE
    assert "{6-7}" in plan.reason_text(1)


def test_fewer_existing_allowed_gpus_than_needed_is_unsatisfiable() -> None:
    plan = plan_for(gpus(4), [a_job(1).gpus(2).allowed([3, 4, 5])])
    assert code(plan, 1) is R.UNSATISFIABLE
    assert "{3-5}" in plan.reason_text(1)


def test_a_gpu_job_on_a_machine_without_gpus_is_unsatisfiable() -> None:
    plan = plan_for([], [a_job(1).gpus(0.5), a_job(2).gpus(2), a_job(3).cpu_only()])
    assert codes(plan) == {1: R.UNSATISFIABLE, 2: R.UNSATISFIABLE}
    assert "no GPUs" in plan.reason_text(1)
    assert placed(plan) == {3: ()}


def test_an_unsatisfiable_job_does_not_block_the_queue() -> None:
    plan = plan_for(gpus(2), [a_job(1).gpus(3), a_job(2)], policy=Policy(backfill=False))
    assert code(plan, 1) is R.UNSATISFIABLE
    assert placed(plan) == {2: (0,)}


def test_without_backfill_a_job_behind_the_blocked_one_still_says_it_is_unsatisfiable() -> None:
    plan = plan_for(busy_four(), [a_job(1).gpus(4), a_job(2).gpus(0.5).allowed([7])],
                    policy=Policy(backfill=False))
    assert code(plan, 2) is R.UNSATISFIABLE


def test_an_unsatisfiable_job_keeps_no_gpus() -> None:
    plan = plan_for(gpus(2), [a_job(1).gpus(0.5).mem("100G"), a_job(2)])
    assert plan.reservations == []
    assert placed(plan) == {2: (0,)}


# -- reason texts -----------------------------------------------------------------------------


def test_a_share_that_fits_nowhere_says_the_most_free_share() -> None:
    gs = machine(a_gpu(0).allocated(0.75), a_gpu(1).allocated(0.5))
    plan = plan_for(gs, [a_job(1).gpus(0.75)])
    assert code(plan, 1) is R.RESOURCES
    text = plan.reason_text(1)
    assert "0.75" in text and "0.5" in text


def test_a_job_limited_to_some_gpus_says_how_many_it_may_use() -> None:
    gs = machine(a_gpu(0).allocated(1.0), a_gpu(1).allocated(1.0), a_gpu(2))
    plan = plan_for(gs, [a_job(1).allowed("0-1")])
    assert code(plan, 1) is R.RESOURCES
    text = plan.reason_text(1)
    assert "2 allowed" in text and "{0-1}" in text


def test_the_reason_text_counts_the_waiting_jobs_ahead() -> None:
    plan = plan_for(gpus(1), many_jobs(range(1, 5)))
    assert "waiting" not in plan.reason_text(2)
    assert "1 waiting job ahead" in plan.reason_text(3)
    assert "2 waiting jobs ahead" in plan.reason_text(4)


def test_a_started_job_has_no_reason() -> None:
    plan = plan_for(gpus(1), [a_job(1)])
    assert plan.reason(1) is None
    assert plan.reason_text(1) == ""


# -- the lazy tail of a long queue on a full machine ------------------------------------------


N = 10_000


def full_machine() -> list:
    return machine(*(a_gpu(i).allocated(1.0) for i in range(4)))


def long_queue() -> list:
    jobs = []
    for i in range(1, N + 1):
        b = a_job(i).gpus([0.5, 1, 2][i % 3]).priority(i % 5)
        if i % 97 == 0:
            b.after(N + 1)
        if i % 89 == 0:
            b.not_before(1_000.0)
        if i % 101 == 0:
            b.gpus(16)
        jobs.append(b.build())
    return jobs


@pytest.fixture(scope="module")
def tail_case() -> tuple:
    jobs = long_queue()
    plan = plan_for(full_machine(), jobs, now=10.0, deps={N + 1: JobState.RUNNING})
    return jobs, plan


def test_a_long_queue_on_a_full_machine_starts_nothing(tail_case: tuple) -> None:
    _, plan = tail_case
    assert plan.starts == []
    assert len(plan.tail) > N // 2  # the pass stopped looking early


def test_every_job_of_a_long_queue_has_its_own_reason(tail_case: tuple) -> None:
    jobs, plan = tail_case
    for j in jobs:
        r = plan.reason(j.id)
        assert r is not None, j
        if j.after:
            assert r.code is R.DEPENDENCY
        elif j.not_before:
            assert r.code is R.BACKOFF and r.until == 1_000.0
        elif j.gpus_milli > 4000:
            assert r.code is R.UNSATISFIABLE
        else:
            assert r.code is R.RESOURCES


def test_waiting_yields_every_pending_job_exactly_once(tail_case: tuple) -> None:
    jobs, plan = tail_case
    ids = [job_id for job_id, _ in plan.waiting()]
    assert len(ids) == len(set(ids)) == N
    assert set(ids) == {j.id for j in jobs}


def test_positions_increase_along_the_queue(tail_case: tuple) -> None:
    jobs, plan = tail_case
    queue = sorted(jobs, key=lambda j: (j.priority, j.seq))
    resources = [j.id for j in queue if code(plan, j.id) is R.RESOURCES]
    positions = [plan.position(j) for j in resources]
    assert positions == sorted(positions)
    assert len(set(positions)) == len(positions)
    assert positions[0] == 0


def test_a_job_deep_in_the_tail_says_the_machine_is_full(tail_case: tuple) -> None:
    jobs, plan = tail_case
    last = max((j for j in jobs if code(plan, j.id) is R.RESOURCES),
               key=lambda j: (j.priority, j.seq))
    text = plan.reason_text(last.id)
    assert "fully allocated" in text and "waiting jobs ahead" in text


def test_the_tail_is_the_same_whether_the_queue_came_sorted_or_not() -> None:
    jobs = long_queue()[:2_000]
    deps = {N + 1: JobState.RUNNING}
    in_order = sorted(jobs, key=lambda j: (j.priority, j.seq))
    shuffled = list(jobs)
    random.Random(3).shuffle(shuffled)
    a = plan_for(full_machine(), in_order, presorted=True, now=10.0, deps=deps)
    b = plan_for(full_machine(), shuffled, now=10.0, deps=deps)
    assert normalised(a) == normalised(b)


def test_a_full_machine_with_free_memory_still_lets_cpu_jobs_through() -> None:
    jobs = [*many_jobs(range(1, 100)), a_job(100).cpu_only().build()]
    plan = plan_for(full_machine(), jobs)
    assert placed(plan) == {100: ()}
    assert set(codes(plan)) == set(range(1, 100))


def test_gib_helper_is_binary() -> None:
    assert a_job(1).mem("1G").build().gpu_mem == GIB


def test_a_never_fitting_job_does_not_cut_off_multi_gpu_jobs_behind_it_on_idle_gpus():
    """Regression: the lazy-tail cut compared a 2-GPU need with one GPU's free share."""
    from rota.core.schedule import schedule
    from rota.core.snapshot import GpuView, PendingJob, Policy, Snapshot

    gpus = [GpuView(i, 24 << 30) for i in range(4)]
    pending = [PendingJob(1, 0, 1, 8000), PendingJob(2, 0, 2, 2000)]
    plan = schedule(Snapshot(gpus, pending), Policy(), 0.0)
    assert [s.job_id for s in plan.starts] == [2]
    assert plan.reason(1).code == "unsatisfiable"


def test_a_plan_finds_tail_jobs_through_the_callers_index_as_through_its_own() -> None:
    """A daemon holding a million jobs hands its own index (Snapshot.by_id): the plan then
    searches its tail rather than indexing it, and says the same of every job."""
    jobs = long_queue()[:2_000]
    deps = {N + 1: JobState.RUNNING}
    in_order = sorted(jobs, key=lambda j: (j.priority, j.seq))
    own = plan_for(full_machine(), in_order, presorted=True, now=10.0, deps=deps)
    index = {j.id: j for j in in_order}
    snap = dataclasses.replace(snapshot_of(full_machine(), in_order, deps=deps, presorted=True),
                               by_id=index)
    searched = schedule(snap, Policy(), 10.0)
    assert len(searched.tail) > 1_000 and searched._tail_index is None
    assert normalised(searched) == normalised(own)
    gone = in_order[-1]
    del index[gone.id]  # it left the queue after the pass
    assert searched.reason(gone.id) is None and own.reason(gone.id) is not None


@pytest.mark.parametrize("cpu_job", [False, True])
def test_a_caller_that_knows_the_least_share_gets_the_same_plan(cpu_job: bool) -> None:
    """Snapshot.smallest_milli spares the pass a look at every job; the plan is the same."""
    rng = random.Random(7)
    jobs = [a_job(i).gpus(rng.choice([0.25, 0.5, 1, 2])).priority(rng.randrange(3))
            for i in range(1, 300)]
    if cpu_job:
        jobs.append(a_job(300).gpus(0))
    snap = snapshot_of(gpus(4), jobs)
    least = min(j.gpus_milli for j in snap.pending)
    hinted = dataclasses.replace(snap, smallest_milli=least)
    plain = schedule(snap, Policy(), 0.0)
    assert normalised(schedule(hinted, Policy(), 0.0)) == normalised(plain)
    assert plain.tail or cpu_job  # the early cut, which the least share decides, was taken


def test_gpus_kept_for_a_reservation_are_worded_in_number() -> None:
    from rota.core.schedule import _gpus_kept

    assert _gpus_kept({0}) == "GPU 0 is kept"
    assert _gpus_kept({0, 1, 2, 5}) == "GPUs 0-2,5 are kept"


def test_waiting_reasons_say_what_is_true_of_a_half_free_kept_gpu() -> None:
    # GPU 0 full, GPU 1 half used: job 1 (a whole GPU) waits and keeps GPU 1, whose free
    # half the later quarter-GPU jobs may not take. Neither reason may say "fully
    # allocated" of GPU 1 nor "0 free" without saying what is kept (issue 38).
    gs = machine(a_gpu(0).allocated(1.0), a_gpu(1).allocated(0.5))
    jobs = [a_job(1).gpus(1)] + [a_job(i).gpus(0.25) for i in range(2, 40)]
    plan = plan_for(gs, jobs)
    assert placed(plan) == {}
    head = plan.reason_text(1)
    assert head.startswith("waits for 1 whole GPU; 0 free on the machine") and \
        "GPU 1 is kept for it (0.5 free now)" in head, head
    for j in (2, 39):  # one near the head, one deep in the tail
        text = plan.reason_text(j)
        assert text.startswith("waits for GPUs: no GPU has room it may use (GPU 1 with 0.5 "
                               "free is kept for job 1, which is ahead)"), text
