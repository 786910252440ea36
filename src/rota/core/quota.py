"""Quotas and budgets: who is over, and why, in words. Pure.

A quota caps one owner (a user or a project) on one measure: GPUs held at once, GPU-hours,
or money, the last two over a UTC calendar period (a day from 00:00, a week from Monday
00:00, a month from the 1st) or for all time. Usage comes from the attempts
(rota.core.usage): never a counter of its own. The server reads the records, the clock
comes in as ``now``.

Two checks come out of it: owners over a GPU-hours or money quota get a reason (with the
reset time as ``until``, so the daemon wakes then), and every owner with a GPUs-at-once
quota gets the GPUs (in thousandths) it may still start, which the pass spends job by job
(rota.core.schedule).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from rota.core.plan import Reason, ReasonCode
from rota.core.snapshot import MILLI, PendingJob
from rota.core.usage import UsageRecord, cost, gpu_seconds

KINDS = ("user", "project")
MEASURES = ("gpus", "gpu_hours", "money")
PERIODS = ("none", "day", "week", "month")
THRESHOLDS = (50, 80, 100)  # percent of a quota at which an alert goes out

Owner = tuple[str, str]  # (kind, name): ("user", "alice"), ("project", "vision")


class Quota(NamedTuple):
    kind: str  # user | project
    name: str
    what: str  # gpus | gpu_hours | money
    period: str  # none | day | week | month (gpus: none)
    limit: float
    hard: bool = False  # a budget: at 100 % the owner's running jobs are stopped too
    lifted_until: float | None = None  # not enforced before this time

    @property
    def owner(self) -> Owner:
        return (self.kind, self.name)

    def lifted(self, now: float) -> bool:
        return self.lifted_until is not None and now < self.lifted_until


class Standing(NamedTuple):
    """One quota as it stands now."""

    quota: Quota
    used: float  # GPUs held, GPU-hours or money, in the quota's own unit
    since: float  # the period's start (0 for all time)
    resets_at: float | None  # the next period's start; None for all time

    @property
    def percent(self) -> float:
        return 100.0 * self.used / self.quota.limit if self.quota.limit > 0 else 100.0

    @property
    def over(self) -> bool:
        return self.used >= self.quota.limit


def period_window(period: str, now: float) -> tuple[float, float | None]:
    """[start, end) of the UTC calendar period holding ``now``; (0, None) for all time."""
    if period == "none":
        return 0.0, None
    t = datetime.fromtimestamp(now, UTC)
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start, end = day, day + timedelta(days=1)
    elif period == "week":
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    elif period == "month":
        start = day.replace(day=1)
        end = (start.replace(year=start.year + 1, month=1) if start.month == 12
               else start.replace(month=start.month + 1))
    else:
        raise ValueError(f"unknown quota period {period!r}; use one of {', '.join(PERIODS)}")
    return start.timestamp(), end.timestamp()


def reset_words(period: str, resets_at: float) -> str:
    """'resets tomorrow 00:00 UTC', 'resets Monday 00:00 UTC', 'resets 1 Dec 00:00 UTC'."""
    t = datetime.fromtimestamp(resets_at, UTC)
    if period == "day":
        return "resets tomorrow 00:00 UTC"
    if period == "week":
        return f"resets {t:%A} 00:00 UTC"
    return f"resets {t.day} {t:%b} 00:00 UTC"


_UNIT = {"gpus": "GPUs", "gpu_hours": "GPU-hours", "money": "budget"}
_SPAN = {"day": "today", "week": "this week", "month": "this month", "none": "in all"}


def describe(s: Standing) -> str:
    """'project vision used 96.0 of its 96 GPU-hours this week; resets Monday 00:00 UTC'."""
    q = s.quota
    who = f"{q.kind} {q.name}"
    if q.what == "gpus":
        return f"{who} holds {s.used:g} of its {q.limit:g} GPUs at once"
    if q.what == "money":
        text = f"{who} spent {s.used:.2f} of its {q.limit:g} budget {_SPAN[q.period]}"
    else:
        used = f"{s.used:.1f}" if s.used >= 1 else f"{s.used:.2g}"
        text = f"{who} used {used} of its {q.limit:g} GPU-hours {_SPAN[q.period]}"
    if s.resets_at is not None:
        text += f"; {reset_words(q.period, s.resets_at)}"
    return text


def workspace_owner(user: str, project: str | None) -> Owner:
    """A workspace, as an owner the pass may find over its (size) quota: its jobs wait."""
    return ("workspace", f"{user}/{project or 'default'}")


def owners_of(record_user: str, record_project: str | None) -> tuple[Owner, ...]:
    user: Owner = ("user", record_user)
    return (user, ("project", record_project)) if record_project else (user,)


def standings(quotas: Iterable[Quota], records: Iterable[UsageRecord],
              running_gpus: Mapping[Owner, float], now: float) -> list[Standing]:
    """Every quota that is in force at ``now`` (lifted ones left out), with its usage."""
    active = [q for q in quotas if not q.lifted(now)]
    records = list(records)
    out = []
    for q in active:
        if q.what == "gpus":
            out.append(Standing(q, running_gpus.get(q.owner, 0.0), 0.0, None))
            continue
        since, until = period_window(q.period, now)
        end = until if until is not None else now + 1.0
        measure = gpu_seconds if q.what == "gpu_hours" else cost
        used = sum(measure(r, since, end, now) for r in records
                   if q.owner in owners_of(r.user, r.project))
        out.append(Standing(q, used / 3600.0 if q.what == "gpu_hours" else used, since, until))
    return out


def over_reasons(current: Iterable[Standing]) -> dict[Owner, Reason]:
    """Owners over a GPU-hours or money quota: none of their GPU jobs may start. The
    reason's ``until`` is the reset (None for an all-time quota: it waits for an admin)."""
    out: dict[Owner, Reason] = {}
    for s in current:
        if s.quota.what == "gpus" or not s.over:
            continue
        old = out.get(s.quota.owner)
        # the latest reset wins: the owner waits until every quota it is over has reset
        if old is None or (old.until is not None
                           and (s.resets_at is None or s.resets_at > old.until)):
            out[s.quota.owner] = Reason(ReasonCode.QUOTA, f"waits: {describe(s)}",
                                        until=s.resets_at)
    return out


