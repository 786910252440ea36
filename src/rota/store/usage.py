"""Usage and its limits: GPU hours, quotas and budgets, the alerts outbox.

A part of ``rota.store.repo.Store``: its methods run in the store's unit of work
(``StoreBase.transaction``)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, cast

from sqlalchemy import (
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)

from rota.core.quota import Quota
from rota.core.usage import UsageRecord
from rota.store.base import AlertRecord, StoreBase, _alerts, _attempts, _jobs, _quotas


class UsageRepo(StoreBase):
    # --- usage of the GPUs (rota.core.usage) ----------------------------------------
    def gpu_hours(self, *, now: float) -> dict[str, dict[str, float]]:
        """GPU-hours of every attempt (running ones up to now), by user and by project."""
        j, a = _jobs.c, _attempts.c
        hours = j.gpus * (func.coalesce(a.ended_at, now) - a.started_at) / 3600.0
        out: dict[str, dict[str, float]] = {"by_user": {}, "by_project": {}}
        with self._reading() as c:
            for col, key in ((j.user, "by_user"), (j.project, "by_project")):
                q = select(col, func.sum(hours)).join(_attempts, a.job_id == j.id)
                out[key] = {str(k) if k is not None else "": round(float(v or 0), 6)
                            for k, v in c.execute(q.group_by(col))}
        return out

    def usage(self, since: float, until: float) -> list[UsageRecord]:
        """Every attempt that ran some time inside [since, until), running ones included
        (ended_at None), for accounting (rota.core.usage)."""
        a = _attempts.c
        return self._usage_rows(and_(a.started_at < until,
                                     or_(a.ended_at.is_(None), a.ended_at > since)))

    def usage_after(self, last_id: int, ids: Collection[int]) -> list[UsageRecord]:
        """The attempts stored after attempt ``last_id`` and those of ``ids`` (read again:
        they were running), for a sum kept up to date (rota.server.policy.fair_order)."""
        a = _attempts.c
        return self._usage_rows(or_(a.id > last_id, a.id.in_(list(ids))) if ids
                                else a.id > last_id)

    def job_usage(self, job_id: int) -> list[UsageRecord]:
        """One job's attempts, for accounting (its cost, on its card)."""
        return self._usage_rows(_attempts.c.job_id == job_id)

    def _usage_rows(self, where: Any) -> list[UsageRecord]:
        j, a = _jobs.c, _attempts.c
        q = (select(a.job_id, a.number, j.user, j.project, j.pool, a.backend, j.gpus,
                    a.started_at, a.ended_at, a.tier, a.price, a.idle_seconds, a.gpu_type,
                    a.id)
             .join(_jobs, a.job_id == j.id).where(where).order_by(a.started_at, a.id))
        with self._reading() as c:
            return [UsageRecord._make(row) for row in c.execute(q)]

    def idle_gpu_hours(self, *, since: float | None = None,
                       until: float | None = None) -> dict[str, float]:
        """Wasted GPU-hours by user: what attempts spent holding idle GPUs (rota.core.idle;
        a running attempt's figure as of the daemon's last write of it). ``since`` and
        ``until`` pick attempts by their start."""
        j, a = _jobs.c, _attempts.c
        q = (select(j.user, func.sum(a.idle_seconds) / 3600.0)
             .join(_attempts, a.job_id == j.id).where(a.idle_seconds > 0))
        if since is not None:
            q = q.where(a.started_at >= since)
        if until is not None:
            q = q.where(a.started_at < until)
        with self._reading() as c:
            return {str(u): round(float(h or 0), 6) for u, h in c.execute(q.group_by(j.user))}

    # --- quotas and budgets (rota.core.quota) ---------------------------------------------
    def quotas(self) -> list[Quota]:
        q = _quotas.c
        with self._reading() as c:
            return [Quota(*row) for row in c.execute(
                select(q.kind, q.name, q.what, q.period, q.limit, q.hard, q.lifted_until)
                .order_by(q.kind, q.name, q.what))]

    def set_quota(self, quota: Quota, *, by: str, now: float) -> None:
        """Add or replace the owner's quota on that measure (one per user/project and
        measure)."""
        q = _quotas.c
        with self.transaction() as c:
            c.execute(delete(_quotas).where(q.kind == quota.kind, q.name == quota.name,
                                            q.what == quota.what))
            c.execute(insert(_quotas).values(**quota._asdict(), set_by=by, updated_at=now))

    def lift_quota(self, kind: str, name: str, what: str | None, *, until: float,
                   now: float) -> int:
        """Not enforced before ``until``; how many quotas this touched."""
        q = _quotas.c
        where = [q.kind == kind, q.name == name] + ([q.what == what] if what else [])
        with self.transaction() as c:
            return int(c.execute(update(_quotas).where(*where)
                                 .values(lifted_until=until, updated_at=now)).rowcount)

    def remove_quota(self, kind: str, name: str, what: str | None) -> int:
        q = _quotas.c
        where = [q.kind == kind, q.name == name] + ([q.what == what] if what else [])
        with self.transaction() as c:
            return int(c.execute(delete(_quotas).where(*where)).rowcount)

    # --- the alerts' outbox (rota.server.policy.alert_sender) ------------------------------------
    def add_alert(self, key: str, payload: dict[str, Any], *, now: float,
                  user: str | None = None) -> bool:
        """Store an alert, due at once; False, storing nothing, when one with ``key`` is
        stored already (sent, failed or still pending): each key goes out once. The daemon
        is the only writer, so a read before the insert cannot race another insert."""
        with self.transaction() as c:
            if c.execute(select(_alerts.c.id).where(_alerts.c.key == key)).first():
                return False
            c.execute(insert(_alerts), {"key": key, "user": user, "created_at": now,
                                        "payload": payload, "state": "pending",
                                        "attempts": 0, "next_try_at": now})
        return True

    def due_alerts(self, now: float, *, limit: int = 100) -> list[AlertRecord]:
        """Pending alerts due by ``now``, oldest first."""
        a = _alerts.c
        q = (select(_alerts).where(a.state == "pending", a.next_try_at <= now)
             .order_by(a.next_try_at, a.id).limit(limit))
        with self._reading() as c:
            return list(c.execute(q).all())

    def next_alert_at(self) -> float | None:
        """When the soonest pending alert is due (None: none pending)."""
        a = _alerts.c
        with self._reading() as c:
            found = c.execute(select(func.min(a.next_try_at)).where(a.state == "pending"))
            return cast(float | None, found.scalar())

    def update_alert(self, alert_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_alerts).where(_alerts.c.id == alert_id).values(**fields))

    def alerts_by_key(self, keys: Iterable[str]) -> list[AlertRecord]:
        with self._reading() as c:
            return list(c.execute(select(_alerts).where(_alerts.c.key.in_(list(keys)))).all())

    def alerts(self, *, user: str | None = None, limit: int = 100) -> list[AlertRecord]:
        """The newest alerts first; ``user`` None: everyone's."""
        q = select(_alerts).order_by(_alerts.c.id.desc()).limit(limit)
        if user is not None:
            q = q.where(_alerts.c.user == user)
        with self._reading() as c:
            return list(c.execute(q).all())
