"""Jobs held back outside the pass (Snapshot.held: their datasets are being fetched to this
machine, rota.server.storage.datasets): a held job does not start and carries the reason it was
given, in the pass and in the lazy tail alike (what `rota why` reads through Plan.reason);
it takes no queue position, keeps no GPUs and makes no one stop, so the jobs behind it
start on the GPUs it would have taken; once it is no longer held it starts like any job."""

from __future__ import annotations

from builders import a_gpu, a_job, gpus, job_of, machine, placed

from rota.core.plan import Plan, Reason, ReasonCode
from rota.core.preempt import RunningJob
from rota.core.quota import Quota, gpu_allowance, over_reasons, standings
from rota.core.schedule import schedule
from rota.core.snapshot import GpuView, Policy, Snapshot

NOW = 10_000.0
FETCHING = Reason(ReasonCode.DATA, "waits for its datasets: alice/text-mini:v1 (10M) is "
                  "being fetched to this machine")


def pass_of(gs: list[GpuView], jobs: list, held: dict[int, Reason] | None, *,
            running: list[RunningJob] | None = None, policy: Policy | None = None,
            **more: object) -> Plan:
    snap = Snapshot(gpus=gs, pending=[job_of(j) for j in jobs], held=held,
                    running=running or (), **more)  # type: ignore[arg-type]
    return schedule(snap, policy or Policy(), NOW)


def running(job_id: int, gpus: tuple[int, ...], ends_in: float | None, *,
            priority: int = 0, preemptible: bool = False) -> RunningJob:
    return RunningJob(id=job_id, priority=priority, gpu_indices=gpus, milli=1000,
                      gpu_mem=None, preemptible=preemptible, since_checkpoint_s=10.0,
                      expected_end=None if ends_in is None else NOW + ends_in)


def two_busy_of_four() -> list[GpuView]:
    """GPUs 0 and 1 held by a running 2-GPU job; 2 and 3 free."""
    return machine(a_gpu(0).allocated(1.0), a_gpu(1).allocated(1.0), a_gpu(2), a_gpu(3))


def test_a_held_job_does_not_start_and_the_next_one_takes_its_gpu() -> None:
    plan = pass_of(gpus(1), [a_job(1), a_job(2)], {1: FETCHING})
    assert placed(plan) == {2: (0,)}  # the GPU job 1 would have had
    assert plan.reasons[1] is FETCHING
    assert plan.reason(1) is FETCHING
    assert plan.reason_text(1) == FETCHING.message  # `rota why`: the reason, as given
    assert 1 not in plan.queue_position and plan.position(1) == 0  # not in the GPU queue
    assert plan.reservations == [] and plan.preemptions == []
    assert 1 not in plan.start_estimates
    assert dict(plan.waiting()) == {1: FETCHING}


def test_once_it_is_not_held_it_starts() -> None:
    jobs = [a_job(1), a_job(2)]
    for held in (None, {}):
        plan = pass_of(gpus(1), jobs, held)
        assert placed(plan) == {1: (0,)}, held
        assert plan.reason(2) is not None and plan.reason(2).code is ReasonCode.RESOURCES
    # held for another job only: this one is free to go
    plan = pass_of(gpus(1), jobs, {99: FETCHING})
    assert placed(plan) == {1: (0,)}


def test_a_held_job_keeps_no_gpus_for_itself() -> None:
    """Job 1 (4 GPUs) would keep all four and job 2 (no expected run time) could not
    start; held, it keeps nothing and job 2 starts on a free GPU."""
    jobs = [a_job(1).gpus(4).expected(600), a_job(2)]
    runs = [running(9, (0, 1), 3600)]
    not_held = pass_of(two_busy_of_four(), jobs, None, running=runs)
    assert [r.job_id for r in not_held.reservations] == [1]
    assert placed(not_held) == {}
    assert not_held.reason(2) is not None and "kept for job 1" in not_held.reason(2).message

    plan = pass_of(two_busy_of_four(), jobs, {1: FETCHING}, running=runs)
    assert plan.reservations == []
    assert set(placed(plan)) == {2} and set(placed(plan)[2]) <= {2, 3}
    assert plan.reason(1) is FETCHING


