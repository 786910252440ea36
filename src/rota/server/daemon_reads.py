"""What the daemon's memory says of its jobs, GPUs and queue, for the API's answers: a job's
live facts (its state ahead of the store, its GPUs, why it waits, its tracker runs, what
its engine said), the GPUs with their jobs, and the queue in the order it will start.
Read on the daemon's loop thread by rota.server.daemon_ports."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, islice
from typing import TYPE_CHECKING, Any

from rota.core.fairshare import passed_by
from rota.core.lifecycle import JobState
from rota.core.plan import ReasonCode
from rota.core.snapshot import PendingJob
from rota.server.api.views import HELD, job_view, tracked, with_gpu_type
from rota.server.jobs.running import Running
from rota.server.policy.shares_view import WEEK_S, fair_share_wait
from rota.store.db import redact_url
from rota.store.repo import JobRecord

if TYPE_CHECKING:
    from rota.server.loop.daemon import Daemon


def live_facts(d: Daemon, row: JobRecord) -> dict[str, Any]:
    """What the daemon's memory knows of a job: its state (ahead of the store by at most a
    batch), its GPUs, why it waits, its tracker runs."""
    r = row._mapping
    job_id, spec = r["id"], r["spec"]
    known = d.live.states.get(job_id)
    state: str = r["state"] if known is None else known.value
    run = d.live.running.get(job_id)
    out: dict[str, Any] = {"state": state, "gpu_indices": list(run.gpus) if run else []}
    if tracked(r, d.settings.mlflow):
        tracking = d.tracking.view(job_id, spec, r["tracking"], r["progress"])
        if tracking:
            out["tracking"] = tracking
    if run is not None and run.backend.capabilities.engine:
        out.update(engine_facts(run))
    if run is not None and (idle := d.idle.facts(run, d.clock())) is not None:
        out["idle"] = idle
    if state == "held":
        out["reason"] = dict(HELD)
    elif state == "pending" and job_id in d.tracking.parked:
        out["reason"] = {"code": "tracker", "message": "waits for its MLflow run to be "
                         f"created in {redact_url(d.tracking.uri())}"}
    elif state == "pending" and (never := d.queue.never_reason(job_id)) is not None:
        out["reason"] = {"code": "unsatisfiable", "message": never}  # kept out of passes
    elif state == "pending":
        reason = d.last_plan.reason(job_id)
        if reason is None:
            out["reason"] = {"code": "not_scheduled", "message": "not yet looked at by a pass"}
        else:
            out["reason"] = {"code": str(reason.code),
                             "message": d.last_plan.reason_text(job_id),
                             "until": reason.until, "blocker": reason.blocker}
            # absolute time, or None: unknown (rota.core.backfill.start_estimates)
            out["estimated_start"] = d.last_plan.start_estimates.get(job_id)
            if d.fair.on and reason.code in _ORDER_WAITS:
                _name_fair_share(d, job_id, out["reason"])
    if state == "pending" and spec.get("gpu_type"):
        out["reason"] = with_gpu_type(out["reason"], spec)
    return out


#: the waits the queue's order can explain (not a dependency, a backoff or a drain)
_ORDER_WAITS = frozenset({ReasonCode.RESOURCES, ReasonCode.PRIORITY})


def _name_fair_share(d: Daemon, job_id: int, reason: dict[str, Any]) -> None:
    """Put fair share first in a waiting job's reason when it is why a job submitted later
    by someone else goes ahead of it."""
    job = d.queue.get(job_id)
    if job is None:
        return
    order = d.fair.ordered(d.queue, len(d.readings), d.running.keys())
    ahead = [*islice(iter(order), _place(order, job_id)),
             *(r.pending for r in d.running.values())]
    standing = d.fair.standing(d.running.keys())
    other = passed_by(job, ahead, standing)
    if other is None:
        return
    now = d.clock()
    week = sum(r.gpus * (min(r.ended_at or now, now) - max(r.started_at, now - WEEK_S))
               for r in d.store.usage(now - WEEK_S, now) if r.user == job.user) / 3600.0
    reason["message"] = f"{fair_share_wait(job, other, standing, week)}; {reason['message']}"


def _place(order: list[PendingJob], job_id: int) -> int:
    for n, j in enumerate(order):
        if j.id == job_id:
            return n
    return len(order)


def engine_facts(run: Running) -> dict[str, Any]:
    """What a cluster pool's engine last said of a job it holds: its id and state, and, while
    it waits there or ran its course, why, in the engine's words."""
    backend, handle = run.backend, run.handle
    status = getattr(backend, "status", None)
    last = status(handle) if status is not None and handle is not None else None
    engine_id = handle.extra.get("engine_id") if handle is not None else None
    out: dict[str, Any] = {"engine": {
        "backend": backend.name, "id": engine_id,
        "state": None if last is None else str(last.state),
        "reason": None if last is None else last.reason}}
    where = f"handed to {backend.name}" + (f" as job {engine_id}" if engine_id else "")
    if last is None or str(last.state) == "queued":
        said = f": {last.reason}" if last is not None and last.reason else ""
        out["reason"] = {"code": "engine", "message": f"{where}; it waits there{said}"}
    elif str(last.state) == "running":
        nodes = f" on {', '.join(last.nodes)}" if last.nodes else ""
        out["reason"] = {"code": "engine", "message": f"{where}; it runs there{nodes}"}
    return out


