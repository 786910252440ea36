"""Evaluations that run by themselves (`rota eval schedule`): the daemon's due check.

A schedule (rota.store.tables.EvalScheduleRow) is one of:

- ``every``: an evaluation every ``every_s`` seconds, due at ``next_at``. After a long
  downtime the missed slots get one run, not a burst, and its event says how many were
  missed;
- ``after_job``: one evaluation when the watched job completes; when it fails, times out
  or is cancelled instead, the schedule is disabled with that reason;
- ``checkpoint``: one evaluation of each new valid checkpoint of the watched job, while it
  runs and once more at its end, whose model is that checkpoint (``model.uri``; the
  config's adapter stays); a checkpoint is never evaluated twice.

Exactly once: the jobs of a run are submitted through the intake in the same transaction
that moves the schedule on (``next_at``, the evaluated checkpoints), so a SIGKILL leaves
either both or neither; each job also carries an idempotency key of the schedule and its
due time, which the store holds unique. The check runs on a timer of its own
(rota.server.schedules.due_check); with no schedule it is one indexed read.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Protocol

from rota.core.lifecycle import JobState
from rota.errors import NotFound, RotaError
from rota.eval.config import load_text
from rota.eval.jobs import Source
from rota.eval.submission import make_plan, make_work_dir, naming, submit_plan, with_model
from rota.eval.submission import work_dir_name as folder_name
from rota.ml import checkpoints
from rota.server.jobs.job_output import checkpoints_of
from rota.server.schedules.due_check import DueCheck
from rota.store.repo import ScheduleRecord

log = logging.getLogger("rota.eval_schedules")
KINDS = ("every", "after_job", "checkpoint")
SOURCE = "schedule"  # the jobs' source (rota.store.tables.JobRow.source)
EVENT = "eval_schedule"  # the event on each job a schedule submitted
TAG = "eval-schedule"  # and its tag, eval-schedule:ID


class ScheduleStore(Protocol):
    """The store's schedule methods (rota.store.repo.Store has them)."""

    def add_eval_schedule(self, *, now: float, **fields: Any) -> ScheduleRecord: ...
    def eval_schedule(self, schedule_id: int) -> ScheduleRecord: ...
    def eval_schedules(self, *, user: str | None = None,
                       enabled: bool | None = None) -> list[ScheduleRecord]: ...
    def remove_eval_schedule(self, schedule_id: int) -> None: ...


@dataclass(frozen=True)
class Due:
    """One run to submit: why (the event's words), its idempotency key, and the model to
    put in the config (a checkpoint) if any."""

    note: str
    key: str
    model: str | None = None


def next_time(next_at: float, every_s: float, now: float) -> tuple[float, int]:
    """The first slot after ``now`` (slots ``every_s`` apart from ``next_at``, which is
    due), and how many slots before it were missed besides the one run now."""
    slots = math.floor((now - next_at) / every_s) + 1
    return next_at + slots * every_s, slots - 1


