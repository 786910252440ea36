"""The decision after an attempt ends (rota.core.outcome): every branch, no processes."""

from __future__ import annotations

import dataclasses
import signal

import pytest

from rota.core.outcome import (
    LOST,
    LOST_LAUNCHES_MAX,
    WAIT_AGAIN_S,
    AttemptFacts,
    Cancelled,
    Checkpoint,
    Complete,
    Exited,
    Fail,
    NeverStarted,
    OomFacts,
    Requeue,
    RetryAt,
    RetryPolicy,
    RetryWithMoreMemory,
    StopReason,
    TimedOut,
    decide,
    ends_in_failure,
    lost_in_a_row,
    stop_text,
    time_limit_text,
)

GIB = 1 << 30
NOW = 1000.0
OK, FAILED, KILLED = Exited(0), Exited(3), Exited(None, int(signal.SIGKILL))


def facts(**kw: object) -> AttemptFacts:
    base = AttemptFacts(stop=None, failures=0, policy=RetryPolicy(), gpus=(0,), milli=1000)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_a_clean_exit_completes() -> None:
    assert decide(facts(), OK, NOW) == Complete("exit code 0")
    assert decide(facts(), OK, NOW).record == "completed"


def test_a_failure_without_retries_fails_and_counts_it() -> None:
    got = decide(facts(failures=2), FAILED, NOW)
    assert got == Fail("exit code 3", failures=3)
    assert decide(facts(), KILLED, NOW) == Fail("killed by signal 9", failures=1)


def test_a_failure_the_job_explained_carries_its_reason() -> None:
    said = Exited(1, said="the eval set is empty")
    assert decide(facts(), said, NOW) == Fail("exit code 1: the eval set is empty", 1)
    got = decide(facts(policy=RetryPolicy(retries=1, backoff=2.0)), said, NOW)
    assert isinstance(got, RetryAt)
    assert got.reason == "exit code 1: the eval set is empty; retry 1/1 in 2s"
    killed = Exited(None, int(signal.SIGKILL), said="out of host memory")
    assert decide(facts(), killed, NOW) == Fail("killed by signal 9: out of host memory", 1)
    # an engine's account of the end (its node failed) is what happened, whatever was said
    assert Exited(1, why="NODE_FAIL", said="x").how == "NODE_FAIL"


@pytest.mark.parametrize(("failures", "delay"), [(0, 2.0), (1, 4.0), (2, 8.0), (3, 10.0)])
def test_retries_back_off_exponentially_up_to_the_cap(failures: int, delay: float) -> None:
    f = facts(failures=failures, policy=RetryPolicy(retries=5, backoff=2.0, backoff_max=10.0))
    got = decide(f, FAILED, NOW)
    assert isinstance(got, RetryAt) and got.record == "failed"
    assert got.at == NOW + delay and got.failures == failures + 1
    assert got.reason == f"exit code 3; retry {failures + 1}/5 in {delay:g}s"


def test_the_last_retry_spent_fails() -> None:
    f = facts(failures=2, policy=RetryPolicy(retries=2, backoff=1.0))
    assert decide(f, FAILED, NOW) == Fail("exit code 3", failures=3)


def test_gpu_out_of_memory_retries_once_with_more_memory() -> None:
    oom = OomFacts(retried_before=False, bigger=(1000, 12 * GIB), peak=8 * GIB)
    got = decide(facts(gpus=(0, 1), gpu_mem=4 * GIB, oom=oom), FAILED, NOW)
    assert isinstance(got, RetryWithMoreMemory)
    assert (got.gpus_milli, got.gpu_mem) == (2000, 12 * GIB)  # two whole GPUs stay two
    assert got.note == ("GPU out of memory (peak 8G on one GPU, 4G asked): retried once "
                        "with 12G per GPU")
    assert got.reason == f"exit code 3; {got.note}"


def test_a_shared_gpu_job_grows_its_share_on_out_of_memory() -> None:
    oom = OomFacts(retried_before=False, bigger=(500, 6 * GIB), peak=0)
    got = decide(facts(milli=250, oom=oom), FAILED, NOW)
    assert isinstance(got, RetryWithMoreMemory) and got.gpus_milli == 500
    assert "no amount asked" in got.note


