"""Evaluations: the runs of evaluation configs and their metrics (rota.server.api.eval_reads),
and the schedules that run them by themselves (rota.server.schedules.eval_schedules); `rota eval
submit` sends ordinary jobs (POST /v1/jobs), `rota eval render` a spec to
POST /v1/pools/{name}/render.

A schedule is added and removed through the daemon's commands (it stays the one writer);
the lists are read from the store."""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from rota.answers import (
    EvalResultsAnswer,
    EvalScheduleAnswer,
    EvalSchedulesAnswer,
    EvalUnscheduledAnswer,
)
from rota.errors import InvalidSpec
from rota.server.access.auth import Principal
from rota.server.api._shared import MAX_ID, Caller, CommandsPort, Json, ReadsPort, RowId, own
from rota.server.api.eval_reads import eval_runs, run_view
from rota.server.api.problems import errors
from rota.server.ports import Reads
from rota.store.repo import ScheduleRecord

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)
#: the shortest time between two runs of a schedule
EVERY_MIN_S = 1.0


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


# --- schedules -----------------------------------------------------------------------------
class ScheduleBody(BaseModel):
    """An evaluation config and exactly one trigger: ``every``, ``after_job`` or
    ``on_checkpoint``."""

    model_config = ConfigDict(extra="forbid")
    config: str = Field(min_length=1, max_length=1_000_000,
                        description="the config's YAML as written (rota.eval.config)")
    path: str = Field(default="", max_length=4096,
                      description="the file it was read from (messages, the runs' tags)")
    git_commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{7,64}$",
                                   description="the commit of the file's repository")
    git_dirty: StrictBool | None = Field(default=None,
                                         description="the file differs from that commit")
    pool: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9-]{0,39}$",
                             description="default: the config's compute.pool, else the "
                                         "daemon's default pool")
    every: str | StrictInt | StrictFloat | None = Field(
        default=None, description="a run every so often: seconds, or 30m, 6h, 1d")
    after_job: int | None = Field(default=None, ge=1, le=MAX_ID,
                                  description="one run once this job completes")
    on_checkpoint: int | None = Field(default=None, ge=1, le=MAX_ID,
                                      description="a run for each new checkpoint of this "
                                                  "job, whose model it is")


def _trigger(body: ScheduleBody, reads: Reads, p: Principal) -> dict[str, Any]:
    """The schedule's trigger as stored; exactly one is given, a watched job is the
    caller's (or the caller an admin)."""
    given = [k for k in ("every", "after_job", "on_checkpoint") if getattr(body, k) is not None]
    if len(given) != 1:
        raise InvalidSpec("give exactly one of every, after_job and on_checkpoint"
                          + (f" (not {' and '.join(given)})" if given else ""), field="every")
    if body.every is not None:
        every = _seconds(body.every)
        return {"kind": "every", "every_s": every, "next_at": reads.now() + every}
    job = cast(int, body.after_job or body.on_checkpoint)
    own(reads, p, job, "evaluating")
    return {"kind": "after_job" if body.after_job else "checkpoint", "job_id": job}


def _seconds(every: str | float) -> float:
    from rota.units import parse_duration

    seconds = parse_duration(every, field="every")
    if not seconds >= EVERY_MIN_S:
        raise InvalidSpec(f"every: at least {EVERY_MIN_S:g} s between runs", field="every")
    return float(seconds)


@router.post("/eval/schedules", status_code=201, responses=errors(400, 401, 403, 404, 422, 503))
async def schedule(body: ScheduleBody, p: Caller, reads: ReadsPort,
                   commands: CommandsPort) -> Annotated[Json, EvalScheduleAnswer]:
    """Evaluate by itself from now on, as the caller; the config is checked first (every
    bad field named by its path), and the pool must exist."""
    from rota.eval.config import load_text

    config = load_text(body.config, where=body.path)
    trigger = _trigger(body, reads, p)
    await _check_pool(reads, body.pool or config.compute.pool)
    row = commands.add_eval_schedule(
        user=p.user, name=config.name, config_text=body.config,
        config_path=body.path, git_commit=body.git_commit, git_dirty=body.git_dirty,
        pool=body.pool, **trigger)
    return schedule_view(row)


async def _check_pool(reads: Reads, pool: str | None) -> None:
    if pool is None:
        return
    names = {x["name"] for x in (await reads.pools())["pools"]}
    if pool not in names:
        raise InvalidSpec(f"pool: no pool {pool!r}; the pools are: {', '.join(sorted(names))}",
                          field="pool")


@router.get("/eval/schedules", responses=errors(401, 503))
async def schedules(p: Caller, reads: ReadsPort) -> Annotated[Json, EvalSchedulesAnswer]:
    """The caller's schedules (an admin's: everyone's), oldest first."""
    rows = reads.store.eval_schedules(user=None if p.admin else p.user)
    return {"schedules": [schedule_view(r) for r in rows]}


@router.delete("/eval/schedules/{schedule_id}", responses=errors(401, 403, 404, 422, 503))
async def unschedule(schedule_id: RowId, p: Caller, reads: ReadsPort,
                     commands: CommandsPort) -> Annotated[Json, EvalUnscheduledAnswer]:
    """No run of it is submitted from now on (jobs already submitted stay)."""
    p.require_owner(reads.store.eval_schedule(schedule_id).user,
                    f"removing evaluation schedule {schedule_id}")
    commands.remove_eval_schedule(schedule_id)
    return {"id": schedule_id, "removed": True}


def schedule_view(r: ScheduleRecord) -> dict[str, Any]:
    """One schedule as EvalScheduleAnswer."""
    return {"id": r.id, "user": r.user, "name": r.name, "config_path": r.config_path,
            "git_commit": r.git_commit, "pool": r.pool, "trigger": r.kind,
            "every_s": r.every_s, "next_at": r.next_at, "job_id": r.job_id,
            "evaluated": list(r.evaluated or []), "runs": r.runs, "last_job": r.last_job,
            "enabled": r.enabled, "disabled_reason": r.disabled_reason,
            "created_at": r.created_at}
