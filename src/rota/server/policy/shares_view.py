"""``rota share`` and ``rota priority`` answers, from the daemon's fair-share standing."""

from __future__ import annotations

from typing import Any

from rota.core.fairshare import Factors, FairShare, Standing, Weights
from rota.core.snapshot import PendingJob
from rota.core.usage import UsageRecord, totals

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S


def shares_answer(standing: Standing, recent: list[UsageRecord], *, now: float,
                  fair_share: bool, half_life: float) -> dict[str, Any]:
    """``recent``: the attempts of the last week (undecayed day and week GPU-hours)."""
    day: dict[tuple[str, str | None], tuple[float, float]] = {}
    week: dict[tuple[str, str | None], tuple[float, float]] = {}
    for since, into in ((now - DAY_S, day), (now - WEEK_S, week)):
        into.update({("user", k): v for k, v in totals(recent, lambda r: r.user, since, now,
                                                       now).items()})
        into.update({("project", k): v for k, v in totals(
            recent, lambda r: r.project, since, now, now).items() if k})
    accounts = []
    for kind, table in (("user", standing.users), ("project", standing.projects)):
        for name, f in sorted(table.items()):
            accounts.append(_account(kind, f, day.get((kind, name), (0.0, 0.0))[0],
                                     week.get((kind, name), (0.0, 0.0))[0]))
    return {"fair_share": fair_share, "half_life": half_life, "accounts": accounts}


def _account(kind: str, f: FairShare, day_s: float, week_s: float) -> dict[str, Any]:
    eff = f.effective_share
    return {"kind": kind, "name": f.account, "shares": f.shares,
            "norm_shares": round(f.norm_shares, 6),
            "usage_gpu_hours": round(f.usage / 3600.0, 6),
            "norm_usage": round(f.norm_usage, 6),
            "effective": round(eff, 6) if eff != float("inf") else 1e9,
            "factor": round(f.factor, 6), "gpu_hours_day": round(day_s / 3600.0, 6),
            "gpu_hours_week": round(week_s / 3600.0, 6)}


def priority_answer(job_id: int, user: str, project: str | None, factors: Factors,
                    weights: Weights, *, fair_share: bool) -> dict[str, Any]:
    rows = [("priority", factors.priority, weights.priority),
            ("age", factors.age, weights.age), ("size", factors.size, weights.size),
            ("fair_share", factors.fair_share, weights.fair_share)]
    return {"id": job_id, "user": user, "project": project, "fair_share": fair_share,
            "factors": [{"name": n, "factor": round(f, 6), "weight": w,
                         "weighted": round(f * w, 6)} for n, f, w in rows],
            "total": round(factors.total, 6)}


def fair_share_wait(job: PendingJob, other: PendingJob, standing: Standing,
                    week_gpu_hours: float) -> str:
    """`rota why`'s words when fair share put a later job ahead of ``job``."""
    mine = standing.factor(job.user, job.project)
    theirs = standing.factor(other.user, other.project)
    text = (f"waits behind job {other.id} of {other.user}: {job.user}'s fair-share factor "
            f"{_lower(mine, theirs, other.user)}")
    account = standing.users.get(job.user)
    if account is not None:
        text += (f" ({job.user} used {week_gpu_hours:.1f} GPU-h of a "
                 f"{account.norm_shares:.0%} share this week)")
    return text


def _lower(mine: float, theirs: float, whose: str) -> str:
    """``0.48 < bob's 0.52``, with as many digits as it takes for the two to differ (two
    equal numbers with ``<`` between them read as a mistake); past 4, in words."""
    for digits in (2, 3, 4):
        a, b = f"{mine:.{digits}f}", f"{theirs:.{digits}f}"
        if a != b:  # rounding keeps the order, so a < b
            return f"{a} < {whose}'s {b}"
    return f"{mine:.2f}, slightly lower than {whose}'s"