@pytest.mark.parametrize("oom", [
    OomFacts(retried_before=True, bigger=(1000, 12 * GIB), peak=1),  # once only
    OomFacts(retried_before=False, bigger=None, peak=1),  # no GPU has that much
])
def test_out_of_memory_falls_back_to_the_retry_policy(oom: OomFacts) -> None:
    f = facts(oom=oom, policy=RetryPolicy(retries=1, backoff=1.0))
    assert isinstance(decide(f, FAILED, NOW), RetryAt)


def test_a_cpu_job_never_gets_more_gpu_memory() -> None:
    oom = OomFacts(retried_before=False, bigger=(1000, GIB), peak=1)
    assert decide(facts(gpus=(), oom=oom), FAILED, NOW) == Fail("exit code 3", failures=1)


@pytest.mark.parametrize("end", [OK, FAILED, KILLED])
def test_a_cancelled_job_is_cancelled_however_it_ended(end: Exited) -> None:
    got = decide(facts(stop=StopReason.CANCEL), end, NOW)
    assert got == Cancelled(f"cancelled ({end.how})", end_reason=f"cancelled ({end.how})")


def test_a_job_stopped_at_its_time_limit_timed_out() -> None:
    got = decide(facts(stop=StopReason.TIMEOUT, time_limit=3.0), KILLED, NOW)
    assert got == TimedOut("stopped by its time limit of 3s (killed by signal 9)")


def test_a_preempted_job_queues_again_saying_what_it_saved() -> None:
    stop = StopReason.PREEMPT
    assert decide(facts(stop=stop), OK, NOW) == Requeue(
        "preempted (exit code 0); queued again in its place", record="preempted")
    none = decide(facts(stop=stop, checkpointing=True), OK, NOW)
    assert isinstance(none, Requeue) and "; it saved no checkpoint;" in none.reason
    saved = decide(facts(stop=stop, checkpointing=True,
                         checkpoint=Checkpoint("/ck/step-40", 40)), KILLED, NOW)
    assert saved == Requeue("preempted (killed by signal 9); last checkpoint /ck/step-40 "
                            "(step 40); queued again in its place", record="preempted",
                            resume_from="/ck/step-40")


def test_a_job_stopped_for_idle_gpus_is_held_in_its_place_with_its_checkpoint() -> None:
    stop = StopReason.IDLE
    saved = decide(facts(stop=stop, checkpointing=True, policy=RetryPolicy(retries=0),
                         checkpoint=Checkpoint("/ck/step-7", 7)), OK, NOW)
    assert saved == Requeue("stopped for idle GPUs (exit code 0); last checkpoint "
                            "/ck/step-7 (step 7); held in its place until `rota release`",
                            record="idle_stopped", resume_from="/ck/step-7", held=True)
    # however it ended once asked (even killed after its grace), no failure is charged
    killed = decide(facts(stop=stop, policy=RetryPolicy(retries=0)), KILLED, NOW)
    assert isinstance(killed, Requeue) and killed.held and killed.record == "idle_stopped"
    assert stop.runs_again


@pytest.mark.parametrize(("stop", "why"), [(StopReason.GPU_LOST, "its GPU was lost"),
                                           (StopReason.REQUEUE, "requeued by request")])
def test_lost_gpus_and_requeues_queue_again_without_counting_a_failure(
        stop: StopReason, why: str) -> None:
    got = decide(facts(stop=stop, policy=RetryPolicy(retries=0)), FAILED, NOW)
    assert got == Requeue(f"{why} (exit code 3); queued again", record="requeued")
    assert stop.runs_again and not StopReason.CANCEL.runs_again


def test_a_failed_launch_is_a_failure_like_any_other() -> None:
    end = NeverStarted("cwd missing")
    f = facts(policy=RetryPolicy(retries=1, backoff=5.0))
    assert decide(f, end, NOW) == RetryAt(NOW + 5.0, "launch failed: cwd missing; retry 1/1 "
                                          "in 5s", failures=1)
    assert decide(facts(), end, NOW) == Fail("launch failed: cwd missing", failures=1)
    # a launch that failed while the job was being stopped for another reason still fails
    assert isinstance(decide(facts(stop=StopReason.PREEMPT), end, NOW), Fail)


