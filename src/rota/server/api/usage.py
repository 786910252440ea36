"""Tiers and usage reports: what a GPU-hour costs where, and what was used and spent."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from rota.answers import ReportAnswer, TiersAnswer
from rota.core.tiers import default_prices
from rota.server.api._shared import Caller, Json, ReadsPort
from rota.server.api.problems import errors
from rota.server.api.report_reads import report_answer, tiers_answer

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)

_TIME = "a date (2026-11-28, UTC midnight), an ISO time (UTC unless it says) or epoch seconds"
#: what ``since`` and ``until`` may look like: epoch seconds, or an ISO date with an optional
#: time and UTC offset, from 1970 on. A pattern cannot rule out February 29th of a
#: common year nor compare the two; the parser refuses those with a 422 naming the field.
_TIME_PATTERN = (r"^([0-9]{1,11}(\.[0-9]{1,9})?"
                 r"|(19[7-9][0-9]|[2-4][0-9]{3})-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"
                 r"|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-9]))"
                 r"([T ]([01][0-9]|2[0-3])(:[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?)?"
                 r"(Z|[+-]([01][0-9]|2[0-3]):?[0-5][0-9])?)?)$")


@router.get("/tiers", responses=errors(401))
async def tiers(reads: ReadsPort) -> Annotated[Json, TiersAnswer]:
    """Every tier with its limits and price per GPU-hour, cheapest first: a job gets the
    cheapest it fits unless it names one."""
    return tiers_answer(reads.tiers())


@router.get("/report", responses=errors(401, 422))
async def usage_report(
        p: Caller, reads: ReadsPort,
        by: Literal["user", "project", "pool", "tier"] = Query("user"),
        period: Literal["day", "week", "month"] = Query(
            "day", description="UTC calendar days, ISO weeks (from Monday) or months"),
        since: str | None = Query(None, pattern=_TIME_PATTERN, description=(
            f"{_TIME}; default: 30 days, 12 weeks or a year back, from its bucket's start")),
        until: str | None = Query(None, pattern=_TIME_PATTERN,
                                  description=f"{_TIME}; default: now"),
        ) -> Annotated[Json, ReportAnswer]:
    """GPU-hours and cost (GPUs x run time x the price each attempt recorded at its start)
    per group and period bucket; running attempts count up to now, and one spanning a
    bucket's boundary is split. A user sees their own jobs' usage; an admin everyone's."""
    return report_answer(reads.store, user=None if p.admin else p.user, by=by,
                         period=period, since=since, until=until, now=reads.now(),
                         prices_default=default_prices(reads.tiers()))
