"""How jobs, attempts and GPUs look in API answers. Secret env values never leave here."""

from __future__ import annotations

from typing import Any

from rota.core.lifecycle import TERMINAL
from rota.core.spec import JobSpec
from rota.server.daemon import Daemon
from rota.store.db import redact_url
from rota.store.repo import AttemptRecord, EventRecord, JobRecord

_HELD = {"code": "held", "message": "held: `rota release` lets it run"}
# states whose view the stored row gives whole (with no tracker): nothing about them is in
# the daemon's memory that the store lacks
_STORED_STATES = frozenset({"held", *(s.value for s in TERMINAL)})


def job_view(row: JobRecord, facts: dict[str, Any], *, detail: bool = False) -> dict[str, Any]:
    """A job as API answers show it: its stored row, with ``facts`` (its state, GPUs, why
    it waits, its tracker runs) from the daemon's memory (live_facts) or, for a job that
    needs none, from the row (stored_facts)."""
    # through the row's mapping: a Row's attribute lookup costs several times as much, and
    # a list answer builds this for every job on its page
    r = row._mapping
    spec = r["spec"]
    out: dict[str, Any] = {
        "id": r["id"], "name": r["name"] or " ".join(spec["command"])[:60],
        "command": spec["command"],
        "user": r["user"], "state": facts["state"], "priority": r["priority"],
        "gpus": r["gpus"], "gpu_mem": r["gpu_mem"], "created_at": r["created_at"],
        "started_at": r["started_at"], "ended_at": r["ended_at"], "attempts": r["attempts"],
        "exit_code": r["exit_code"], "end_reason": r["end_reason"], "source": r["source"],
        "session": spec.get("session", "none"), "time_limit": spec.get("time_limit"),
        "project": r["project"], "tags": spec.get("tags") or [],
        "gpu_indices": facts["gpu_indices"],
        "progress": progress_view(r["progress"]),
    }
    for key in ("tracking", "reason"):
        if key in facts:
            out[key] = facts[key]
    if detail:
        out["spec"] = JobSpec.model_validate(spec).redacted()
    return out


def _tracked(r: Any, mlflow_default: bool) -> bool:
    spec = r["spec"]
    return bool(r["tracking"] or spec.get("wandb") or spec.get("mlflow")
                or (mlflow_default and spec.get("mlflow") is None))


def needs_live_facts(row: JobRecord, mlflow_default: bool) -> bool:
    """Whether a job's view needs the daemon's memory (a job waiting, starting or running,
    or with a tracker run), not only its stored row."""
    r = row._mapping
    return r["state"] not in _STORED_STATES or _tracked(r, mlflow_default)


def stored_facts(row: JobRecord) -> dict[str, Any]:
    """The facts of a job that needs no live ones (see needs_live_facts), from its row."""
    state = row._mapping["state"]
    out: dict[str, Any] = {"state": state, "gpu_indices": []}
    if state == "held":
        out["reason"] = dict(_HELD)
    return out


def live_facts(d: Daemon, row: JobRecord) -> dict[str, Any]:
    """What the daemon's memory knows of a job: its state (ahead of the store by at most a
    batch), its GPUs, why it waits, its tracker runs."""
    r = row._mapping
    job_id, spec = r["id"], r["spec"]
    known = d.states.get(job_id)
    state: str = r["state"] if known is None else known.value
    run = d.running.get(job_id)
    out: dict[str, Any] = {"state": state, "gpu_indices": list(run.gpus) if run else []}
    if _tracked(r, d.settings.mlflow):
        tracking = d.tracking.view(job_id, spec, r["tracking"], r["progress"])
        if tracking:
            out["tracking"] = tracking
    if state == "held":
        out["reason"] = dict(_HELD)
    elif state == "pending" and job_id in d.tracking.parked:
        out["reason"] = {"code": "tracker", "message": "waits for its MLflow run to be "
                         f"created in {redact_url(d.tracking.uri())}"}
    elif state == "pending":
        reason = d.last_plan.reason(job_id)
        if reason is None:
            out["reason"] = {"code": "not_scheduled", "message": "not yet looked at by a pass"}
        else:
            out["reason"] = {"code": str(reason.code),
                             "message": d.last_plan.reason_text(job_id),
                             "until": reason.until, "blocker": reason.blocker}
    return out


def progress_view(p: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a job's output said about how far it has got (None until it said something)."""
    if not p or p.get("updated_at") is None:
        return None
    keys = ("attempt", "step", "total_steps", "epoch", "total_epochs", "fraction", "rate",
            "eta_s", "updated_at", "checkpoint")
    return {k: p.get(k) for k in keys}


def attempt_view(a: AttemptRecord) -> dict[str, Any]:
    return {"number": a.number, "gpus": a.gpu_indices, "fraction": a.milli / 1000,
            "gpu_mem": a.gpu_mem, "backend": a.backend, "started_at": a.started_at,
            "ended_at": a.ended_at, "exit_code": a.exit_code, "signal": a.signal,
            "outcome": a.outcome, "reason": a.reason, "peak_gpu_mem": a.peak_gpu_mem,
            "pid": (a.handle or {}).get("pid"), "session": (a.handle or {}).get("session_name")}


def event_view(e: EventRecord) -> dict[str, Any]:
    return {"ts": e.ts, "kind": e.kind, "from": e.from_state, "to": e.to_state,
            "message": e.message}


def gpu_views(d: Daemon) -> list[dict[str, Any]]:
    views = {v.index: v for v in d.gpu_views()}
    jobs: dict[int, list[int]] = {}
    for r in d.running.values():
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
