"""Evaluations: the runs of evaluation configs and their metrics (rota.server.eval_reads);
`rota eval submit` sends ordinary jobs (POST /v1/jobs), `rota eval render` a spec to
POST /v1/pools/{name}/render."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from rota.answers import EvalResultsAnswer
from rota.server.api._shared import Json, ReadsPort
from rota.server.eval_reads import eval_runs, run_view
from rota.server.problems import errors

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/eval/results", responses=errors(401, 422, 503))
async def results(reads: ReadsPort,
                  name: str | None = Query(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
                                           description="the config's name"),
                  model: str | None = Query(None, min_length=1, max_length=2000,
                                            description="the model as the config names it"),
                  task: str | None = Query(None, pattern=r"^[^\s,/]{1,200}$",
                                           description="only metrics named TASK/..., and "
                                                       "only runs that reported some"),
                  limit: int = Query(50, ge=1, le=1000),
                  ) -> Annotated[Json, EvalResultsAnswer]:
    """Evaluation runs (jobs tagged ``eval``), newest first, each with the last value of
    every metric its latest attempt reported."""
    runs = eval_runs(reads.store, name=name, model=model, task=task, limit=limit)
    facts = await reads.facts([row for row, _ in runs])
    return {"runs": [run_view(row, metrics, f["state"])
                     for (row, metrics), f in zip(runs, facts, strict=True)]}
