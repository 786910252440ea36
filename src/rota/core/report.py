"""Usage reports: GPU-hours and cost per group (user, project, pool, tier) and per period
(UTC calendar day, ISO week from Monday, calendar month), over the attempts' records.

An attempt spanning a bucket's boundary is split across the buckets it touches; a running
one counts up to ``now``. Pure: the records come from ``Store.usage``, ``now`` from the
caller; the sums are those of rota.core.usage, so a report never disagrees with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Literal, NamedTuple, get_args

from rota.core.usage import UsageRecord
from rota.errors import InvalidSpec

Period = Literal["day", "week", "month"]
By = Literal["user", "project", "pool", "tier"]
PERIODS: tuple[str, ...] = get_args(Period)
GROUPS: tuple[str, ...] = get_args(By)
#: the group of a record with no project, no pool (this machine) or no tier
NONE = "-"


def report_time(text: str, what: str) -> float:
    """A date (2026-11-28: its UTC midnight), an ISO time (UTC unless it says) or epoch
    seconds; InvalidSpec naming ``what`` otherwise."""
    s = text.strip()
    try:
        t = float(s)
    except ValueError:
        pass
    else:
        if math.isfinite(t) and 0 <= t < 1e11:
            return t
    try:
        d = datetime.fromisoformat(s)
    except ValueError:
        raise InvalidSpec(f"{what}: cannot read {text!r} as a date (2026-11-28), a time "
                          "(2026-11-28T12:00) or epoch seconds", field=what) from None
    t = (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()
    if not 0 <= t < 1e11:  # buckets and the default span stay inside datetime's years
        raise InvalidSpec(f"{what}: {text!r} is before 1970 or too far ahead", field=what)
    return t


class ReportRow(NamedTuple):
    group: str
    bucket: str  # 2026-11-28, 2026-W48 (ISO week), 2026-11
    start: float  # the bucket's first second (UTC)
    gpu_hours: float
    cost: float
    # GPU-hours its attempts held idle GPUs (rota.core.idle): an attempt's stored idle
    # GPU-seconds spread over its run in proportion to the time it ran in each bucket (the
    # attempt keeps a total, not when each idle stretch was)
    wasted_gpu_hours: float = 0.0


def bucket_start(t: float, period: Period) -> float:
    """The start (UTC) of the day, ISO week (Monday) or month that holds ``t``."""
    d = datetime.fromtimestamp(t, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        d -= timedelta(days=d.weekday())
    elif period == "month":
        d = d.replace(day=1)
    return d.timestamp()


def next_bucket(start: float, period: Period) -> float:
    d = datetime.fromtimestamp(start, UTC)
    if period == "day":
        return (d + timedelta(days=1)).timestamp()
    if period == "week":
        return (d + timedelta(days=7)).timestamp()
    return d.replace(year=d.year + d.month // 12, month=d.month % 12 + 1).timestamp()


def bucket_label(start: float, period: Period) -> str:
    d = datetime.fromtimestamp(start, UTC)
    if period == "day":
        return d.strftime("%Y-%m-%d")
    if period == "week":
        year, week, _ = d.isocalendar()
        return f"{year}-W{week:02d}"
    return d.strftime("%Y-%m")


def group_of(record: UsageRecord, by: By) -> str:
    value = getattr(record, by)
    return NONE if value is None else str(value)


def report(records: Iterable[UsageRecord], *, by: By, period: Period, since: float,
           until: float, now: float) -> list[ReportRow]:
    """GPU-hours, cost and idle GPU-hours inside [since, until) per group and bucket, by
    bucket then group; groups with nothing in a bucket are left out."""
    sums: dict[tuple[float, str], tuple[float, float, float]] = {}
    for r in records:
        begin = max(r.started_at, since)
        end = min(r.ended_at if r.ended_at is not None else now, until)
        if end <= begin or not r.gpus:
            continue
        group = group_of(r, by)
        ran = r.gpus * ((r.ended_at if r.ended_at is not None else now) - r.started_at)
        idle_share = min(1.0, r.idle_seconds / ran) if r.idle_seconds and ran > 0 else 0.0
        b = bucket_start(begin, period)
        while b < end:
            nxt = next_bucket(b, period)
            seconds = r.gpus * (min(end, nxt) - max(begin, b))
            if seconds > 0:
                used, spent, idle = sums.get((b, group), (0.0, 0.0, 0.0))
                sums[(b, group)] = (used + seconds,
                                    spent + (seconds / 3600.0 * r.price if r.price else 0.0),
                                    idle + seconds * idle_share)
            b = nxt
    return [ReportRow(group, bucket_label(b, period), b, used / 3600.0, spent, idle / 3600.0)
            for (b, group), (used, spent, idle) in sorted(sums.items())]
