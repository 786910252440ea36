"""Pipelines that run by themselves (`rota pipeline`): the daemon's rounds.

A pipeline (rota.store.tables.PipelineRow) is due at its stored ``next_at``. A round is a
row (PipelineRoundRow) and a chain of ordinary jobs (rota.pipeline.steps): prep, train,
merge, evaluate. Each step is submitted when the one before has completed and its result
file says what it made; the round's row moves on (step, jobs, what was made) in the same
transaction that submits the next job, and every job carries an idempotency key of the
pipeline, the round and the step, so a SIGKILL at any point leaves either both or neither
and nothing is created twice. One round of a pipeline at a time.

The end of a round decides the next: accepted (the merged model is the next base) or
rejected (the base stays; both numbers kept) draw the next time in ``run_intervals``; a
failed step fails the round and backs off, doubling per failure in a row. A failed merge
never becomes a base: only an evaluated merge is ever accepted.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from dataclasses import dataclass
from typing import Any

from rota.core.lifecycle import JobState
from rota.errors import Conflict, Forbidden, InvalidSpec, NotFound, RotaError
from rota.eval.config import load_text as load_eval
from rota.eval.jobs import Source
from rota.eval.submission import make_plan, make_work_dir, naming, submit_plan
from rota.pipeline import steps, timing
from rota.pipeline.config import PipelineConfig
from rota.server.schedules.due_check import DueCheck
from rota.store.repo import PipelineRecord, RoundRecord

SOURCE = "pipeline"
EVENT = "pipeline"
RESULT_MAX = 1 << 20  # a step's result file is small; more is not read
RUNNING, ACCEPTED, REJECTED, FAILED = "running", "accepted", "rejected", "failed"


class StepFailed(RotaError):
    """A step's job ended without what the next step needs; the round fails with this."""


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reason: str


def verdict(metric: float, base: float | None, *, higher_is_better: bool, margin: float,
            name: str) -> Verdict:
    """Accept the merged model unless its metric is worse than the base's by more than
    ``margin`` (no number for the base: accepted, said so)."""
    if base is None:
        return Verdict(True, f"{name} {metric:.6g}; the base has no number to compare")
    worse = base - metric if higher_is_better else metric - base
    words = f"{name} {metric:.6g} against the base's {base:.6g} (margin {margin:g})"
    if worse > margin:
        return Verdict(False, f"rejected: {words}: worse by {worse:.6g}")
    return Verdict(True, f"accepted: {words}")


