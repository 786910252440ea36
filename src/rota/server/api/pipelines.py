"""Pipelines (rota.server.schedules.pipelines): added, paused, resumed, run now and removed through
the daemon's commands (it stays the one writer); their rounds read from the store."""

from __future__ import annotations

import os
from typing import Annotated, Any, cast

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from rota.answers import (
    GradientsWinnerAnswer,
    PipelineAnswer,
    PipelineDetailAnswer,
    PipelineRemovedAnswer,
    PipelineRoundAnswer,
    PipelinesAnswer,
    RoundFactsAnswer,
)
from rota.errors import NotFound
from rota.server.access.auth import Principal
from rota.server.api._shared import Caller, CommandsPort, Json, ReadsPort
from rota.server.api.problems import errors
from rota.server.ports import Reads
from rota.store.repo import PipelineRecord, RoundRecord

#: an evaluation config is a page of YAML; past this it is not one
MAX_EVAL_CONFIG = 1 << 20

router = APIRouter(prefix="/v1")
Name = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                           description="the pipeline's name")]


class AddBody(BaseModel):
    """A pipeline file: Rota's form (one pipeline) or a Gradients config.yaml (a pipeline
    per task; ``task`` picks one)."""

    model_config = ConfigDict(extra="forbid")
    config: str = Field(min_length=1, max_length=1_000_000,
                        description="the file's YAML as written (rota.pipeline.config)")
    path: str = Field(default="", max_length=4096,
                      description="the file it was read from: relative paths are its "
                                  "folder's, and messages name it")
    task: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                             description="only this task of a Gradients config.yaml")


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="paused", min_length=1, max_length=500)


@router.post("/pipelines", status_code=201, responses=errors(400, 401, 403, 409, 422, 503))
async def add(body: AddBody, p: Caller, reads: ReadsPort,
              commands: CommandsPort) -> Annotated[Json, PipelinesAnswer]:
    """Add the file's pipelines, owned by the caller, all or none; each bad field is named
    with its path and line. The first round of each is due now (a Gradients task without
    ``enabled: true`` is added paused)."""
    from rota.errors import InvalidSpec
    from rota.pipeline.config import load_text, resolve_paths

    configs = load_text(body.config, where=body.path)
    if body.task is not None:
        configs = [c for c in configs if c.name == body.task]
        if not configs:
            raise InvalidSpec(f"task: the file has no task {body.task!r}", field="task")
    folder = os.path.dirname(body.path) if body.path else None
    # the paths it names are looked at, and read, with the caller's rights only
    files = reads.user_files(p.user)
    configs = [files.run(resolve_paths, c, folder) for c in configs]
    for c in configs:  # an evaluation config of its own: read and checked now
        if c.evaluate.config is not None:
            from rota.eval.config import load_text as load_eval

            path = c.evaluate.config
            try:
                text = files.read_bytes(path, MAX_EVAL_CONFIG).decode("utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise InvalidSpec(f"evaluate.config: {path}: cannot read it: "
                                  f"{getattr(e, 'strerror', None) or e}",
                                  field="evaluate.config") from None
            load_eval(text, where=path)
    pools = {x["name"]: x for x in (await reads.pools())["pools"]}
    for c in configs:
        for part in ("train", "merge", "evaluate"):
            pool = getattr(c, part).pool
            if pool is None:
                continue
            if pool not in pools:
                raise InvalidSpec(f"{part}.pool: no pool {pool!r}; the pools are: "
                                  f"{', '.join(sorted(pools))}", field=f"{part}.pool")
            if pools[pool].get("engine") == "kubernetes":
                raise InvalidSpec(f"{part}.pool: {pool} is a Kubernetes pool, whose pods do "
                                  "not see this machine's disk, where a round's steps share "
                                  "their folder: choose a pool on this machine or one that "
                                  "shares its disk (Slurm, Ray)", field=f"{part}.pool")
    rows = commands.add_pipelines(configs, user=p.user, text=body.config, path=body.path)
    return {"pipelines": [pipeline_view(r, reads) for r in rows]}


@router.get("/pipelines", responses=errors(401, 503))
async def pipelines(p: Caller, reads: ReadsPort) -> Annotated[Json, PipelinesAnswer]:
    """The caller's pipelines (an admin's: everyone's), oldest first."""
    rows = reads.store.pipelines(user=None if p.admin else p.user)
    return {"pipelines": [pipeline_view(r, reads) for r in rows]}


@router.get("/pipelines/{name}", responses=errors(401, 403, 404, 422, 503))
async def pipeline(name: Name, p: Caller, reads: ReadsPort,
                   limit: int = Query(50, ge=1, le=10_000,
                                      description="rounds, newest first")
                   ) -> Annotated[Json, PipelineDetailAnswer]:
    """One pipeline, its rounds (newest first) with their steps' jobs and lineage."""
    row = _visible(reads, p, name)
    rounds = reads.store.rounds(row.id, limit=limit)
    return {"pipeline": pipeline_view(row, reads),
            "rounds": [round_view(r, reads) for r in rounds]}


@router.post("/pipelines/{name}/pause", responses=errors(400, 401, 403, 404, 422, 503))
async def pause(name: Name, p: Caller, reads: ReadsPort, commands: CommandsPort,
                body: PauseBody | None = None) -> Annotated[Json, PipelineAnswer]:
    """No new round begins until resumed (an open round finishes)."""
    _owned(reads, p, name, "pausing")
    return pipeline_view(commands.pause_pipeline(name, (body or PauseBody()).reason), reads)


