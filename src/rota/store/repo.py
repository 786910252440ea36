"""The store: every read and write of durable state. Only the daemon writes through it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from rota.core.lifecycle import TERMINAL, JobState, check_transition
from rota.core.spec import JobSpec
from rota.errors import NotFound, StoreError
from rota.store.db import make_engine, migrate
from rota.store.tables import AttemptRow, DaemonSettingRow, EventRow, GpuSettingRow, JobRow

_RETRYABLE_HASH_STATES = [s.value for s in (JobState.FAILED, JobState.CANCELLED,
                                            JobState.TIMEOUT)]


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str) -> Store:
        engine = make_engine(url)
        migrate(engine)
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    def session(self) -> Session:
        return self._session()

    # --- jobs ----------------------------------------------------------------------------
    def add_jobs(self, specs: Sequence[JobSpec], *, user: str, source: str, now: float,
                 idempotency_key: str | None = None) -> list[JobRow]:
        """Insert jobs as PENDING (or HELD) with a 'submitted' event, in one transaction."""
        rows: list[JobRow] = []
        try:
            with self.session() as s, s.begin():
                for n, spec in enumerate(specs):
                    key = idempotency_key if n == 0 or idempotency_key is None \
                        else f"{idempotency_key}#{n}"
                    state = JobState.HELD if spec.hold else JobState.PENDING
                    row = JobRow(name=spec.name, user=user, state=state.value,
                                 spec=spec.model_dump(mode="json"), priority=spec.priority,
                                 gpus=spec.gpus, gpu_mem=spec.gpu_mem,
                                 content_hash=spec.content_hash(), idempotency_key=key,
                                 source=source, created_at=now, updated_at=now)
                    s.add(row)
                    rows.append(row)
                s.flush()
                s.add_all(EventRow(job_id=r.id, ts=now, kind="submitted", to_state=r.state,
                                   message=f"submitted by {user or 'unknown'} via {source}")
                          for r in rows)
        except IntegrityError as e:
            raise StoreError(f"could not store the job: {e.orig}") from e
        except SQLAlchemyError as e:
            raise StoreError(f"could not store the job: {e}") from e
        return rows

    def job_by_idempotency_key(self, key: str) -> JobRow | None:
        with self.session() as s:
            return s.scalars(select(JobRow).where(JobRow.idempotency_key == key)).first()

    def live_hashes(self, hashes: Iterable[str]) -> set[str]:
        """Hashes that already have a job that did not fail (failed jobs may be queued again)."""
        hs = list(set(hashes))
        found: set[str] = set()
        with self.session() as s:
            for i in range(0, len(hs), 500):
                q = select(JobRow.content_hash).where(
                    JobRow.content_hash.in_(hs[i:i + 500]),
                    JobRow.state.not_in(_RETRYABLE_HASH_STATES))
                found.update(s.scalars(q))
        return found

    def get_job(self, job_id: int) -> JobRow:
        with self.session() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise NotFound(f"no job {job_id}")
            return row

    def jobs(self, ids: Iterable[int]) -> dict[int, JobRow]:
        idl = list(ids)
        out: dict[int, JobRow] = {}
        with self.session() as s:
            for i in range(0, len(idl), 500):
                out.update((r.id, r) for r in s.scalars(
                    select(JobRow).where(JobRow.id.in_(idl[i:i + 500]))))
        return out

    def list_jobs(self, *, states: Sequence[str] | None = None, user: str | None = None,
                  name: str | None = None, limit: int = 200, before_id: int | None = None,
                  ) -> list[JobRow]:
        q = select(JobRow).order_by(JobRow.id.desc()).limit(limit)
        if states:
            q = q.where(JobRow.state.in_(list(states)))
        if user:
            q = q.where(JobRow.user == user)
        if name:
            q = q.where(JobRow.name.contains(name))
        if before_id is not None:
            q = q.where(JobRow.id < before_id)
        with self.session() as s:
            return list(s.scalars(q))

    def active_jobs(self) -> list[JobRow]:
        """Every job that is not finished, oldest first: what a restarted daemon takes up."""
        terminal = [t.value for t in TERMINAL]
        with self.session() as s:
            return list(s.scalars(select(JobRow).where(JobRow.state.not_in(terminal))
                                  .order_by(JobRow.id)))

    def count_by_state(self) -> dict[str, int]:
        with self.session() as s:
            return {st: n for st, n in s.execute(
                select(JobRow.state, func.count()).group_by(JobRow.state))}

    def transition(self, job_id: int, src: JobState, dst: JobState, *, now: float,
                   message: str | None = None, kind: str | None = None,
                   **fields: Any) -> None:
        """Move a job from src to dst (checked against the table and the stored state)."""
        check_transition(job_id, src, dst)
        with self.session() as s, s.begin():
            res = s.execute(update(JobRow).where(JobRow.id == job_id,
                                                 JobRow.state == src.value)
                            .values(state=dst.value, updated_at=now, **fields))
            if res.rowcount != 1:  # type: ignore[attr-defined]
                current = s.scalar(select(JobRow.state).where(JobRow.id == job_id))
                if current is None:
                    raise NotFound(f"no job {job_id}")
                check_transition(job_id, JobState(current), dst)
                raise StoreError(f"job {job_id} is {current}, expected {src.value}")
            s.add(EventRow(job_id=job_id, ts=now, kind=kind or dst.value,
                           from_state=src.value, to_state=dst.value, message=message))

    def update_job(self, job_id: int, **fields: Any) -> None:
        with self.session() as s, s.begin():
            s.execute(update(JobRow).where(JobRow.id == job_id).values(**fields))

    # --- attempts ------------------------------------------------------------------------
    def add_attempt(self, row: AttemptRow) -> AttemptRow:
        with self.session() as s, s.begin():
            s.add(row)
        return row

    def start_attempt(self, job_id: int, attempt: AttemptRow, *, now: float,
                      message: str) -> AttemptRow:
        """Write-ahead launch intent: PENDING -> STARTING and the attempt, in one commit."""
        check_transition(job_id, JobState.PENDING, JobState.STARTING)
        with self.session() as s, s.begin():
            res = s.execute(update(JobRow).where(JobRow.id == job_id,
                                                 JobRow.state == JobState.PENDING.value)
                            .values(state=JobState.STARTING.value, updated_at=now,
                                    attempts=attempt.number, not_before=None))
            if res.rowcount != 1:  # type: ignore[attr-defined]
                raise StoreError(f"job {job_id} is no longer pending")
            s.add(attempt)
            s.add(EventRow(job_id=job_id, ts=now, kind="starting",
                           from_state=JobState.PENDING.value,
                           to_state=JobState.STARTING.value, message=message))
        return attempt

    def update_attempt(self, attempt_id: int, **fields: Any) -> None:
        with self.session() as s, s.begin():
            s.execute(update(AttemptRow).where(AttemptRow.id == attempt_id).values(**fields))

    def attempts(self, job_id: int) -> list[AttemptRow]:
        with self.session() as s:
            return list(s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id)
                                  .order_by(AttemptRow.number)))

    def last_attempts(self, job_ids: Iterable[int]) -> dict[int, AttemptRow]:
        idl = list(job_ids)
        out: dict[int, AttemptRow] = {}
        with self.session() as s:
            for i in range(0, len(idl), 500):
                for a in s.scalars(select(AttemptRow).where(AttemptRow.job_id.in_(idl[i:i + 500]))
                                   .order_by(AttemptRow.number)):
                    out[a.job_id] = a
        return out

    # --- events and settings -------------------------------------------------------------
    def add_event(self, *, job_id: int | None, kind: str, now: float,
                  message: str | None = None) -> None:
        with self.session() as s, s.begin():
            s.add(EventRow(job_id=job_id, ts=now, kind=kind, message=message))

    def events(self, job_id: int) -> list[EventRow]:
        with self.session() as s:
            return list(s.scalars(select(EventRow).where(EventRow.job_id == job_id)
                                  .order_by(EventRow.id)))

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
