"""The job reads (list, get) and the error answers, shared by the daemon's API and by the
API workers that answer those reads from the store (see rota.server.api_worker)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from rota.core.lifecycle import JobState
from rota.errors import InvalidSpec, RotaError
from rota.server.views import attempt_view, job_view
from rota.store.repo import JobRecord, Store

PROBLEM = "application/problem+json"
MAX_ID = 2**63 - 1  # what every database's integer columns hold
JobId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="a job's id")]
#: the facts of each row that its stored state does not give (see rota.server.views)
FactsOf = Callable[[Sequence[JobRecord]], Awaitable[list[dict[str, Any]]]]


def problem(status: int, title: str, detail: str, field: str | None = None) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if field:
        body["field"] = field
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def answer_errors_as_problems(app: FastAPI) -> None:
    """Errors as problem+json naming the field at fault; never a traceback."""

    @app.exception_handler(RotaError)
    async def _rota_error(_: Request, e: RotaError) -> JSONResponse:
        return problem(e.http_status, type(e).__name__, str(e), getattr(e, "field", None))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"] if x != "body")
        return problem(422, "InvalidRequest", f"{loc}: {err['msg']}", loc)


def add_job_reads(v1: APIRouter, store: Store, facts_of: FactsOf) -> None:
    @v1.get("/jobs")
    async def list_jobs(state: list[str] = Query(default=[]), user: str | None = None,
                        name: str | None = None, project: str | None = None,
                        tag: str | None = None, limit: int = Query(200, ge=1, le=10000),
                        before: int | None = Query(None, ge=1, le=MAX_ID)) -> dict[str, Any]:
        for s in state:
            if s not in JobState.__members__.values():
                raise InvalidSpec(f"state: {s!r} is not one of "
                                  f"{[x.value for x in JobState]}", field="state")
        rows = store.list_jobs(states=state or None, user=user, name=name, project=project,
                               tag=tag, limit=limit, before_id=before)
        nxt = rows[-1].id if len(rows) == limit else None
        facts = await facts_of(rows)
        return {"jobs": [job_view(r, f) for r, f in zip(rows, facts, strict=True)],
                "next": nxt}

    @v1.get("/jobs/{job_id}")
    async def get_job(job_id: JobId) -> dict[str, Any]:
        row, attempts = store.job_with_attempts(job_id)
        [facts] = await facts_of([row])
        out = job_view(row, facts, detail=True)
        out["attempts_detail"] = [attempt_view(a) for a in attempts]
        return out
