"""Handing an engine pool's jobs over: Rota's order, gates, and the pool's cap."""

from __future__ import annotations

import dataclasses

from rota.core.forward import forward
from rota.core.lifecycle import JobState
from rota.core.outcome import (
    WAIT_AGAIN_S,
    AttemptFacts,
    Cancelled,
    Fail,
    NeverStarted,
    Requeue,
    RetryPolicy,
    StopReason,
    decide,
    ends_in_failure,
)
from rota.core.plan import ReasonCode
from rota.core.snapshot import PendingJob


def job(i: int, priority: int = 0, **kw: object) -> PendingJob:
    return PendingJob(id=i, priority=priority, seq=i, gpus_milli=2000, **kw)  # type: ignore[arg-type]


def test_jobs_go_in_priority_then_submission_order_up_to_the_cap() -> None:
    queue = [job(1), job(2, priority=-5), job(3), job(4, priority=10)]
    out = forward(queue, pool="hpc", in_flight=1, max_in_flight=3, dependency_states={},
                  now=0.0)
    assert out.handed == [2, 1]
    assert {i: r.code for i, r in out.reasons.items()} == {3: ReasonCode.POOL_FULL,
                                                           4: ReasonCode.POOL_FULL}
    assert "pool hpc holds 3 of Rota's jobs" in out.reasons[3].message


def test_a_gated_job_lets_the_ones_behind_it_go_first() -> None:
    queue = [job(1, after=(9,)), job(2, not_before=50.0), job(3), job(4, after=(8,))]
    out = forward(queue, pool="hpc", in_flight=0, max_in_flight=10,
                  dependency_states={9: JobState.RUNNING, 8: JobState.COMPLETED}, now=10.0)
    assert out.handed == [3, 4]
    assert out.reasons[1].code is ReasonCode.DEPENDENCY and out.reasons[1].blocker == 9
    assert out.reasons[2].code is ReasonCode.BACKOFF and out.reasons[2].until == 50.0


def test_a_failed_dependency_is_said_and_a_full_pool_hands_nothing() -> None:
    out = forward([job(1, after=(7,)), job(2)], pool="p", in_flight=5, max_in_flight=5,
                  dependency_states={7: JobState.FAILED}, now=0.0)
    assert out.handed == []
    assert out.reasons[1].code is ReasonCode.DEPENDENCY_FAILED
    assert out.reasons[2].code is ReasonCode.POOL_FULL
    over = forward([job(1)], pool="p", in_flight=7, max_in_flight=5, dependency_states={},
                   now=0.0)
    assert over.handed == [] and over.reasons[1].code is ReasonCode.POOL_FULL


def test_a_dependency_in_flight_on_the_same_pool_is_left_to_an_engine_that_holds_jobs() -> None:
    queue = [job(1, after=(9,)), job(2, after=(9, 8)), job(3, after=(9, 6))]
    states = {9: JobState.RUNNING, 8: JobState.COMPLETED, 6: JobState.STARTING}
    out = forward(queue, pool="hpc", in_flight=1, max_in_flight=10, dependency_states=states,
                  now=0.0, held_here={9}, holds_dependencies=True)
    assert out.handed == [1, 2]
    # 6 is not held by this pool's engine (another pool, or no id yet): Rota holds 3
    assert out.reasons[3].code is ReasonCode.DEPENDENCY and out.reasons[3].blocker == 6


def test_an_engine_without_dependencies_leaves_them_to_rota() -> None:
    out = forward([job(1, after=(9,))], pool="ray", in_flight=1, max_in_flight=10,
                  dependency_states={9: JobState.RUNNING}, now=0.0, held_here={9},
                  holds_dependencies=False)
    assert out.handed == [] and out.reasons[1].code is ReasonCode.DEPENDENCY


def test_held_dependencies_change_neither_a_failed_one_nor_the_cap_nor_the_backoff() -> None:
    states = {9: JobState.RUNNING, 7: JobState.FAILED}
    queue = [job(1, after=(9, 7)), job(2, after=(9,)), job(3, after=(9,)),
             job(4, after=(9,), not_before=50.0)]
    out = forward(queue, pool="hpc", in_flight=4, max_in_flight=5, dependency_states=states,
                  now=10.0, held_here={9}, holds_dependencies=True)
    assert out.handed == [2]
    assert out.reasons[1].code is ReasonCode.DEPENDENCY_FAILED and out.reasons[1].blocker == 7
    assert out.reasons[3].code is ReasonCode.POOL_FULL
    assert out.reasons[4].code is ReasonCode.BACKOFF


def test_an_attempt_unstarted_for_its_dependency_waits_again_without_a_failure() -> None:
    facts = AttemptFacts(stop=None, failures=1, policy=RetryPolicy(retries=0))
    end = NeverStarted("its engine dropped it: CANCELLED (DependencyNeverSatisfied)",
                       waits=True)
    assert not ends_in_failure(None, end)
    got = decide(facts, end, 100.0)
    assert isinstance(got, Requeue) and got.record == "not_started"
    assert got.not_before == 100.0 + WAIT_AGAIN_S and "DependencyNeverSatisfied" in got.reason
    cancelled = decide(dataclasses.replace(facts, stop=StopReason.CANCEL), end, 100.0)
    assert isinstance(cancelled, Cancelled)
    # any other launch failure is the job's: no retries left, it fails
    assert isinstance(decide(facts, NeverStarted("no such cwd"), 100.0), Fail)
