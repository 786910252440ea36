"""Submitting an evaluation: its jobs for one pool (rota.eval.jobs), in order, nothing
half-submitted. Shared by `rota eval submit` (through the API) and the daemon's schedules
(rota.server.eval_schedules, through its intake): each hands in how it submits one job
and cancels one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rota.errors import RotaError
from rota.eval.config import EvalConfig
from rota.eval.jobs import EvalJobs, Source, eval_jobs

#: what each job of an evaluation is called in messages
ROLES = {"fetch": "the model-fetch job", "evaluate": "the evaluation job"}


@dataclass(frozen=True)
class Plan:
    """An evaluation's jobs for one pool."""

    config: EvalConfig
    jobs: EvalJobs
    pool: str
    work_dir: str

    def specs(self) -> list[tuple[str, dict[str, Any]]]:
        """(role, spec) in the order they are submitted."""
        first = [("fetch", self.jobs.fetch)] if self.jobs.fetch is not None else []
        return [*first, ("evaluate", self.jobs.evaluate)]


def make_plan(config: EvalConfig, src: Source, *, pool: str, engine: str,
              asked_pool: str | None, work_dir: str) -> Plan:
    """The jobs on ``pool`` (whose engine is ``engine``); ``asked_pool``, when given, is
    written into every spec (it wins over the config's compute.pool)."""
    # this machine runs the jobs with this Python; an image or a cluster has its own
    python = sys.executable if engine == "local" and not config.compute.image else "python"
    jobs = eval_jobs(config, src, pool_engine=engine, python=python, work_dir=work_dir)
    if asked_pool:
        for spec in (jobs.fetch, jobs.evaluate):
            if spec is not None:
                spec["pool"] = asked_pool
    return Plan(config, jobs, pool, work_dir)


def work_dir_name(name: str, now: float) -> str:
    """An evaluation's folder name: the config's name and the UTC time."""
    return f"{name}-{datetime.fromtimestamp(now, UTC):%Y%m%dT%H%M%S}"


def make_work_dir(p: Plan) -> None:
    """The jobs' shared folder, when they run where this machine's disk is seen (a job's
    ``cwd`` must exist when it is submitted)."""
    if "cwd" in p.jobs.evaluate:
        os.makedirs(p.work_dir, exist_ok=True)


def naming(e: RotaError, role: str, spec: dict[str, Any], text: str | None = None) -> RotaError:
    """``e`` (or ``text`` for its message) saying which job of the evaluation it is about."""
    e.args = (f"{ROLES[role]} ({spec.get('name')}): {e if text is None else text}",)
    return e


def submit_plan(p: Plan, send: Callable[[str, dict[str, Any]], int],
                cancel: Callable[[int], object], *, hold: bool = False) -> dict[str, int]:
    """Each job through ``send(role, spec)`` (which answers its id), the evaluation ``after``
    the fetch job; the ids by role. Nothing half-submitted: when the evaluation is refused,
    the fetch job already accepted is cancelled through ``cancel`` (and the error says
    so)."""
    got: dict[str, int] = {}
    for role, spec in p.specs():
        spec = {**spec, **({"hold": True} if hold else {})}
        if role == "evaluate" and "fetch" in got:
            spec["after"] = [got["fetch"]]
        try:
            got[role] = send(role, spec)
        except RotaError as e:
            raise _undone(e, got.get("fetch"), cancel) from None
    return got


def _undone(e: RotaError, fetch: int | None, cancel: Callable[[int], object]) -> RotaError:
    """``e``, after cancelling the fetch job already accepted (saying so)."""
    if fetch is None:
        return e
    try:
        cancel(fetch)
        note = f"the model-fetch job {fetch} was cancelled"
    except RotaError as again:
        note = f"the model-fetch job {fetch} could not be cancelled: {again}"
    e.args = (f"{e}; {note}",)
    return e


def with_model(text: str, uri: str) -> str:
    """The config's YAML with its model replaced by ``uri`` (a checkpoint), its adapter
    kept; validated again by whoever reads it (rota.eval.config.load_text)."""
    import yaml

    data = yaml.safe_load(text)
    model = {k: v for k, v in (data.get("model") or {}).items() if k != "mlflow"}
    data["model"] = {**model, "uri": uri}
    return str(yaml.safe_dump(data, sort_keys=False))
