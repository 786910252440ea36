"""Jobs: submit, and what people do to a job (cancel, hold, release, preempt, requeue,
wait), why it is where it is, its events and how to attach to it."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, StrictBool

from rota.answers import (
    AttachAnswer,
    EventsAnswer,
    JobStateAnswer,
    RequeueAnswer,
    SubmitAnswer,
    WaitAnswer,
    WhyAnswer,
)
from rota.core.spec import JobSpec
from rota.errors import InvalidSpec
from rota.server.access.auth import UserNameText
from rota.server.api._shared import Caller, CommandsPort, JobId, Json, ReadsPort, own
from rota.server.api.problems import errors
from rota.server.api.views import event_view, job_view, why_view
from rota.server.ports import Reads


class SubmitBody(BaseModel):
    jobs: list[JobSpec] = Field(min_length=1, max_length=10_000)
    idempotency_key: str | None = Field(
        default=None, pattern=r"^[^#]{1,200}$",
        description="a retried submit with the same key gets the first one's jobs (no #: "
                    "the store keys a batch's later jobs KEY#1, KEY#2, ...)")
    dedup: StrictBool = Field(default=False, description="skip jobs identical to a live one")
    user: UserNameText | None = Field(default=None,
                                      description="submit as this user (admins only)")
    force: StrictBool = Field(default=False,
                        description="accept a job this machine cannot run now; it waits "
                                    "until the GPUs change")
    sweep: list[Annotated[str, Field(max_length=10_000)]] = Field(
        default_factory=list, max_length=32,
        description="a grid, as `rota submit --sweep` takes it: 'key=v1,v2' or 'key=1..5' "
                    "each; every job becomes one job per combination, named "
                    "NAME[key=value,...], its {key} placeholders filled")

    def expanded(self) -> list[JobSpec]:
        """The jobs, each expanded by the sweep's grid (the same as the CLI's)."""
        if not self.sweep:
            return self.jobs
        from rota.core.sweep import expand_sweep, parse_sweep_arg

        grid = [parse_sweep_arg(s) for s in self.sweep]
        count = len(self.jobs) * math.prod(len(values) for _, values in grid)
        if count > 10_000:  # said before any is made
            raise InvalidSpec(f"the sweep makes {count} jobs; at most 10000 are submitted "
                              "at once", field="sweep")
        return [one for spec in self.jobs for one in expand_sweep(spec, grid)]


#: a wait's default and longest hold, in seconds (the clients ask for 60 at a time)
WAIT_DEFAULT_S, WAIT_MAX_S = 60.0, 300.0

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


async def _view(reads: Reads, row: Any) -> dict[str, Any]:
    [facts] = await reads.facts([row])
    return job_view(row, facts)


@router.post("/jobs", status_code=201, responses=errors(400, 401, 403, 404, 409, 422, 503))
async def submit(body: SubmitBody, p: Caller, commands: CommandsPort,
                 reads: ReadsPort) -> Annotated[Json, SubmitAnswer]:
    """All or nothing: every job is checked before any is stored; an error about one of
    them starts ``jobs[i]: ``. A job this machine can never run as it is now (more GPUs
    or memory than it has) is refused unless ``force``."""
    if body.user and body.user != p.user:
        p.require_admin(f"submitting as {body.user!r}")
    done = commands.submit(body.expanded(), user=body.user or p.user, source="api",
                           idempotency_key=body.idempotency_key, dedup=body.dedup,
                           force=body.force)
    facts = await reads.facts(done.rows)
    out: dict[str, Any] = {"jobs": [job_view(row, f) for row, f in
                                    zip(done.rows, facts, strict=True)]}
    if done.warnings:
        out["warnings"] = done.warnings
    return out


@router.get("/jobs/{job_id}/events", responses=errors(401, 404, 422, 503))
async def events(job_id: JobId, reads: ReadsPort) -> Annotated[Json, EventsAnswer]:
    reads.job_state(job_id)  # NotFound if unknown
    return {"events": [event_view(e) for e in reads.store.events(job_id)]}


@router.get("/jobs/{job_id}/why", responses=errors(401, 404, 422, 503))
async def why(job_id: JobId, reads: ReadsPort) -> Annotated[Json, WhyAnswer]:
    """Why the job waits, or what it is doing, or how it ended, in a sentence."""
    return why_view(await _view(reads, reads.store.get_job(job_id)), reads.now())


@router.post("/jobs/{job_id}/cancel", responses=errors(401, 403, 404, 409, 422, 503))
async def cancel(job_id: JobId, p: Caller, commands: CommandsPort,
                 reads: ReadsPort) -> Annotated[Json, JobStateAnswer]:
    return {"id": job_id, "state": str(commands.cancel(own(reads, p, job_id, "cancel")))}


@router.post("/jobs/{job_id}/hold", responses=errors(401, 403, 404, 409, 422, 503))
async def hold(job_id: JobId, p: Caller, commands: CommandsPort,
               reads: ReadsPort) -> Annotated[Json, JobStateAnswer]:
    commands.hold(own(reads, p, job_id, "hold"))
    return {"id": job_id, "state": "held"}


@router.post("/jobs/{job_id}/release", responses=errors(401, 403, 404, 409, 422, 503))
async def release(job_id: JobId, p: Caller, commands: CommandsPort,
                  reads: ReadsPort) -> Annotated[Json, JobStateAnswer]:
    commands.release(own(reads, p, job_id, "release"))
    return {"id": job_id, "state": "pending"}


@router.post("/jobs/{job_id}/preempt", responses=errors(401, 403, 404, 409, 422, 503))
async def preempt(job_id: JobId, p: Caller, commands: CommandsPort,
                  reads: ReadsPort) -> Annotated[Json, JobStateAnswer]:
    """The stop handshake (its stop signal, its grace, then SIGKILL); once it has exited
    it waits again in its old place in the queue, and resumes from its checkpoint."""
    state = commands.preempt(own(reads, p, job_id, "preempt"))
    return {"id": job_id, "state": str(state)}


@router.post("/jobs/{job_id}/requeue", responses=errors(401, 403, 404, 409, 422, 503))
async def requeue(job_id: JobId, p: Caller, commands: CommandsPort,
                  reads: ReadsPort) -> Annotated[Json, RequeueAnswer]:
    """A running job is stopped and queued again; an ended one is submitted anew."""
    row = commands.requeue(own(reads, p, job_id, "requeue"))
    return {"requeued": job_id, "job": await _view(reads, row)}


@router.get("/jobs/{job_id}/wait", responses=errors(401, 404, 422, 503))
async def wait(job_id: JobId, commands: CommandsPort, reads: ReadsPort,
               timeout: float = Query(WAIT_DEFAULT_S, gt=0, le=WAIT_MAX_S, description=(
                   "seconds to hold the answer while the job runs")),
               ) -> Annotated[Json, WaitAnswer]:
    """A long poll: until the job ends, or ``timeout`` seconds (``done`` says which; ask
    again while it is false). Bounded so that no request holds a connection for hours."""
    state = await commands.wait_for_end(job_id, timeout)
    row = reads.store.get_job(job_id)
    return {"id": job_id, "state": str(state), "exit_code": row.exit_code,
            "done": state.terminal}


@router.get("/jobs/{job_id}/attach", responses=errors(401, 403, 404, 409, 422, 503))
async def attach(job_id: JobId, p: Caller, reads: ReadsPort) -> Annotated[Json, AttachAnswer]:
    argv = reads.attach_argv(own(reads, p, job_id, "attach to"))
    if argv is None:
        raise InvalidSpec(f"job {job_id} runs without a session; submit it with "
                          "--session tmux or --session screen to attach", field="session")
    return {"argv": argv}


