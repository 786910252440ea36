"""The answers of GET /v1/tiers and GET /v1/report: the tiers as settings declare them, and
usage per group and period summed from the attempts' records (rota.core.report)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from rota.core.report import By, Period, bucket_start, report, report_time
from rota.core.tiers import Tier, default_prices
from rota.errors import InvalidSpec
from rota.server.ports import StoreReads

#: how far back a report reaches when no ``since`` is given, per period
DEFAULT_SPAN = {"day": timedelta(days=30), "week": timedelta(weeks=12),
                "month": timedelta(days=365)}


def tiers_answer(tiers: Mapping[str, Tier]) -> dict[str, Any]:
    """Every tier, cheapest first (the order a job's tier is chosen in)."""
    rows = [{"name": name, **tier.model_dump()} for name, tier in tiers.items()]
    rows.sort(key=lambda t: (t["price"], t["time_limit"] or float("inf"), t["name"]))
    return {"tiers": rows, "default_prices": default_prices(tiers)}


def report_answer(store: StoreReads, *, user: str | None, by: By, period: Period,
                  since: str | None, until: str | None, now: float,
                  prices_default: bool = False) -> dict[str, Any]:
    """GPU-hours and cost per group and bucket inside [since, until) (default: up to now,
    from the start of the bucket DEFAULT_SPAN back), of ``user``'s jobs (None: everyone's)."""
    end = report_time(until, "until") if until else now
    if since:
        begin = report_time(since, "since")
        if begin > end:  # an empty window (since == until) is an empty report
            raise InvalidSpec(f"since ({_iso(begin)}) is after until ({_iso(end)})",
                              field="since")
    else:  # the default span back from until; nothing before 1970 (until=0: an empty window)
        begin = min(end, bucket_start(max(0.0, end - DEFAULT_SPAN[period].total_seconds()),
                                      period))
    records = [r for r in store.usage(begin, end) if user is None or r.user == user]
    rows = report(records, by=by, period=period, since=begin, until=end, now=now)
    totals: dict[str, list[float]] = {}
    for row in rows:
        t = totals.setdefault(row.group, [0.0, 0.0, 0.0])
        t[0] += row.gpu_hours
        t[1] += row.cost
        t[2] += row.wasted_gpu_hours
    return {"by": by, "period": period, "since": begin, "until": end, "now": now,
            "user": user,
            "rows": [row._asdict() for row in rows],
            "totals": [{"group": g, "gpu_hours": h, "cost": c, "wasted_gpu_hours": w}
                       for g, (h, c, w) in sorted(totals.items())],
            "default_prices": prices_default}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
