"""Quotas and budgets (rota.core.quota): UTC calendar periods, usage read from attempts,
reasons in words, and the GPUs-at-once check made per start inside one pass."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from builders import gpus

from rota.core.plan import ReasonCode
from rota.core.quota import (
    Quota,
    Standing,
    alert_key,
    crossed,
    describe,
    gpu_allowance,
    hard_over,
    over_reasons,
    period_window,
    standings,
)
from rota.core.schedule import schedule
from rota.core.snapshot import PendingJob, Policy, Snapshot
from rota.core.usage import UsageRecord


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def run(user: str, project: str | None, n: float, start: str, end: str | None,
        price: float | None = None) -> UsageRecord:
    return UsageRecord(1, 1, user, project, None, "local", n, ts(start),
                       None if end is None else ts(end), None, price)


# --- periods -----------------------------------------------------------------------------

def test_day_week_month_are_utc_calendar_periods() -> None:
    now = ts("2026-11-28T13:30:00")  # a Saturday
    assert period_window("day", now) == (ts("2026-11-28T00:00:00"), ts("2026-11-29T00:00:00"))
    assert period_window("week", now) == (ts("2026-11-23T00:00:00"), ts("2026-11-30T00:00:00"))
    assert period_window("month", now) == (ts("2026-11-01T00:00:00"),
                                           ts("2026-12-01T00:00:00"))
    assert period_window("month", ts("2026-12-31T23:59:59"))[1] == ts("2027-01-01T00:00:00")
    assert period_window("none", now) == (0.0, None)
    # a Monday at midnight begins a new week
    assert period_window("week", ts("2026-11-30T00:00:00"))[0] == ts("2026-11-30T00:00:00")


def test_unknown_period_is_named() -> None:
    with pytest.raises(ValueError, match="'fortnight'"):
        period_window("fortnight", 0.0)


# --- usage and reasons -------------------------------------------------------------------

VISION_WEEK = Quota("project", "vision", "gpu_hours", "week", 96)


def test_gpu_hours_this_week_counts_only_this_week_and_running_up_to_now() -> None:
    now = ts("2026-11-28T12:00:00")
    records = [
        run("alice", "vision", 2, "2026-11-22T12:00:00", "2026-11-23T12:00:00"),  # 24 h, 12 in
        run("bob", "vision", 4, "2026-11-28T00:00:00", None),  # running: 12 h so far -> 48
        run("carol", "other", 8, "2026-11-27T00:00:00", "2026-11-28T00:00:00"),  # not vision
    ]
    (s,) = standings([VISION_WEEK], records, {}, now)
    assert s.used == pytest.approx(2 * 12 + 4 * 12)
    assert not s.over
    assert s.percent == pytest.approx(75.0)


def test_over_a_weekly_quota_says_so_in_words_and_waits_until_monday() -> None:
    now = ts("2026-11-28T12:00:00")
    records = [run("alice", "vision", 8, "2026-11-27T00:00:00", "2026-11-28T00:00:00")]
    current = standings([VISION_WEEK], records, {}, now)
    reason = over_reasons(current)[("project", "vision")]
    assert reason.code is ReasonCode.QUOTA
    assert reason.message == ("waits: project vision used 192.0 of its 96 GPU-hours this "
                              "week; resets Monday 00:00 UTC")
    assert reason.until == ts("2026-11-30T00:00:00")


def test_the_reset_clears_the_reason() -> None:
    """A fake clock walks past Monday 00:00: last week's use no longer counts."""
    records = [run("alice", "vision", 8, "2026-11-27T00:00:00", "2026-11-28T00:00:00")]
    before = ts("2026-11-29T23:59:59")
    assert over_reasons(standings([VISION_WEEK], records, {}, before))
    after = ts("2026-11-30T00:00:00")
    assert over_reasons(standings([VISION_WEEK], records, {}, after)) == {}


def test_money_is_read_from_the_attempts_price() -> None:
    now = ts("2026-11-15T00:00:00")
    q = Quota("user", "alice", "money", "month", 500)
    records = [run("alice", None, 2, "2026-11-10T00:00:00", "2026-11-11T00:00:00", 12.0),
               run("alice", None, 8, "2026-11-12T00:00:00", "2026-11-13T00:00:00")]  # no price
    (s,) = standings([q], records, {}, now)
    assert s.used == pytest.approx(2 * 24 * 12.0)
    assert describe(s) == ("user alice spent 576.00 of its 500 budget this month; "
                           "resets 1 Dec 00:00 UTC")
    assert s.over


