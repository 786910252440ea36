"""Trace loaders: Tiresias, Alibaba openb, Rota's CSV/JSON format, and Rota's own history.

Each returns SimJobs sorted by submit time, times shifted so the first job arrives at 0.
A bad row is refused with its file, line and column named (docs/simulator.md has the
formats).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rota.core.snapshot import MILLI
from rota.errors import InvalidSpec
from rota.sim.trace import SimJob
from rota.units import parse_duration, parse_memory

FORMATS = ("tiresias", "openb", "csv", "json")
#: openb's QoS classes as Rota priorities (lower runs first)
OPENB_QOS = {"Guaranteed": 0, "LS": 1, "Burstable": 2, "BE": 3}
#: the states of a job whose run is over, for --from-history
HISTORY_STATES = ("completed", "failed", "timeout")


def load(path: Path, fmt: str | None = None) -> list[SimJob]:
    """The trace in ``path``; ``fmt`` None: guessed from the file's name and header."""
    fmt = fmt or guess_format(path)
    loaders: dict[str, Callable[[Path], list[SimJob]]] = {
        "tiresias": load_tiresias, "openb": load_openb, "csv": load_csv, "json": load_json}
    if fmt not in loaders:
        raise InvalidSpec(f"--format {fmt!r}: use one of {', '.join(FORMATS)}", field="format")
    return loaders[fmt](path)


def guess_format(path: Path) -> str:
    if path.suffix.lower() == ".json":
        return "json"
    header = _read_text(path).split("\n", 1)[0]
    if "num_gpu" in header and "iterations" in header:
        return "tiresias"
    if "gpu_milli" in header:
        return "openb"
    return "csv"


def load_tiresias(path: Path) -> list[SimJob]:
    """``60_job.csv``: job_id,num_gpu,submit_time,iterations,model_name,duration,interval.
    The trace names no users: each model family counts as one user."""
    jobs = []
    for line, r in _rows(path, ("job_id", "num_gpu", "submit_time", "duration")):
        where = f"{path} line {line}"
        jobs.append(SimJob(id=_int(r, "job_id", where), submit=_num(r, "submit_time", where),
                           duration=_num(r, "duration", where),
                           gpus_milli=_int(r, "num_gpu", where) * MILLI,
                           user=r.get("model_name") or "user", name=r.get("model_name", "")))
    return _normalised(jobs)


def load_openb(path: Path) -> list[SimJob]:
    """``openb_pod_list_default.csv``. Arrival = creation_time; run time = deletion_time -
    scheduled_time; num_gpu == 1 with gpu_milli < 1000 is a share of one GPU. Pods that
    never ran (no scheduled or deletion time) and CPU-only pods (num_gpu 0) are left out;
    QoS becomes the priority (OPENB_QOS)."""
    jobs = []
    need = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time")
    for line, r in _rows(path, need):
        where = f"{path} line {line}"
        count = _int(r, "num_gpu", where)
        if count == 0 or not r["scheduled_time"] or not r["deletion_time"]:
            continue
        milli = _int(r, "gpu_milli", where) if count == 1 else count * MILLI
        if not 0 < milli <= MILLI and count == 1:
            raise InvalidSpec(f"{where}: gpu_milli {milli} is not in 1..1000", field="gpu_milli")
        run = _num(r, "deletion_time", where) - _num(r, "scheduled_time", where)
        jobs.append(SimJob(id=line - 1, submit=_num(r, "creation_time", where),
                           duration=max(0.0, run), gpus_milli=milli,
                           priority=OPENB_QOS.get(r.get("qos", ""), 1), name=r["name"],
                           user=r.get("qos") or "user"))
    return _normalised(jobs)


def load_csv(path: Path) -> list[SimJob]:
    """Rota's own format: id, submit, duration, gpus, gpu_mem, priority, user, project,
    name, time_limit (submit, duration and gpus required)."""
    return _normalised([_rota_job(r, f"{path} line {line}", line - 1)
                        for line, r in _rows(path, ("submit", "duration", "gpus"))])


def load_json(path: Path) -> list[SimJob]:
    """The same fields as load_csv, as a list of objects (or ``{"jobs": [...]}``)."""
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as e:
        raise InvalidSpec(f"{path}: not JSON ({e})", field="trace") from e
    if isinstance(data, dict):
        data = data.get("jobs")
    if not isinstance(data, list):
        raise InvalidSpec(f"{path}: expected a list of jobs (or {{\"jobs\": [...]}})",
                          field="trace")
    jobs = []
    for n, item in enumerate(data):
        if not isinstance(item, dict):
            raise InvalidSpec(f"{path} job {n}: expected an object", field="trace")
        jobs.append(_rota_job({k: "" if v is None else str(v) for k, v in item.items()},
                              f"{path} job {n}", n))
    return _normalised(jobs)


