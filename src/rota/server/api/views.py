"""How jobs, attempts and events look in API answers, and why a job is where it is.
Secret env values never leave here. Nothing here reads the daemon: its live facts come in
as a dict (rota.server.daemon_ports builds them)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rota.core.job_names import command_name
from rota.core.lifecycle import TERMINAL
from rota.core.spec import JobSpec, wants_mlflow
from rota.store.repo import AttemptRecord, EventRecord, JobRecord
from rota.units import format_gpu_set

HELD = {"code": "held", "message": "held: `rota release` lets it run"}
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
        "id": r["id"], "name": r["name"] or command_name(spec["command"]),
        "command": spec["command"],
        "user": r["user"], "state": facts["state"], "priority": r["priority"],
        "gpus": r["gpus"], "gpu_mem": r["gpu_mem"], "created_at": r["created_at"],
        "started_at": r["started_at"], "ended_at": r["ended_at"], "attempts": r["attempts"],
        "exit_code": r["exit_code"], "end_reason": r["end_reason"], "source": r["source"],
        "session": spec.get("session", "none"), "time_limit": spec.get("time_limit"),
        "project": r["project"], "tags": spec.get("tags") or [],
        "pool": spec.get("pool"),
        "gpu_indices": facts["gpu_indices"],
        "progress": progress_view(r["progress"]),
    }
    for key in ("tracking", "reason", "engine", "estimated_start"):
        if key in facts:
            out[key] = facts[key]
    idle = facts.get("idle")  # a running job holding a GPU that stays idle (core.idle)
    out["idle_since"] = idle["since"] if idle else None
    if idle:
        out["idle"] = idle
    if detail:
        out["spec"] = JobSpec.stored(spec).redacted()
    return out


#: why a job waits for this machine's GPUs (rota.core.plan.ReasonCode)
_GPU_REASONS = frozenset({"resources", "priority", "unsatisfiable"})


def with_gpu_type(reason: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """A waiting job's reason with its GPU type named: on this machine the type became the
    job's allowed GPUs at submit, and the scheduler's words name those by index only."""
    gpu_type, allowed = spec.get("gpu_type"), spec.get("allowed_gpus")
    if not gpu_type or not allowed or reason.get("code") not in _GPU_REASONS:
        return reason
    which = f"GPU {allowed[0]}" if len(allowed) == 1 else f"GPUs {format_gpu_set(allowed)}"
    return {**reason, "message": f"{reason['message']}; of type {gpu_type} here: {which}"}


def tracked(r: Any, mlflow_default: bool) -> bool:
    """Whether a job (a row's mapping) has or will have a tracker run."""
    spec = r["spec"]
    return bool(r["tracking"] or spec.get("wandb")
                or wants_mlflow(spec.get("mlflow"), mlflow_default))


def needs_live_facts(row: JobRecord, mlflow_default: bool) -> bool:
    """Whether a job's view needs the daemon's memory (a job waiting, starting or running,
    or with a tracker run), not only its stored row."""
    r = row._mapping
    return r["state"] not in _STORED_STATES or tracked(r, mlflow_default)


def stored_facts(row: JobRecord) -> dict[str, Any]:
    """The facts of a job that needs no live ones (see needs_live_facts), from its row."""
    state = row._mapping["state"]
    out: dict[str, Any] = {"state": state, "gpu_indices": []}
    if state == "held":
        out["reason"] = dict(HELD)
    return out


def progress_view(p: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a job's output said about how far it has got (None until it said something)."""
    if not p or p.get("updated_at") is None:
        return None
    keys = ("attempt", "step", "total_steps", "epoch", "total_epochs", "fraction", "rate",
            "eta_s", "updated_at", "checkpoint", "loss")
    return {k: p.get(k) for k in keys}


def attempt_view(a: AttemptRecord) -> dict[str, Any]:
    return {"number": a.number, "gpus": a.gpu_indices, "fraction": a.milli / 1000,
            "gpu_mem": a.gpu_mem, "backend": a.backend, "started_at": a.started_at,
            "ended_at": a.ended_at, "exit_code": a.exit_code, "signal": a.signal,
            "outcome": a.outcome, "reason": a.reason, "peak_gpu_mem": a.peak_gpu_mem,
            "idle_seconds": a.idle_seconds,
            "pid": (a.handle or {}).get("pid") or None,
            "session": (a.handle or {}).get("session_name"),
            "engine_id": ((a.handle or {}).get("extra") or {}).get("engine_id")}


def event_view(e: EventRecord) -> dict[str, Any]:
    return {"ts": e.ts, "kind": e.kind, "from": e.from_state, "to": e.to_state,
            "message": e.message}


def clock_text(ts: float, now: float) -> str:
    """A moment as a person says it: 12:03 today, 2024-05-01 12:03 another day (local)."""
    when = datetime.fromtimestamp(ts)
    same_day = when.date() == datetime.fromtimestamp(now).date()
    return when.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M")


def estimate_text(ts: float) -> str:
    """A start estimate as `rota why` says it."""
    when = datetime.fromtimestamp(ts, tz=UTC).strftime("%H:%M UTC")
    return f"may start around {when} (estimate from time limits / predicted run times)"


def span_text(seconds: float) -> str:
    """A length of time as a person says it: 45s, 2m 10s, 3h 05m, 2d 4h."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {(s % 3600) // 60:02d}m"
    return f"{s // 86400}d {(s % 86400) // 3600}h"


def _gpus_text(gpus: list[int]) -> str:
    if len(gpus) == 1:
        return f"GPU {gpus[0]}"
    return "GPUs " + ", ".join(map(str, gpus[:-1])) + f" and {gpus[-1]}"


def why_view(view: dict[str, Any], now: float) -> dict[str, Any]:
    """`rota why`: why a job waits (its reason), or what it is doing or how it ended, in a
    sentence. ``view`` is the job's view (job_view)."""
    state = view["state"]
    out: dict[str, Any] = {"id": view["id"], "state": state}
    if "reason" in view:
        out = {**out, **view["reason"]}
        if "estimated_start" in view:
            out["estimated_start"] = est = view["estimated_start"]
            if est is not None:
                out["message"] = f"{out['message']}; {estimate_text(est)}"
        return out
    started, ended = view["started_at"], view["ended_at"]
    gpus = view["gpu_indices"]
    if state in ("running", "starting", "preempted"):
        where = f"on {_gpus_text(gpus)}" if gpus else "on the CPU only"
        since = f" since {clock_text(started, now)}" if started is not None else ""
        msg = {"running": f"runs {where}{since}",
               "starting": f"is starting {where}",
               "preempted": f"was preempted: it is being stopped {where}, then waits "
                            "again in its place"}[state]
        if view.get("idle"):
            msg += f"; idle: {view['idle']['message']}"
    else:
        msg = f"it is {state}"
        if ended is not None:
            msg = f"{state} at {clock_text(ended, now)}"
        if view["exit_code"] is not None:
            msg += f" with exit code {view['exit_code']}"
        if started is not None and ended is not None:
            msg += f" after {span_text(ended - started)}"
        reason = view["end_reason"] or ""
        if view["exit_code"] is not None:  # said just before: only what follows it is new
            reason = reason.removeprefix(f"exit code {view['exit_code']}").removeprefix(": ")
        if reason and state != "completed":
            msg += f": {reason}"
    return {**out, "code": state, "message": msg}