def test_a_lifted_quota_is_not_enforced_until_the_lift_ends() -> None:
    now = ts("2026-11-28T12:00:00")
    records = [run("alice", "vision", 8, "2026-11-27T00:00:00", "2026-11-28T00:00:00")]
    lifted = VISION_WEEK._replace(lifted_until=now + 60)
    assert standings([lifted], records, {}, now) == []
    assert over_reasons(standings([lifted], records, {}, now + 60))


def test_hard_budget_and_alert_thresholds() -> None:
    q = Quota("user", "alice", "money", "month", 100, hard=True)
    at = Standing(q, 85.0, ts("2026-11-01T00:00:00"), ts("2026-12-01T00:00:00"))
    assert crossed(at) == [50, 80]
    assert hard_over([at]) == {}
    full = at._replace(used=100.0)
    assert crossed(full) == [50, 80, 100]
    assert ("user", "alice") in hard_over([full])
    # one key per quota, period and threshold: next month's 50 % is another alert
    nxt = at._replace(since=ts("2026-12-01T00:00:00"))
    assert alert_key(at, 50) != alert_key(nxt, 50)
    assert alert_key(at, 50) != alert_key(at, 80)


# --- inside the pass ---------------------------------------------------------------------

def job(i: int, n: int, user: str = "alice", project: str | None = None) -> PendingJob:
    return PendingJob(i, 0, i, n * 1000, user=user, project=project)


def pass_with(jobs: list[PendingJob], quotas: list[Quota], running: dict[tuple[str, str], float],
              now: float = 0.0, n_gpus: int = 8):
    current = standings(quotas, [], running, now)
    snap = Snapshot(gpus=gpus(n_gpus), pending=jobs, over_quota=over_reasons(current),
                    gpu_allowance=gpu_allowance(current))
    return schedule(snap, Policy(), now)


def test_gpus_at_once_is_checked_per_start_inside_one_pass() -> None:
    quota = Quota("user", "alice", "gpus", "none", 4)
    plan = pass_with([job(1, 2), job(2, 2), job(3, 1), job(4, 1, user="bob")], [quota], {})
    assert {s.job_id for s in plan.starts} == {1, 2, 4}
    reason = plan.reasons[3]
    assert reason.code is ReasonCode.QUOTA
    assert reason.message == ("waits: user alice may hold 4 GPUs at once and 0 of them are "
                              "free; it needs 1")
    assert reason.until is None  # it waits for one of alice's jobs to end


def test_gpus_at_once_counts_what_already_runs_and_lets_smaller_jobs_by() -> None:
    quota = Quota("project", "vision", "gpus", "none", 4)
    plan = pass_with([job(1, 2, project="vision"), job(2, 1, project="vision")], [quota],
                     {("project", "vision"): 3.0})
    assert [s.job_id for s in plan.starts] == [2]
    assert plan.reasons[1].code is ReasonCode.QUOTA


def test_an_owner_over_gpu_hours_starts_nothing_but_others_and_cpu_jobs_do() -> None:
    now = ts("2026-11-28T12:00:00")
    current = standings([VISION_WEEK], [run("a", "vision", 8, "2026-11-27T00:00:00",
                                            "2026-11-28T00:00:00")], {}, now)
    cpu = PendingJob(3, 0, 3, 0, user="alice", project="vision")
    snap = Snapshot(gpus=gpus(2), pending=[job(1, 1, project="vision"), job(2, 1), cpu],
                    over_quota=over_reasons(current), gpu_allowance=gpu_allowance(current))
    plan = schedule(snap, Policy(), now)
    assert {s.job_id for s in plan.starts} == {2, 3}
    assert plan.reasons[1].code is ReasonCode.QUOTA
    assert plan.reasons[1].until == ts("2026-11-30T00:00:00")
    assert 1 not in plan.queue_position  # not waiting for GPUs: not in the GPU queue


def test_no_quotas_no_gate() -> None:
    snap = Snapshot(gpus=gpus(1), pending=[job(1, 1)])
    assert [s.job_id for s in schedule(snap, Policy(), 0.0).starts] == [1]