class EvalSchedules(DueCheck):
    """The daemon's collaborator that submits the runs of due schedules."""

    what = "evaluation schedules"

    def check(self, now: float) -> None:
        """Submit what is due now for every enabled schedule."""
        for row in self.d.store.eval_schedules(enabled=True):
            if row.kind == "every":
                self._every(row, now)
            elif row.kind == "after_job":
                self._after_job(row, now)
            elif row.kind == "checkpoint":
                self._checkpoints(row, now)

    # --- the triggers ---------------------------------------------------------------------
    def _every(self, row: ScheduleRecord, now: float) -> None:
        if row.next_at is None or row.next_at > now:
            return
        following, missed = next_time(row.next_at, row.every_s, now)
        note = f"the run due at {_when(row.next_at)}"
        if missed:
            note += f" (and {missed} more missed while the daemon was down: one run for all)"
        self._run(row, Due(note, f"{row.next_at!r}"), now, next_at=following)

    def _after_job(self, row: ScheduleRecord, now: float) -> None:
        state = self._watched(row, now)
        if state is None or not state.terminal:
            return
        if state is not JobState.COMPLETED:
            self._disable(row, f"job {row.job_id} {state.value}: nothing evaluated (only a "
                               "completed job is)", now)
            return
        self._run(row, Due(f"job {row.job_id} completed", "done"), now, enabled=False,
                  disabled_reason=f"done: evaluated after job {row.job_id} completed")

    def _checkpoints(self, row: ScheduleRecord, now: float) -> None:
        state = self._watched(row, now)
        if state is None:
            return
        ended = state.terminal
        found = self._found(row.job_id, ended, now)
        seen = list(row.evaluated or [])
        for c in found:
            if c.valid and c.path not in seen:
                seen.append(c.path)
                step = f" (step {c.step})" if c.step is not None else ""
                due = Due(f"checkpoint {c.path}{step} of job {row.job_id}",
                          hashlib.sha256(c.path.encode()).hexdigest()[:32], c.path)
                if not self._run(row, due, now, evaluated=list(seen)):
                    return
                row = self.d.store.eval_schedule(row.id)  # its count of runs moved on
        if ended:
            self._disable(row, f"done: job {row.job_id} {state.value}; each checkpoint it "
                               "wrote was evaluated", now)

    def _watched(self, row: ScheduleRecord, now: float) -> JobState | None:
        """The watched job's state (None, and the schedule disabled, when it is gone)."""
        try:
            return self.d.job_state(row.job_id)
        except NotFound:
            self._disable(row, f"job {row.job_id} no longer exists", now)
            return None

    def _found(self, job_id: int, ended: bool, now: float) -> list[checkpoints.Checkpoint]:
        """The job's checkpoints: a running one's as its retries see them; an ended one's
        from its stored spec, everything it wrote counting at once."""
        run = self.d.running.get(job_id)
        if run is not None:
            return checkpoints_of(run, since=run.submitted_at, now=now)
        if not ended:
            return []
        row = self.d.store.get_job(job_id)
        try:  # with its account's rights: the paths are the job's to name
            return self.d.launcher.files_of(row.user).run(
                checkpoints.of_job, row.spec.get("checkpoint_dir"), row.spec.get("cwd"),
                reported=(row.progress or {}).get("checkpoint"), since=row.created_at,
                now=now + checkpoints.SETTLE_S)
        except OSError as e:
            log.warning("job %s: looking for checkpoints failed: %s", job_id, e)
            return []

    # --- submitting a run -----------------------------------------------------------------
    def _run(self, row: ScheduleRecord, due: Due, now: float, **moved: Any) -> bool:
        """Submit one run and move the schedule on (``moved``), in one transaction; a run
        refused disables the schedule with the reason instead. True when submitted."""
        with self.d.batch():
            try:
                job = self._submit(row, due, now)
            except RotaError as e:
                self.d.store.update_eval_schedule(row.id, enabled=False,
                                                  disabled_reason=f"refused: {e}")
                self.d.store.add_event(job_id=None, kind=EVENT, now=now, message=(
                    f"evaluation schedule {row.id} ({row.name}) disabled: {due.note}: {e}"))
                return False
            self.d.store.update_eval_schedule(row.id, runs=row.runs + 1, last_job=job,
                                              **moved)
        return True

    def _submit(self, row: ScheduleRecord, due: Due, now: float) -> int:
        """The run's jobs through the intake as the schedule's user; the evaluation's id."""
        text = row.config_text if due.model is None else with_model(row.config_text,
                                                                    due.model)
        config = load_text(text, where=row.config_path)
        name, pool = self.d.settings.pool_set.get(row.pool or config.compute.pool)
        plan = make_plan(config, Source(text, row.git_commit, row.git_dirty), pool=name,
                         engine=pool.engine,
                         work_dir=self._folder(config.name, now),
                         config_dir=os.path.dirname(row.config_path) if row.config_path
                         else None)
        make_work_dir(plan)
        message = f"submitted by evaluation schedule {row.id} ({row.name}): {due.note}"

        def send(role: str, spec: dict[str, Any]) -> int:
            spec = {**spec, "tags": [*spec.get("tags", []), f"{TAG}:{row.id}"]}
            try:
                [job] = self.intake.submit([spec], user=row.user, source=SOURCE,
                                           idempotency_key=f"{TAG}:{row.id}:{due.key}:{role}",
                                           numbered=False)
            except RotaError as e:
                raise naming(e, role, spec) from None
            self.d.store.add_event(job_id=job.id, kind=EVENT, now=now, message=message)
            return int(job.id)

        return submit_plan(plan, send, self.d.cancel)["evaluate"]

    def _folder(self, name: str, now: float) -> str:
        """A new folder under ROTA_HOME/eval for one run (runs in the same second apart)."""
        base = os.path.join(self.d.settings.home, "eval", folder_name(name, now))
        folder, n = base, 1
        while os.path.exists(folder):
            n += 1
            folder = f"{base}-{n}"
        return folder

    def _disable(self, row: ScheduleRecord, why: str, now: float) -> None:
        with self.d.batch():
            self.d.store.update_eval_schedule(row.id, enabled=False, disabled_reason=why)
            self.d.store.add_event(job_id=None, kind=EVENT, now=now,
                                   message=f"evaluation schedule {row.id} ({row.name}): {why}")


def _when(ts: float) -> str:
    from datetime import UTC, datetime

    return f"{datetime.fromtimestamp(ts, UTC):%Y-%m-%d %H:%M:%S} UTC"
