"""The job reads (list, get), shared by the daemon's API and by the
API workers that answer those reads from the store (see rota.server.api_worker)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi import Path as PathParam

from rota.core.lifecycle import JobState
from rota.server.ports import StoreReads
from rota.server.problems import errors
from rota.server.views import attempt_view, job_view
from rota.store.repo import JobRecord

MAX_ID = 2**63 - 1  # what every database's integer columns hold
JobId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="a job's id")]
#: the facts of each row that its stored state does not give (see rota.server.views)
FactsOf = Callable[[Sequence[JobRecord]], Awaitable[list[dict[str, Any]]]]


def add_job_reads(v1: APIRouter, store: StoreReads, facts_of: FactsOf) -> None:
    @v1.get("/jobs", responses=errors(401, 422, 503))
    async def list_jobs(state: list[JobState] = Query(default=[]), user: str | None = None,
                        name: str | None = None, project: str | None = None,
                        tag: str | None = None, limit: int = Query(200, ge=1, le=10000),
                        before: int | None = Query(None, ge=1, le=MAX_ID)) -> dict[str, Any]:
        """Newest first, a page of ``limit`` at a time: ``next`` is the ``before`` that asks
        for the next page (None on the last)."""
        rows = store.list_jobs(states=state or None, user=user, name=name, project=project,
                               tag=tag, limit=limit, before_id=before)
        nxt = rows[-1].id if len(rows) == limit else None
        facts = await facts_of(rows)
        return {"jobs": [job_view(r, f) for r, f in zip(rows, facts, strict=True)],
                "next": nxt}

    @v1.get("/jobs/{job_id}", responses=errors(401, 404, 422, 503))
    async def get_job(job_id: JobId) -> dict[str, Any]:
        row, attempts = store.job_with_attempts(job_id)
        [facts] = await facts_of([row])
        out = job_view(row, facts, detail=True)
        out["attempts_detail"] = [attempt_view(a) for a in attempts]
        return out
