"""The job reads (list, get), shared by the daemon's API and by the API workers that
answer those reads from the store (see rota.server.api_worker). Both put their source of
jobs in ``app.state.reads``: the daemon its Reads port, a worker a StoredJobs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, cast

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam

from rota.answers import JobDetailAnswer, JobListAnswer
from rota.core.lifecycle import JobState
from rota.server.api.problems import errors
from rota.server.api.views import attempt_view, job_view
from rota.server.ports import StoreReads
from rota.store.repo import JobRecord

MAX_ID = 2**63 - 1  # what every database's integer columns hold
JobId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="a job's id")]
#: the facts of each row that its stored state does not give (see rota.server.api.views)
FactsOf = Callable[[Sequence[JobRecord]], Awaitable[list[dict[str, Any]]]]


class JobSource(Protocol):
    """Stored rows and their live facts (rota.server.ports.Reads is one)."""

    @property
    def store(self) -> StoreReads: ...
    async def facts(self, rows: Sequence[JobRecord]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class StoredJobs:
    """An API worker's JobSource: the store, and the daemon asked for the live facts."""

    store: StoreReads
    facts: FactsOf


async def _source(request: Request) -> JobSource:
    return cast(JobSource, request.app.state.reads)


Source = Annotated[JobSource, Depends(_source)]
#: GET /v1/jobs and /v1/jobs/{job_id} (the prefix is in the route templates: metrics labels)
router = APIRouter(prefix="/v1")


@router.get("/jobs", responses=errors(401, 422, 503))
async def list_jobs(source: Source, state: list[JobState] = Query(default=[]),
                    user: str | None = None, name: str | None = None,
                    project: str | None = None, tag: str | None = None,
                    limit: int = Query(200, ge=1, le=10000),
                    before: int | None = Query(None, ge=1, le=MAX_ID),
                    ) -> Annotated[dict[str, Any], JobListAnswer]:
    """Newest first, a page of ``limit`` at a time: ``next`` is the ``before`` that asks
    for the next page (None on the last)."""
    rows = source.store.list_jobs(states=state or None, user=user, name=name,
                                  project=project, tag=tag, limit=limit, before_id=before)
    nxt = rows[-1].id if len(rows) == limit else None
    facts = await source.facts(rows)
    return {"jobs": [job_view(r, f) for r, f in zip(rows, facts, strict=True)],
            "next": nxt}


@router.get("/jobs/{job_id}", responses=errors(401, 404, 422, 503))
async def get_job(job_id: JobId,
                  source: Source) -> Annotated[dict[str, Any], JobDetailAnswer]:
    row, attempts = source.store.job_with_attempts(job_id)
    [facts] = await source.facts([row])
    out = job_view(row, facts, detail=True)
    out["attempts_detail"] = [attempt_view(a) for a in attempts]
    return out
