"""What jobs leave: metrics and progress, events; the daemon's settings and paused GPUs.

A part of ``rota.store.repo.Store``: its methods run in the store's unit of work
(``StoreBase.transaction``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    func,
    select,
)
from sqlalchemy.exc import SQLAlchemyError

from rota.core.lifecycle import JobState
from rota.store.base import (
    _ADD_METRICS,
    _JOB_EVENTS,
    _SET_PROGRESS,
    EventRecord,
    MetricRecord,
    StoreBase,
    _attempts,
    _jobs,
    _metrics,
)
from rota.store.failures import store_error
from rota.store.tables import (
    DaemonSettingRow,
    GpuSettingRow,
)


class JobOutputsRepo(StoreBase):
    # --- metrics and progress ------------------------------------------------------------
    def add_metrics(self, rows: Sequence[dict[str, Any]],
                    progress: dict[int, dict[str, Any]]) -> None:
        """Samples (job_id, attempt, ts, step, name, value) and each job's latest progress,
        in one transaction."""
        if self._conn is not None:  # in a batch: the progress joins the job's held update
            if rows:  # (new rows: no held update is about them)
                try:
                    self._conn.execute(_ADD_METRICS, list(rows))
                except SQLAlchemyError as e:  # the batch's, not one item's (see _flush_held)
                    raise store_error("could not write to the database", e,
                                      self.engine.url) from e
            for k, v in progress.items():
                self._hold("job", k, _SET_PROGRESS, {"id_": k, "progress": v})
            return
        with self.transaction() as c:
            if rows:
                c.execute(_ADD_METRICS, list(rows))
            if progress:
                c.execute(_SET_PROGRESS, [{"id_": k, "progress": v} for k, v in progress.items()])

    def metrics(self, job_id: int, *, names: Sequence[str] = (), attempt: int | None = None,
                after_id: int = 0, limit: int = 10_000) -> list[MetricRecord]:
        """A job's samples in the order they were stored, from ``after_id`` (a cursor)."""
        m = _metrics.c
        q = (select(m.id, m.attempt, m.ts, m.step, m.name, m.value)
             .where(m.job_id == job_id, m.id > after_id).order_by(m.id).limit(limit))
        if names:
            q = q.where(m.name.in_(list(names)))
        if attempt is not None:
            q = q.where(m.attempt == attempt)
        with self._reading() as c:
            return list(c.execute(q))

    def last_peaks(self, names: Iterable[str]) -> dict[str, tuple[int, int]]:
        """For each name: (job id, peak GPU memory) of the newest finished attempt of a
        job of that name that recorded one. One query for a whole submit."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        j, a = _jobs.c, _attempts.c
        newest = (select(func.max(a.id).label("attempt"))
                  .join(_jobs, a.job_id == j.id)
                  .where(j.name.in_(wanted), a.peak_gpu_mem.is_not(None),
                         a.ended_at.is_not(None))
                  .group_by(j.name).subquery())
        q = (select(j.name, j.id, a.peak_gpu_mem).join(_attempts, a.job_id == j.id)
             .where(a.id.in_(select(newest.c.attempt))))
        with self._reading() as c:
            return {str(name): (int(jid), int(peak)) for name, jid, peak in c.execute(q)}

    def completed_run_times(self, name: str, *, last: int) -> list[float]:
        """Run times in seconds of the newest ``last`` completed attempts of jobs named
        ``name``, newest first (through ix_jobs_name; what run-time predictions read)."""
        return self.completed_run_times_of([name], last=last).get(name, [])

    def completed_names(self, *, at_most: int) -> set[str] | None:
        """The names of completed jobs (those that may have a run-time history), or None
        when there are more than ``at_most`` of them: a restart then asks about its
        queue's names only where one could have a history."""
        j = _jobs.c
        q = (select(j.name).where(j.state == JobState.COMPLETED.value, j.name.is_not(None))
             .distinct().limit(at_most + 1))
        with self._reading() as c:
            found = {str(name) for (name,) in c.execute(q)}
        return found if len(found) <= at_most else None

    def completed_run_times_of(self, names: Iterable[str], *, last: int,
                               chunk: int = 2_000) -> dict[str, list[float]]:
        """:meth:`completed_run_times` of many names, a query per ``chunk`` of them (a
        submit of 100 jobs or a restart's queue asks once, not once per job); names
        without a completed run are left out."""
        j, a = _jobs.c, _attempts.c
        out: dict[str, list[float]] = {}
        wanted = list(dict.fromkeys(names))
        with self._reading() as c:
            for k in range(0, len(wanted), chunk):
                newest = func.row_number().over(partition_by=j.name,
                                                order_by=a.id.desc()).label("newest")
                runs = (select(j.name, (a.ended_at - a.started_at).label("took"), newest)
                        .select_from(_attempts).join(_jobs, a.job_id == j.id)
                        .where(j.name.in_(wanted[k:k + chunk]), a.outcome == "completed",
                               a.ended_at.is_not(None))
                        .subquery())
                q = (select(runs.c.name, runs.c.took).where(runs.c.newest <= last)
                     .order_by(runs.c.name, runs.c.newest))
                for name, took in c.execute(q):
                    out.setdefault(str(name), []).append(max(0.0, float(took)))
        return out

    # --- events and settings -------------------------------------------------------------
    def add_event(self, *, job_id: int | None, kind: str, now: float,
                  message: str | None = None) -> None:
        if self._conn is not None:  # written with the batch's other events
            self._event(job_id, now, kind, message)
            return
        with self.transaction():
            self._event(job_id, now, kind, message)

    def events(self, job_id: int) -> list[EventRecord]:
        with self._reading() as c:
            return list(c.execute(_JOB_EVENTS, {"job_id": job_id}).all())

    def paused_gpus(self) -> dict[str, int]:
        with self.session() as s:
            return {r.uuid: r.index for r in s.scalars(
                select(GpuSettingRow).where(GpuSettingRow.paused.is_(True)))}

    def set_gpu_paused(self, uuid: str, index: int, paused: bool) -> None:
        with self.session() as s, s.begin():
            row = s.get(GpuSettingRow, uuid)
            if row is None:
                s.add(GpuSettingRow(uuid=uuid, index=index, paused=paused))
            else:
                row.paused, row.index = paused, index

    def get_setting(self, key: str, default: str | None = None) -> str | None:
        with self.session() as s:
            row = s.get(DaemonSettingRow, key)
            return row.value if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self.session() as s, s.begin():
            row = s.get(DaemonSettingRow, key)
            if row is None:
                s.add(DaemonSettingRow(key=key, value=value))
            else:
                row.value = value