class Pipelines(DueCheck):
    """The daemon's collaborator that begins due rounds and moves open ones on."""

    what = "pipelines"

    def root(self, name: str) -> str:
        return os.path.join(self.d.settings.home, "pipelines", name)

    # --- commands (the API's, through the daemon's commands port) --------------------------
    def add(self, configs: list[PipelineConfig], *, user: str, text: str,
            path: str) -> list[PipelineRecord]:
        """Each pipeline of a file, all or none; the first round due now (a pipeline not
        enabled in a Gradients file is kept paused)."""
        now = self.d.clock()
        account = self.intake.accounts.account_in(self.d.store, user)
        if account is not None:  # not yet: see docs/pipelines.md, "What is not done yet"
            raise Forbidden(f"pipelines run only as the daemon's own account for now: this "
                            f"daemon would run {user}'s jobs as {account}, and a round's "
                            "folder is in the daemon's home, which jobs of other accounts "
                            "cannot reach; run a daemon of your own (rota server -d) for "
                            "your pipelines")
        taken = [c.name for c in configs if self._exists(c.name)]
        if taken:
            raise Conflict(f"a pipeline named {taken[0]!r} exists: remove it first (rota "
                           "pipeline rm) or choose another name")
        rows = []
        with self.d.store.transaction():
            for c in configs:
                paused = not c.enabled
                rows.append(self.d.store.add_pipeline(
                    now=now, name=c.name, user=user, format=c.format, config_text=text,
                    config_path=path, config=c.model_dump(mode="json"), paused=paused,
                    paused_reason="not enabled in the file (enabled: true runs it)"
                    if paused else None, next_at=now,
                    next_why="the first round: due when added", base_model=c.model_repo))
                self._event(None, now, f"pipeline {c.name} added by {user}"
                            + (" (paused: not enabled)" if paused else ""))
        return rows

    def _exists(self, name: str) -> bool:
        try:
            self.d.store.pipeline(name)
            return True
        except NotFound:
            return False

    def pause(self, name: str, reason: str) -> PipelineRecord:
        p = self.d.store.pipeline(name)
        self.d.store.update_pipeline(p.id, paused=True, paused_reason=reason)
        return self.d.store.pipeline(p.id)

    def resume(self, name: str) -> PipelineRecord:
        p = self.d.store.pipeline(name)
        self.d.store.update_pipeline(p.id, paused=False, paused_reason=None)
        return self.d.store.pipeline(p.id)

    def run_now(self, name: str) -> PipelineRecord:
        """The next round due now (it begins within a tick); refused while one is open."""
        p = self.d.store.pipeline(name)
        open_ = self.open_round(p.id)
        if open_ is not None:
            raise Conflict(f"pipeline {name}: round {open_.number} is running (step "
                           f"{open_.step}); two rounds of one pipeline never overlap")
        now = self.d.clock()
        self.d.store.update_pipeline(p.id, next_at=now, next_why="asked for now (run-now)",
                                     paused=False, paused_reason=None)
        return self.d.store.pipeline(p.id)

    def remove(self, name: str) -> int | None:
        """The pipeline and its rounds' records; an open round's jobs are cancelled (its
        number back)."""
        p = self.d.store.pipeline(name)
        open_ = self.open_round(p.id)
        if open_ is not None:
            self._cancel_jobs(open_)
        self.d.store.remove_pipeline(p.id)
        self._event(None, self.d.clock(), f"pipeline {name} removed")
        return None if open_ is None else int(open_.number)

    def open_round(self, pipeline_id: int) -> RoundRecord | None:
        found = self.d.store.rounds(pipeline_id, state=RUNNING, limit=1)
        return found[0] if found else None

    def _cancel_jobs(self, rd: RoundRecord) -> None:
        for job in (rd.jobs or {}).values():
            self._cancel_job(job)

    def _cancel_job(self, job: int) -> None:
        try:
            if not self.d.job_state(job).terminal:
                self.d.cancel(job)
        except (NotFound, Conflict):
            pass

    # --- the due check ----------------------------------------------------------------------
    def check(self, now: float) -> None:
        for p in self.d.store.pipelines():
            rd = self.open_round(p.id)
            if rd is not None:
                self._advance(p, rd, now)
            elif not p.paused and p.next_at is not None and p.next_at <= now:
                self._begin(p, now)

    def _config(self, p: PipelineRecord) -> PipelineConfig:
        return PipelineConfig.model_validate(p.config)

    def _round(self, p: PipelineRecord, number: int) -> steps.Round:
        return steps.Round(self._config(p), number,
                           os.path.join(self.root(p.name), f"round-{number}"),
                           os.path.join(self.root(p.name), "data"), sys.executable)

    def _begin(self, p: PipelineRecord, now: float) -> None:
        cfg = self._config(p)
        number = p.rounds + 1
        r = self._round(p, number)
        os.makedirs(r.folder, exist_ok=True)
        os.makedirs(r.cache, exist_ok=True)
        with self.d.batch():
            rd = self.d.store.add_round(
                pipeline_id=p.id, number=number, state=RUNNING, step="prep",
                folder=r.folder, data_hash=cfg.data_hash(), base_model=p.base_model,
                base_metric=p.base_metric if p.base_metric_data == cfg.data_hash() else None,
                due_at=p.next_at, started_at=now)
            self.d.store.update_pipeline(p.id, rounds=number, next_at=None,
                                         next_why=None)
            try:
                job = self._submit(p, rd, "prep", steps.prep_job(r), now)
            except RotaError as e:
                self._end(p, rd, FAILED, f"prep: refused: {e}", now)
                return
            self.d.store.update_round(rd.id, jobs={"prep": job})
        self._event(None, now, f"pipeline {p.name}: round {number} began (due "
                               f"{timing.when(p.next_at)}), from {p.base_model}")

    def _submit(self, p: PipelineRecord, rd: RoundRecord, step: str, spec: dict[str, Any],
                now: float) -> int:
        [job] = self.intake.submit([spec], user=p.user, source=SOURCE,
                                   idempotency_key=f"pipeline:{p.id}:{rd.number}:{step}",
                                   numbered=False)
        self.d.store.add_event(job_id=job.id, kind=EVENT, now=now, message=(
            f"pipeline {p.name} round {rd.number}: step {step}"))
        return int(job.id)

    # --- moving a round on ------------------------------------------------------------------
    def _advance(self, p: PipelineRecord, rd: RoundRecord, now: float) -> None:
        jobs: dict[str, int] = dict(rd.jobs or {})
        current = [k for k in jobs if k.split("_")[0] == rd.step]
        if not current:  # never submitted (a refusal is recorded as failed): take it again
            return
        states = {k: self._state(jobs[k]) for k in current}
        if not all(s is None or s.terminal for s in states.values()):
            return
        bad = [(k, s) for k, s in states.items() if s is not JobState.COMPLETED]
        try:
            if bad:
                k, s = bad[0]
                raise StepFailed(f"{k}: job {jobs[k]} " + (
                    "is gone" if s is None else f"{s.value}{self._why(jobs[k])}"))
            self._next_step(p, rd, now)
        except (StepFailed, InvalidSpec, OSError) as e:
            with self.d.batch():
                self._end(p, rd, FAILED, str(e), now)

    def _state(self, job: int) -> JobState | None:
        try:
            return self.d.job_state(job)
        except NotFound:
            return None

    def _why(self, job: int) -> str:
        row = self.d.store.get_job(job)
        reason = row.end_reason or (f"exit code {row.exit_code}"
                                    if row.exit_code is not None else None)
        return f": {reason}" if reason else ""

    def _next_step(self, p: PipelineRecord, rd: RoundRecord, now: float) -> None:
        r = self._round(p, rd.number)
        cfg = r.config
        facts = dict(rd.facts or {})
        jobs = dict(rd.jobs or {})
        if rd.step == "prep":
            prep = _result(r, "prep")
            facts.update({k: prep.get(k) for k in (
                "rows", "train_rows", "heldout_rows", "chunk_rows")})
            moved: dict[str, Any] = {"chunk": prep.get("chunk"), "chunks": prep.get("chunks")}
            step, specs = "train", {"train": steps.train_job(r, rd.base_model, prep)}
        elif rd.step == "train":
            adapter, moved = self._trained(r, facts)
            step = "merge"
            specs = {"merge": steps.merge_job(r, rd.base_model, adapter)}
        elif rd.step == "merge":
            merge = _result(r, "merge")
            model = merge.get("model")
            if not isinstance(model, str) or not os.path.isdir(model):
                raise StepFailed(f"merge: merge.json names no merged model folder ({model!r})")
            published = merge.get("published")
            facts.update(published=published, merged_bytes=merge.get("bytes"))
            # the next base: where a remote trainer can read it, else this machine's folder
            base_next = published if cfg.train.where == "gradients" and published else model
            moved = {"merged_model": base_next}
            step = "evaluate"
            heldout = str(_result(r, "prep").get("heldout") or "")
            specs = {"evaluate": self._evaluation(p, r, model, heldout, "candidate")}
            if rd.base_metric is None:
                specs["evaluate_base"] = self._evaluation(p, r, rd.base_model, heldout, "base")
        else:  # evaluate: the verdict
            self._decide(p, rd, cfg, now)
            return
        with self.d.batch():
            for key, spec in specs.items():
                try:
                    jobs[key] = self._submit_any(p, rd, key, spec, now)
                except RotaError as e:  # a step of two (the evaluations) is all or none
                    for made in set(specs) & set(jobs):
                        self._cancel_job(jobs[made])
                    self._end(p, rd, FAILED, f"{key}: refused: {e}", now)
                    return
            self.d.store.update_round(rd.id, step=step, jobs=jobs, facts=facts, **moved)

    def _trained(self, r: steps.Round, facts: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if r.config.train.where == "local":
            adapter = r.path("train", "adapter")
            if not os.path.isfile(os.path.join(adapter, "adapter_config.json")):
                raise StepFailed(f"train: no adapter in {adapter} (adapter_config.json "
                                 "missing)")
            return adapter, {"adapter": adapter}
        train = _result(r, "train")
        if train.get("failed") or not isinstance(train.get("adapter"), str):
            raise StepFailed(f"train: Gradients task {train.get('task_id')} gave no adapter "
                             f"(status {train.get('status')})")
        facts.update(task_id=train.get("task_id"), winner=train.get("winner"))
        return str(train["adapter"]), {"adapter": train["adapter"],
                                       "remote_task": str(train.get("task_id"))}

    def _evaluation(self, p: PipelineRecord, r: steps.Round, model: str, heldout: str,
                    who: str) -> dict[str, Any]:
        """An evaluation plan (rota.eval) as the specs to submit, by role."""
        text = steps.evaluation_text(r.config, model, heldout, who)
        config = load_eval(text, where=f"pipeline {p.name} round {r.number} ({who})")
        name, pool = self.d.settings.pool_set.get(config.compute.pool)
        plan = make_plan(config, Source(text), pool=name, engine=pool.engine,
                         work_dir=r.path(f"eval-{who}"))
        make_work_dir(plan)
        return {"plan": plan}

    def _submit_any(self, p: PipelineRecord, rd: RoundRecord, key: str,
                    spec: dict[str, Any], now: float) -> int:
        if "plan" not in spec:
            return self._submit(p, rd, key, spec, now)

        def send(role: str, s: dict[str, Any]) -> int:
            s = {**s, "tags": [*s.get("tags", []), *steps.Round.tags(
                self._round(p, rd.number))]}
            try:
                return self._submit(p, rd, f"{key}-{role}", s, now)
            except RotaError as e:
                raise naming(e, role, s) from None

        return submit_plan(spec["plan"], send, self.d.cancel)["evaluate"]

    def _decide(self, p: PipelineRecord, rd: RoundRecord, cfg: PipelineConfig,
                now: float) -> None:
        jobs = dict(rd.jobs or {})
        e = cfg.evaluate
        metric = self._metric(jobs["evaluate"], e.metric)
        base = rd.base_metric
        if "evaluate_base" in jobs:
            base = self._metric(jobs["evaluate_base"], e.metric)
        v = verdict(metric, base, higher_is_better=e.higher_is_better, margin=e.margin,
                    name=e.metric)
        state = ACCEPTED if v.accepted else REJECTED
        record = steps.record_job(self._round(p, rd.number), {
            "pipeline": p.name, "round": rd.number, "state": state,
            "base_model": rd.base_model, "adapter": rd.adapter,
            "merged_model": rd.merged_model, "data_hash": rd.data_hash, "chunk": rd.chunk,
            "chunks": rd.chunks, "remote_task": rd.remote_task, "reason": v.reason,
            "metric": metric, "base_metric": base, "accepted": int(v.accepted)})
        with self.d.batch():
            if record is not None:
                try:  # the trackers' copy: its refusal is said, the verdict stands
                    jobs["record"] = self._submit(p, rd, "record", record, now)
                except RotaError as e:
                    self._event(None, now, f"pipeline {p.name} round {rd.number}: its "
                                           f"record for the trackers was refused: {e}")
            self.d.store.update_round(rd.id, metric=metric, base_metric=base, jobs=jobs)
            self._end(p, rd, state, v.reason, now, metric=metric, base_metric=base)

    def _metric(self, job: int, name: str) -> float:
        found = self.d.store.metrics(job, names=[name])
        if not found:
            raise StepFailed(f"evaluate: job {job} reported no {name}")
        value = float(found[-1].value)
        if not math.isfinite(value):
            raise StepFailed(f"evaluate: job {job} reported {name} = {value}")
        return value

    def _end(self, p: PipelineRecord, rd: RoundRecord, state: str, reason: str, now: float,
             *, metric: float | None = None, base_metric: float | None = None) -> None:
        """The round's verdict and the pipeline's next time, in the open transaction."""
        cfg = self._config(p)
        p = self.d.store.pipeline(p.id)
        self.d.store.update_round(rd.id, state=state, step="done", reason=reason,
                                  ended_at=now)
        fields: dict[str, Any] = {}
        if state == FAILED:
            failures = p.failures + 1
            at, why = timing.retry_at(now, failures, cfg.on_failure)
            fields.update(failures=failures)
        else:
            rng = random.Random(f"{p.id}:{p.created_at!r}:{rd.number}")
            at, why = timing.next_run(now, cfg.run_intervals, rng)
            fields.update(failures=0)
            if base_metric is not None:
                fields.update(base_metric=base_metric, base_metric_data=rd.data_hash)
            if state == ACCEPTED:
                fields.update(base_model=rd.merged_model if rd.merged_model else p.base_model,
                              base_round=rd.number, base_metric=metric,
                              base_metric_data=rd.data_hash)
        self.d.store.update_pipeline(p.id, next_at=at, next_why=why, **fields)
        self._event(None, now, f"pipeline {p.name} round {rd.number} {state}: {reason}; "
                               f"next round {timing.when(at)}")

    def _event(self, job: int | None, now: float, message: str) -> None:
        self.d.store.add_event(job_id=job, kind=EVENT, now=now, message=message)


def _result(r: steps.Round, step: str) -> dict[str, Any]:
    """A step's result file (written by its job: read as untrusted, small)."""
    path = r.path(steps.RESULT[step])
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(RESULT_MAX))
    except (OSError, ValueError) as e:
        raise StepFailed(f"{step}: its result {path} cannot be read: {e}") from None
    if not isinstance(data, dict):
        raise StepFailed(f"{step}: its result {path} is not a JSON object")
    return data