def test_the_job_behind_a_held_one_is_first_in_the_gpu_queue() -> None:
    full = machine(a_gpu(0).allocated(1.0))
    plan = pass_of(full, [a_job(1), a_job(2), a_job(3)], {1: FETCHING},
                   running=[running(9, (0,), 100)])
    assert placed(plan) == {}
    assert plan.reason(1) is FETCHING
    assert plan.reason(2) is not None and plan.reason(2).code is ReasonCode.RESOURCES
    assert plan.position(2) == 0  # the held job ahead of it takes no place
    assert plan.reason_text(2) == plan.reason(2).message  # "0 ahead": nothing added
    assert plan.reservations[0].job_id == 2  # the first to wait for GPUs keeps them
    # start estimates count the jobs that wait for GPUs, not the held one
    assert 1 not in plan.start_estimates and plan.start_estimates[2] == NOW + 100


def test_a_held_job_in_the_lazy_tail_has_its_own_reason() -> None:
    """Once no GPU has room, the rest of the queue is not looked at one by one: the held
    job's reason is worked out on demand (Plan.gate), as `rota why` asks for it."""
    full = machine(a_gpu(0).allocated(1.0), a_gpu(1).allocated(1.0))
    jobs = [a_job(1), a_job(2), a_job(3).gpus(0.5)]
    plan = pass_of(full, jobs, {2: FETCHING})
    assert placed(plan) == {}
    assert [j.id for j in plan.tail] == [2, 3] and plan.gate is not None
    assert 2 not in plan.reasons  # lazy: not worked out by the pass
    assert plan.reason(2) is FETCHING
    assert plan.gate(job_of(a_job(2))) is FETCHING
    assert plan.reason_text(2) == FETCHING.message
    assert plan.reason(3) is not None and plan.reason(3).code is ReasonCode.RESOURCES
    assert plan.gate(job_of(a_job(3).gpus(0.5))) is None  # the tail's reason is its own
    assert dict(plan.waiting())[2] is FETCHING
    assert 2 not in plan.start_estimates


def test_a_held_cpu_only_job_does_not_start_either() -> None:
    plan = pass_of(gpus(1), [a_job(1).cpu_only(), a_job(2).cpu_only()], {1: FETCHING})
    assert [s.job_id for s in plan.starts] == [2]
    assert plan.reason(1) is FETCHING


def test_a_held_job_makes_no_running_job_stop() -> None:
    """A job of higher priority that waits for its data does not preempt anyone: the GPUs
    it would get could not be used yet."""
    runs = [running(9, (0,), None, priority=5, preemptible=True)]
    full = machine(a_gpu(0).allocated(1.0))
    jobs = [a_job(1).priority(0)]
    assert [p.victim for p in pass_of(full, jobs, None, running=runs).preemptions] == [9]
    plan = pass_of(full, jobs, {1: FETCHING}, running=runs)
    assert plan.preemptions == []
    assert plan.reason(1) is FETCHING


def test_held_comes_before_a_quota_and_takes_none_of_the_allowance() -> None:
    """The held reason is told first; a held job spends nothing of its owner's GPUs-at-
    once allowance, so the owner's next job starts."""
    current = standings([Quota("user", "alice", "gpus", "none", 1)], [], {}, NOW)
    jobs = [a_job(1).build()._replace(user="alice"), a_job(2).build()._replace(user="alice")]
    quotas = {"over_quota": over_reasons(current), "gpu_allowance": gpu_allowance(current)}
    not_held = pass_of(gpus(2), jobs, None, **quotas)
    assert set(placed(not_held)) == {1}
    assert not_held.reason(2) is not None and not_held.reason(2).code is ReasonCode.QUOTA
    plan = pass_of(gpus(2), jobs, {1: FETCHING}, **quotas)
    assert set(placed(plan)) == {2}
    assert plan.reason(1) is FETCHING


def test_the_reason_of_every_held_job_is_its_own() -> None:
    other = Reason(ReasonCode.DATA, "waits for its datasets: bob/images:v3 was removed")
    plan = pass_of(gpus(4), [a_job(1), a_job(2), a_job(3)], {1: FETCHING, 3: other})
    assert set(placed(plan)) == {2}
    assert plan.reason(1) is FETCHING and plan.reason(3) is other


def test_a_held_job_is_not_backfilled_onto_gpus_kept_for_another() -> None:
    """Job 1 (4 GPUs) keeps every GPU; jobs 2 and 3 would end by the shadow time and may
    use the two free ones, but job 2 is held: only job 3 starts."""
    plan = pass_of(two_busy_of_four(),
                   [a_job(1).gpus(4), a_job(2).expected(600), a_job(3).expected(600)],
                   {2: FETCHING}, running=[running(9, (0, 1), 3600)])
    assert set(placed(plan)) == {3}
    assert plan.reason(2) is FETCHING
