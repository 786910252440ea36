"""Usage reports: per group and per UTC day / ISO week / month, split at the boundaries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rota.core.report import bucket_start, next_bucket, report
from rota.core.usage import UsageRecord, totals


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def rec(user: str, start: str, end: str | None, *, gpus: float = 1.0, tier: str | None = None,
        price: float | None = None, project: str | None = None) -> UsageRecord:
    return UsageRecord(1, 1, user, project, None, "local", gpus, ts(start),
                       ts(end) if end else None, tier, price)


def test_an_attempt_spanning_midnight_is_split_in_two():
    r = rec("ann", "2026-11-27T22:00", "2026-11-28T03:00", gpus=2, tier="t", price=1.5)
    rows = report([r], by="user", period="day", since=0, until=ts("2027-01-01"),
                  now=ts("2026-12-01"))
    assert [(x.group, x.bucket, x.gpu_hours) for x in rows] == [
        ("ann", "2026-11-27", 4.0), ("ann", "2026-11-28", 6.0)]
    assert [x.cost for x in rows] == [pytest.approx(6.0), pytest.approx(9.0)]


def test_weeks_start_on_monday_utc():
    # 2026-11-30 is a Monday
    assert bucket_start(ts("2026-12-02T15:00"), "week") == ts("2026-11-30")
    assert bucket_start(ts("2026-11-30T00:00"), "week") == ts("2026-11-30")
    assert bucket_start(ts("2026-11-29T23:59"), "week") == ts("2026-11-23")
    r = rec("ann", "2026-11-29T23:00", "2026-11-30T01:00")
    rows = report([r], by="user", period="week", since=0, until=ts("2027-01-01"),
                  now=ts("2027-01-01"))
    assert [(x.bucket, x.gpu_hours) for x in rows] == [("2026-W48", 1.0), ("2026-W49", 1.0)]


def test_months_roll_over_the_year():
    assert next_bucket(ts("2026-12-01"), "month") == ts("2027-01-01")
    r = rec("ann", "2026-12-31T23:30", "2027-01-01T00:30", project="p")
    rows = report([r], by="project", period="month", since=0, until=ts("2028-01-01"),
                  now=ts("2028-01-01"))
    assert [(x.group, x.bucket, x.gpu_hours) for x in rows] == [("p", "2026-12", 0.5),
                                                                ("p", "2027-01", 0.5)]


def test_running_attempts_count_up_to_now_and_the_window_clips():
    running = rec("bob", "2026-11-28T10:00", None, gpus=0.5)
    done = rec("ann", "2026-11-28T08:00", "2026-11-28T12:00", tier="x", price=2.0)
    since, until, now = ts("2026-11-28T09:00"), ts("2026-11-29"), ts("2026-11-28T14:00")
    rows = report([running, done], by="tier", period="day", since=since, until=until, now=now)
    assert [(x.group, x.gpu_hours, x.cost) for x in rows] == [("-", 2.0, 0.0),
                                                              ("x", 3.0, 6.0)]
    # the same sums as core.usage's totals
    sums = totals([running, done], lambda r: r.tier, since, until, now)
    assert sums == {None: (2.0 * 3600, 0.0), "x": (3.0 * 3600, 6.0)}


def test_many_buckets_add_up_to_the_attempts_own_gpu_seconds():
    r = rec("ann", "2026-11-01T05:17", "2026-11-20T13:41", gpus=3, price=0.7)
    rows = report([r], by="user", period="day", since=0, until=ts("2027-01-01"),
                  now=ts("2027-01-01"))
    assert len(rows) == 20
    assert sum(x.gpu_hours for x in rows) == pytest.approx(3 * (r.ended_at - r.started_at)
                                                           / 3600, rel=1e-12)


def test_idle_gpu_hours_are_spread_over_the_run_and_summed_per_group():
    # 2 GPUs for 5 h across midnight, 3 of its 10 GPU-hours on idle GPUs: 30 % of each bucket
    idle = rec("ann", "2026-11-27T22:00", "2026-11-28T03:00", gpus=2)._replace(
        idle_seconds=3 * 3600.0)
    busy = rec("bob", "2026-11-28T01:00", "2026-11-28T02:00")
    rows = report([idle, busy], by="user", period="day", since=0, until=ts("2027-01-01"),
                  now=ts("2026-12-01"))
    assert [(x.group, x.bucket, x.gpu_hours, x.wasted_gpu_hours) for x in rows] == [
        ("ann", "2026-11-27", 4.0, pytest.approx(1.2)),
        ("ann", "2026-11-28", 6.0, pytest.approx(1.8)),
        ("bob", "2026-11-28", 1.0, 0.0)]