def test_a_launch_lost_to_a_passing_trouble_queues_again_without_a_failure() -> None:
    end = NeverStarted("the local runner went away", passing=True)
    assert not ends_in_failure(None, end)
    assert decide(facts(policy=RetryPolicy(retries=0)), end, NOW) == Requeue(
        "not started: the local runner went away; queued again", record=LOST,
        not_before=NOW + WAIT_AGAIN_S)
    assert isinstance(decide(facts(stop=StopReason.CANCEL), end, NOW), Cancelled)


def test_a_launch_lost_again_and_again_waits_longer_then_fails() -> None:
    end = NeverStarted("job 3: the local runner went away", passing=True)
    waits = []
    for before in range(LOST_LAUNCHES_MAX - 1):
        got = decide(facts(lost_before=before, failures=1), end, NOW)
        assert isinstance(got, Requeue) and got.record == LOST, got
        assert got.not_before is not None
        waits.append(got.not_before - NOW)
    assert waits == sorted(waits) and waits[0] == WAIT_AGAIN_S and waits[-1] > WAIT_AGAIN_S
    assert decide(facts(lost_before=3), end, NOW).reason == (  # type: ignore[union-attr]
        "not started: job 3: the local runner went away; queued again (lost 4 times in a "
        "row; it fails at 5)")
    # the last loss in a row fails the job, saying why; no retry was charged meanwhile
    assert decide(facts(lost_before=LOST_LAUNCHES_MAX - 1, failures=1), end, NOW) == Fail(
        f"its launch was lost {LOST_LAUNCHES_MAX} times in a row: job 3: the local runner "
        "went away", failures=1)
    # however many retries the job allows: its retries are for its own failures
    assert isinstance(decide(facts(lost_before=LOST_LAUNCHES_MAX - 1,
                                   policy=RetryPolicy(retries=9)), end, NOW), Fail)


def test_losses_in_a_row_are_counted_from_the_last_attempt_back() -> None:
    assert lost_in_a_row([]) == 0
    assert lost_in_a_row([LOST, LOST]) == 2
    assert lost_in_a_row([LOST, "completed", LOST]) == 1  # an attempt that ran ends a row
    assert lost_in_a_row([LOST, LOST, "launch_failed"]) == 0
    assert lost_in_a_row(["failed", LOST, None, LOST]) == 1


def test_a_job_cancelled_while_its_launch_was_in_flight_is_cancelled() -> None:
    got = decide(facts(stop=StopReason.CANCEL), NeverStarted("runner lost"), NOW)
    assert got == Cancelled("cancelled (its launch failed: runner lost)",
                            end_reason="cancelled by request")


def test_which_ends_count_as_failures() -> None:
    assert ends_in_failure(None, FAILED) and ends_in_failure(None, KILLED)
    assert not ends_in_failure(None, OK)
    assert not ends_in_failure(StopReason.TIMEOUT, FAILED)
    assert ends_in_failure(StopReason.REQUEUE, NeverStarted("x"))
    assert not ends_in_failure(StopReason.CANCEL, NeverStarted("x"))


def test_stop_wording_reads_as_a_person_writes_it() -> None:
    # `--time-limit 3s --grace 1s`: warned 1 s before the limit (the timer lands a hair early)
    assert stop_text(time_limit_text(3.0), "SIGTERM", 0.999828) == \
        "time limit of 3s reached; sent SIGTERM, then SIGKILL 1s later"
    assert stop_text("cancelled by request", "SIGINT", 90) == \
        "cancelled by request; sent SIGINT, then SIGKILL 1m30s later"
    assert stop_text("x", "SIGTERM", 0.5) == "x; sent SIGTERM, then SIGKILL 0.5s later"
    assert stop_text("x", "SIGTERM", -0.01) == "x; sent SIGTERM, then SIGKILL 0s later"
    assert time_limit_text(7200) == "time limit of 2h00m reached"
