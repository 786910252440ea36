"""Handing an engine pool's jobs over: Rota's order, gates, and the pool's cap."""

from __future__ import annotations

from rota.core.forward import forward
from rota.core.lifecycle import JobState
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