def gpu_allowance(current: Iterable[Standing]) -> dict[Owner, tuple[int, float]]:
    """Owners with a GPUs-at-once quota: (GPUs they may still start, in thousandths, and
    the limit). The lowest limit wins when an owner has two."""
    out: dict[Owner, tuple[int, float]] = {}
    for s in current:
        if s.quota.what != "gpus":
            continue
        left = max(0, round((s.quota.limit - s.used) * MILLI))
        old = out.get(s.quota.owner)
        if old is None or left < old[0]:
            out[s.quota.owner] = (left, s.quota.limit)
    return out


def hard_over(current: Iterable[Standing]) -> dict[Owner, str]:
    """Owners at 100 % of a hard budget: their running jobs are to stop. Owner -> why."""
    return {s.quota.owner: describe(s) for s in current
            if s.quota.hard and s.quota.what != "gpus" and s.over}


def crossed(s: Standing) -> list[int]:
    """The alert thresholds (50, 80, 100 %) this standing has reached."""
    return [t for t in THRESHOLDS if s.percent >= t]


def alert_key(s: Standing, threshold: int) -> str:
    """Names one alert once: quota, period and threshold (the store keeps the sent ones)."""
    q = s.quota
    return f"{q.kind}:{q.name}:{q.what}:{q.period}:{s.since:.0f}:{threshold}"


class QuotaGate:
    """The quota checks of one pass, per start: a job starts only if its owners are under
    their usage quotas and have GPUs left under their GPUs-at-once quota; each start spends
    its GPUs, so one pass never takes an owner over its limit."""

    def __init__(self, over: Mapping[Owner, Reason],
                 allowance: Mapping[Owner, tuple[int, float]],
                 held: Mapping[int, Reason] | None = None) -> None:
        self.over = over
        self.held = held or {}
        self.left = {owner: left for owner, (left, _) in allowance.items()}
        self.limits = {owner: limit for owner, (_, limit) in allowance.items()}

    def check(self, job: PendingJob) -> Reason | None:
        """Why ``job`` may not start now, if it may not: its workspace is over its size
        quota (any job that gets it), or, for a job that takes GPUs, one of its owners is
        over a quota; first, what holds it outside the pass (its datasets being fetched)."""
        if self.held:
            reason = self.held.get(job.id)
            if reason is not None:
                return reason
        if self.over and job.workspace:
            held = self.over.get(workspace_owner(job.user, job.project))
            if held is not None:
                return held
        if not job.gpus_milli:
            return None  # the other quotas count GPUs
        for owner in owners_of(job.user, job.project):
            reason = self.over.get(owner)
            if reason is not None:
                return reason
            left = self.left.get(owner)
            if left is not None and job.gpus_milli > left:
                limit = self.limits[owner]
                return Reason(ReasonCode.QUOTA,
                              f"waits: {owner[0]} {owner[1]} may hold {limit:g} GPUs at once "
                              f"and {left / MILLI:g} of them are free; it needs "
                              f"{job.gpus_milli / MILLI:g}")
        return None

    def spend(self, job: PendingJob) -> None:
        for owner in owners_of(job.user, job.project):
            if owner in self.left:
                self.left[owner] -= job.gpus_milli