def from_history(jobs: Iterable[Mapping[str, Any]], since: float) -> list[SimJob]:
    """Rota's own finished jobs (GET /v1/jobs answers) created at ``since`` or later.
    Run time = its last attempt's end - start (the answer's started_at / ended_at)."""
    out = []
    for j in jobs:
        started, ended = j.get("started_at"), j.get("ended_at")
        if started is None or ended is None or j["created_at"] < since:
            continue
        out.append(SimJob(id=int(j["id"]), submit=float(j["created_at"]),
                          duration=max(0.0, float(ended) - float(started)),
                          gpus_milli=_milli(float(j["gpus"]), f"job {j['id']}"),
                          gpu_mem=j.get("gpu_mem"), priority=int(j.get("priority") or 0),
                          user=str(j.get("user") or "user"), project=j.get("project"),
                          name=str(j.get("name") or ""), time_limit=j.get("time_limit")))
    return _normalised(out)


def as_rota_json(jobs: Iterable[SimJob]) -> list[dict[str, Any]]:
    """A trace in Rota's JSON format (load_json reads it back): ``rota sim --save-trace``
    keeps a daemon's history as a trace to replay later or elsewhere."""
    out = []
    for j in jobs:
        row: dict[str, Any] = {"id": j.id, "submit": j.submit, "duration": j.duration,
                               "gpus": j.gpus, "priority": j.priority, "user": j.user,
                               "name": j.name}
        if j.gpu_mem is not None:
            row["gpu_mem"] = f"{j.gpu_mem}B"  # a bare number would read as GiB
        for key in ("project", "time_limit"):
            if getattr(j, key) is not None:
                row[key] = getattr(j, key)
        out.append(row)
    return out


# --- helpers --------------------------------------------------------------------------------
def _rota_job(r: Mapping[str, str], where: str, default_id: int) -> SimJob:
    for col in ("submit", "duration", "gpus"):
        if not r.get(col, "").strip():
            raise InvalidSpec(f"{where}: {col} is missing", field=col)
    limit = r.get("time_limit", "").strip()
    mem = r.get("gpu_mem", "").strip()
    return SimJob(id=_int(r, "id", where) if r.get("id", "").strip() else default_id,
                  submit=_num(r, "submit", where),
                  duration=_duration(r["duration"], where, "duration"),
                  gpus_milli=_milli(_num(r, "gpus", where), where),
                  gpu_mem=parse_memory(mem, field="gpu_mem") if mem else None,
                  priority=_int(r, "priority", where) if r.get("priority", "").strip() else 0,
                  user=r.get("user", "").strip() or "user",
                  project=r.get("project", "").strip() or None,
                  name=r.get("name", "").strip(),
                  time_limit=_duration(limit, where, "time_limit") if limit else None)


def _milli(gpus: float, where: str) -> int:
    """GPUs as PendingJob counts them: a share of one GPU, or whole GPUs."""
    milli = round(gpus * MILLI)
    if gpus < 0 or (milli > MILLI and milli % MILLI):
        raise InvalidSpec(f"{where}: gpus {gpus:g} must be a share of one GPU (0-1) or a "
                          "whole number", field="gpus")
    return milli


def _duration(text: str, where: str, col: str) -> float:
    try:
        return parse_duration(text.strip(), field=col)
    except InvalidSpec as e:
        raise InvalidSpec(f"{where}: {e}", field=col) from e


def _num(r: Mapping[str, str], col: str, where: str) -> float:
    try:
        v = float(r[col])
    except (KeyError, ValueError):
        raise InvalidSpec(f"{where}: {col} {r.get(col)!r} is not a number", field=col) from None
    if not math.isfinite(v):
        raise InvalidSpec(f"{where}: {col} must be finite", field=col)
    return v


def _int(r: Mapping[str, str], col: str, where: str) -> int:
    v = _num(r, col, where)
    if v != int(v):
        raise InvalidSpec(f"{where}: {col} {r[col]!r} is not a whole number", field=col)
    return int(v)


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise InvalidSpec(f"cannot read trace {path}: {e.strerror}", field="trace") from e


def _rows(path: Path, need: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(_read_text(path).splitlines())
    missing = [c for c in need if c not in (reader.fieldnames or ())]
    if missing:
        raise InvalidSpec(f"{path}: the header lacks {', '.join(missing)}", field="trace")
    yield from enumerate(reader, start=2)


def _normalised(jobs: list[SimJob]) -> list[SimJob]:
    """Sorted by arrival, the first at time 0; ids unique."""
    seen: set[int] = set()
    for j in jobs:
        if j.id in seen:
            raise InvalidSpec(f"job id {j.id} appears twice in the trace", field="id")
        seen.add(j.id)
    jobs.sort(key=lambda j: (j.submit, j.id))
    t0 = jobs[0].submit if jobs else 0.0
    return [j._replace(submit=j.submit - t0) for j in jobs]
