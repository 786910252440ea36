"""Recurring work: evaluation schedules, pipelines and their rounds.

A part of ``rota.store.repo.Store``: its methods run in the store's unit of work
(``StoreBase.transaction``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from rota.errors import Conflict, NotFound
from rota.store.base import (
    _MAX_ID,
    PipelineRecord,
    RoundRecord,
    ScheduleRecord,
    StoreBase,
    _pipelines,
    _rounds,
    _schedules,
)


class SchedulesRepo(StoreBase):
    # --- evaluation schedules (rota.server.schedules.eval_schedules) ----------------------
    def add_eval_schedule(self, *, now: float, **fields: Any) -> ScheduleRecord:
        """Store a schedule, enabled; its row back."""
        values = {"evaluated": [], "runs": 0, "enabled": True, **fields, "created_at": now}
        with self.transaction() as c:
            return c.execute(insert(_schedules).returning(*_schedules.c), values).one()

    def eval_schedule(self, schedule_id: int) -> ScheduleRecord:
        row = None
        if 0 < schedule_id <= _MAX_ID:
            with self._reading() as c:
                row = c.execute(select(_schedules).where(_schedules.c.id == schedule_id)).first()
        if row is None:
            raise NotFound(f"no evaluation schedule {schedule_id}")
        return row

    def eval_schedules(self, *, user: str | None = None,
                       enabled: bool | None = None) -> list[ScheduleRecord]:
        """Oldest first; ``user``/``enabled`` None: any."""
        s = _schedules.c
        q = select(_schedules).order_by(s.id)
        if user is not None:
            q = q.where(s.user == user)
        if enabled is not None:
            q = q.where(s.enabled.is_(enabled))
        with self._reading() as c:
            return list(c.execute(q).all())

    def update_eval_schedule(self, schedule_id: int, **fields: Any) -> None:
        """Change a schedule in the open transaction (the daemon's submit of its jobs), or
        in one of its own."""
        with self.transaction() as c:
            c.execute(update(_schedules).where(_schedules.c.id == schedule_id).values(**fields))

    def remove_eval_schedule(self, schedule_id: int) -> None:

        with self.transaction() as c:
            if not c.execute(delete(_schedules).where(_schedules.c.id == schedule_id)).rowcount:
                raise NotFound(f"no evaluation schedule {schedule_id}")

    # --- pipelines and their rounds (rota.server.schedules.pipelines) ---------------------
    def add_pipeline(self, *, now: float, **fields: Any) -> PipelineRecord:
        """Store a pipeline; its row back (Conflict when the name is taken)."""
        values = {"rounds": 0, "failures": 0, **fields, "created_at": now}
        try:
            with self.transaction() as c:
                return c.execute(insert(_pipelines).returning(*_pipelines.c), values).one()
        except IntegrityError:
            raise Conflict(f"a pipeline named {fields.get('name')!r} exists: remove it "
                           "first (rota pipeline rm) or choose another name") from None

    def pipeline(self, key: int | str) -> PipelineRecord:
        """By id or by name."""
        p = _pipelines.c
        where = p.id == key if isinstance(key, int) else p.name == key
        with self._reading() as c:
            row = c.execute(select(_pipelines).where(where)).first()
        if row is None:
            raise NotFound(f"no pipeline {key!r}" if isinstance(key, str)
                           else f"no pipeline {key}")
        return row

    def pipelines(self, *, user: str | None = None) -> list[PipelineRecord]:
        q = select(_pipelines).order_by(_pipelines.c.id)
        if user is not None:
            q = q.where(_pipelines.c.user == user)
        with self._reading() as c:
            return list(c.execute(q).all())

    def update_pipeline(self, pipeline_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_pipelines).where(_pipelines.c.id == pipeline_id)
                      .values(**fields))

    def remove_pipeline(self, pipeline_id: int) -> None:
        """The pipeline and its rounds' records (their jobs stay)."""

        with self.transaction() as c:
            c.execute(delete(_rounds).where(_rounds.c.pipeline_id == pipeline_id))
            if not c.execute(delete(_pipelines).where(_pipelines.c.id == pipeline_id)
                             ).rowcount:
                raise NotFound(f"no pipeline {pipeline_id}")

    def add_round(self, **fields: Any) -> RoundRecord:
        values = {"jobs": {}, "facts": {}, **fields}
        with self.transaction() as c:
            return c.execute(insert(_rounds).returning(*_rounds.c), values).one()

    def update_round(self, round_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_rounds).where(_rounds.c.id == round_id).values(**fields))

    def rounds(self, pipeline_id: int | None = None, *, state: str | None = None,
               limit: int | None = None) -> list[RoundRecord]:
        """Newest first."""
        r = _rounds.c
        q = select(_rounds).order_by(r.id.desc())
        if pipeline_id is not None:
            q = q.where(r.pipeline_id == pipeline_id)
        if state is not None:
            q = q.where(r.state == state)
        if limit is not None:
            q = q.limit(limit)
        with self._reading() as c:
            return list(c.execute(q).all())
