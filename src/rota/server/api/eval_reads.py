"""What the API says about evaluation runs (`rota eval results`): the jobs tagged ``eval``
that ran an evaluation (their model-fetch steps carry another tag), each with what its config named
(the environment rota.eval.jobs gave it) and the last value of each metric its latest
attempt reported (the store keeps every sample: rota.store.repo.Store.metrics)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rota.eval.jobs import EVAL_TAG
from rota.server.ports import StoreReads
from rota.store.repo import JobRecord

#: jobs read at most for one answer, and how many at a time
SCAN_MAX, PAGE = 5_000, 500


def eval_runs(store: StoreReads, *, name: str | None, model: str | None,
              task: str | None, limit: int) -> list[tuple[JobRecord, dict[str, float]]]:
    """The newest ``limit`` runs of config ``name`` and ``model`` (None: any), each with
    its metrics; with ``task``, only metrics named ``TASK/...``, and only runs that
    reported some."""
    out: list[tuple[JobRecord, dict[str, float]]] = []
    for row in _tagged(store, f"{EVAL_TAG}:{name}" if name else EVAL_TAG):
        spec = row.spec
        if model is not None and (spec.get("env") or {}).get("ROTA_EVAL_MODEL") != model:
            continue
        # a harness's own numbers are TASK/NAME (rota.eval.run); what else the log parser
        # found in its output (batch_size=2) is no result
        metrics = {k: v for k, v in last_metrics(store, row.id, row.attempts).items()
                   if "/" in k}
        if task is not None:
            metrics = {k: v for k, v in metrics.items() if k.startswith(f"{task}/")}
            if not metrics:
                continue
        out.append((row, metrics))
        if len(out) >= limit:
            break
    return out


def _tagged(store: StoreReads, tag: str) -> Iterator[JobRecord]:
    """The jobs carrying ``tag``, newest first, a page at a time (SCAN_MAX at most)."""
    before: int | None = None
    for _ in range(SCAN_MAX // PAGE):
        page = store.list_jobs(tag=tag, limit=PAGE, before_id=before)
        yield from page
        if len(page) < PAGE:
            return
        before = page[-1].id


def run_view(row: JobRecord, metrics: dict[str, float], state: str) -> dict[str, Any]:
    """One run as EvalRunAnswer (``state``: the daemon's word, which may be ahead of the
    row's)."""
    env = row.spec.get("env") or {}
    return {"id": row.id, "name": env.get("ROTA_EVAL_NAME") or row.name or f"job-{row.id}",
            "model": env.get("ROTA_EVAL_MODEL"), "harness": env.get("ROTA_EVAL_HARNESS"),
            "git_commit": env.get("ROTA_EVAL_GIT_COMMIT"), "state": state,
            "pool": row.spec.get("pool"), "created_at": row.created_at,
            "ended_at": row.ended_at, "metrics": metrics}


def last_metrics(store: StoreReads, job_id: int, attempt: int) -> dict[str, float]:
    """Each metric's last value in ``attempt`` (an evaluation reports few: one read)."""
    if attempt < 1:
        return {}
    out: dict[str, float] = {}
    for m in store.metrics(job_id, attempt=attempt, limit=100_000):
        out[m.name] = m.value  # stored in order: the last one stays
    return dict(sorted(out.items()))