@router.post("/pipelines/{name}/resume", responses=errors(401, 403, 404, 422, 503))
async def resume(name: Name, p: Caller, reads: ReadsPort,
                 commands: CommandsPort) -> Annotated[Json, PipelineAnswer]:
    """Rounds begin again at their time (one overdue begins now)."""
    _owned(reads, p, name, "resuming")
    return pipeline_view(commands.resume_pipeline(name), reads)


@router.post("/pipelines/{name}/run-now", responses=errors(401, 403, 404, 409, 422, 503))
async def run_now(name: Name, p: Caller, reads: ReadsPort,
                  commands: CommandsPort) -> Annotated[Json, PipelineAnswer]:
    """The next round now (409 while one is open: rounds never overlap)."""
    _owned(reads, p, name, "running")
    return pipeline_view(commands.run_pipeline_now(name), reads)


@router.delete("/pipelines/{name}", responses=errors(401, 403, 404, 422, 503))
async def remove(name: Name, p: Caller, reads: ReadsPort,
                 commands: CommandsPort) -> Annotated[Json, PipelineRemovedAnswer]:
    """The pipeline and its rounds' records; an open round's jobs are cancelled (ended
    rounds' jobs and the models they made stay)."""
    _owned(reads, p, name, "removing")
    cancelled = commands.remove_pipeline(name)
    return {"name": name, "removed": True, "cancelled_round": cancelled}


def _visible(reads: Reads, p: Principal, name: str) -> PipelineRecord:
    row = reads.store.pipeline(name)
    if not p.admin and row.user != p.user:
        raise NotFound(f"no pipeline {name!r}")  # another's is not shown to exist
    return row


def _owned(reads: Reads, p: Principal, name: str, what: str) -> None:
    p.require_owner(_visible(reads, p, name).user, f"{what} pipeline {name}")


def _state(reads: Reads, job: int) -> str:
    try:
        return reads.job_state(job).value
    except NotFound:
        return "gone"


def pipeline_view(r: PipelineRecord, reads: Reads) -> dict[str, Any]:
    """One pipeline as PipelineAnswer, with what it does now in words."""
    from rota.pipeline.timing import when

    open_ = reads.store.rounds(r.id, state="running", limit=1)
    cfg = r.config
    if open_:
        rd = open_[0]
        job = (rd.jobs or {}).get(rd.step)
        state, why = "running", (f"round {rd.number} is at step {rd.step}" + (
            f" (job {job}, {_state(reads, job)})" if job is not None else ""))
    elif r.paused:
        state, why = "paused", f"paused: {r.paused_reason or 'no reason given'}"
    elif r.next_at is not None:
        state, why = "waiting", f"round {r.rounds + 1} at {when(r.next_at)}: {r.next_why}"
    else:
        state, why = "waiting", "no round is due"
    return {"id": r.id, "name": r.name, "user": r.user, "format": r.format,
            "config_path": r.config_path, "train": cfg["train"]["where"],
            "metric": cfg["evaluate"]["metric"], "paused": r.paused,
            "paused_reason": r.paused_reason, "state": state, "why": why,
            "next_at": r.next_at, "base_model": r.base_model, "base_round": r.base_round,
            "base_metric": r.base_metric, "rounds": r.rounds, "failures": r.failures,
            "created_at": r.created_at}


def round_view(r: RoundRecord, reads: Reads) -> PipelineRoundAnswer:
    jobs = {k: int(v) for k, v in (r.jobs or {}).items()}
    return {"number": r.number, "state": r.state, "step": r.step, "reason": r.reason,
            "jobs": jobs, "job_states": {k: _state(reads, v) for k, v in jobs.items()},
            "folder": r.folder, "data_hash": r.data_hash, "chunk": r.chunk,
            "chunks": r.chunks, "base_model": r.base_model, "adapter": r.adapter,
            "merged_model": r.merged_model, "remote_task": r.remote_task,
            "metric": r.metric, "base_metric": r.base_metric, "facts": _facts(r.facts),
            "due_at": r.due_at, "started_at": r.started_at, "ended_at": r.ended_at}



def _facts(stored: dict[str, Any] | None) -> RoundFactsAnswer:
    """The steps' reports as RoundFactsAnswer: known keys, of the right kinds (a step's
    result file is the job's writing)."""
    out: dict[str, Any] = {}
    for k, v in (stored or {}).items():
        if k in ("rows", "train_rows", "heldout_rows", "chunk_rows", "merged_bytes"):
            out[k] = v if isinstance(v, int) and not isinstance(v, bool) else None
        elif k in ("published", "task_id"):
            out[k] = None if v is None else str(v)
        elif k == "winner":
            out[k] = _winner(v)
    return cast(RoundFactsAnswer, out)


def _winner(v: Any) -> GradientsWinnerAnswer | None:
    if not isinstance(v, dict) or not isinstance(v.get("repo"), str):
        return None

    def number(key: str) -> float | None:
        x = v.get(key)
        return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None

    hotkey = v.get("hotkey")
    return {"hotkey": hotkey if isinstance(hotkey, str) else None, "repo": v["repo"],
            "test_loss": number("test_loss"), "synth_loss": number("synth_loss"),
            "quality_score": number("quality_score")}