def gpu_views(d: Daemon) -> list[dict[str, Any]]:
    views = {v.index: v for v in d.gpu_views()}
    jobs: dict[int, list[int]] = {}
    for r in d.live.running.values():
        for i in r.gpus:
            jobs.setdefault(i, []).append(r.job_id)
    out = []
    for i, g in sorted(d.readings.items()):
        v = views[i]
        out.append({"index": i, "uuid": g.uuid, "name": g.name,
                    "memory_total": g.memory_total, "memory_used": g.memory_used,
                    "memory_external": v.memory_external, "utilization": g.utilization,
                    "allocated": v.allocated_milli / 1000, "reserved_memory": v.reserved_memory,
                    "jobs": sorted(jobs.get(i, [])), "paused": i in d.paused,
                    "healthy": g.healthy, "temperature_c": g.temperature_c,
                    "history": [list(pt) for pt in d.history.get(i, ())]})
    return out


def queue_answer(d: Daemon, *, limit: int, offset: int, counts: bool) -> dict[str, Any]:
    """The queue as the scheduler holds it: totals, and with ``limit`` the jobs that hold
    GPUs, then ``limit`` waiting ones from ``offset`` in the order they will start (this
    machine's, then each cluster pool's; those that never can, and those waiting for
    their MLflow run, last), then the oldest held.
    The ``counts`` per state read the whole jobs table (0.1-0.5 s for a million rows);
    the rest reads only the rows it shows."""
    engines = d.queue.engine_queues()
    waiting = (d.queue.ordered(), *(engines[p] for p in sorted(engines)), d.queue.aside(),
               [d.tracking.parked[i] for i in sorted(d.tracking.parked)])
    total = sum(map(len, waiting))
    out: dict[str, Any] = {
        "pending": total, "running": len(d.live.running),
        "held": d.store.count_in_state(JobState.HELD.value),
        "reservations": [{"job": r.job_id, "gpus": list(r.gpu_indices)}
                         for r in d.last_plan.reservations],
        "offset": offset, "limit": limit,
        "next_offset": offset + limit if limit and offset + limit < total else None}
    if counts:
        out["counts"] = d.store.count_by_state()
    if not limit:
        return out
    page = [j.id for j in islice(chain.from_iterable(  # slices of at most limit each
        seq[max(0, offset - skip):max(0, offset - skip) + limit]
        for seq, skip in _starts(waiting)), limit)]
    held = d.store.list_jobs(states=["held"], limit=limit)[::-1]  # oldest first
    rows = d.store.jobs([*d.live.running, *page])
    views = [job_view(r, live_facts(d, r)) for r in [*rows.values(), *held]]
    by_id = {v["id"]: v for v in views}
    out["running_jobs"] = [by_id[i] for i in sorted(d.live.running) if i in by_id]
    out["waiting_jobs"] = [by_id[i] for i in page if i in by_id]
    out["held_jobs"] = views[len(rows):]
    return out


def _starts(seqs: Sequence[Sequence[Any]]) -> list[tuple[Sequence[Any], int]]:
    """Each sequence with the number of items before it in their concatenation."""
    out, before = [], 0
    for seq in seqs:
        out.append((seq, before))
        before += len(seq)
    return out
