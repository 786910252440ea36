"""Storage records: artifacts, share links, workspaces' own quotas, datasets.

A part of ``rota.store.repo.Store``: its methods run in the store's unit of work
(``StoreBase.transaction``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import (
    delete,
    func,
    insert,
    select,
    update,
)

from rota.core.lifecycle import TERMINAL
from rota.store.base import (
    ArtifactRecord,
    DatasetRecord,
    ShareLinkRecord,
    StoreBase,
    _artifacts,
    _datasets,
    _job_datasets,
    _jobs,
    _links,
    _ws_quotas,
)


class StorageRepo(StoreBase):
    # --- artifacts: what a job's outputs saved (rota.server.storage.artifacts) -------------------
    def want_artifacts(self, job_id: int, *, key: str, store_url: str,
                       sources: dict[str, str], user: str, now: float) -> None:
        """The job's outputs are to be saved: a ``pending`` row, written in the open
        transaction (the batch that records the job's end) or one of its own."""
        a = _artifacts.c
        with self.transaction() as c:
            c.execute(delete(_artifacts).where(a.job_id == job_id))
            c.execute(insert(_artifacts), {"job_id": job_id, "state": "pending", "key": key,
                                           "store_url": store_url, "sources": sources,
                                           "user": user, "tries": 0, "requested_at": now})

    def set_artifacts(self, job_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_artifacts).where(_artifacts.c.job_id == job_id).values(**fields))

    def artifacts(self, job_id: int) -> ArtifactRecord | None:
        with self._reading() as c:
            return c.execute(select(_artifacts).where(_artifacts.c.job_id == job_id)).first()

    def artifacts_in(self, state: str) -> list[ArtifactRecord]:
        """Rows in ``state``, oldest request first."""
        a = _artifacts.c
        with self._reading() as c:
            return list(c.execute(select(_artifacts).where(a.state == state)
                                  .order_by(a.requested_at, a.job_id)).all())

    # --- links to saved outputs (rota share-link) -------------------------------------------
    def add_share_link(self, *, digest: str, job_id: int, path: str | None, by: str,
                       now: float, expires_at: float) -> ShareLinkRecord:
        with self.transaction() as c:
            return c.execute(insert(_links).returning(*_links.c), {
                "digest": digest, "job_id": job_id, "path": path, "created_by": by,
                "created_at": now, "expires_at": expires_at, "downloads": 0}).one()

    def share_link(self, *, link_id: int | None = None,
                   digest: str | None = None) -> ShareLinkRecord | None:
        where = _links.c.id == link_id if link_id is not None else _links.c.digest == digest
        with self._reading() as c:
            return c.execute(select(_links).where(where)).first()

    def share_links(self, *, job_id: int | None = None,
                    user: str | None = None) -> list[ShareLinkRecord]:
        """Newest first; those of one job, or made by one user."""
        q = select(_links).order_by(_links.c.id.desc())
        if job_id is not None:
            q = q.where(_links.c.job_id == job_id)
        if user is not None:
            q = q.where(_links.c.created_by == user)
        with self._reading() as c:
            return list(c.execute(q).all())

    def update_share_link(self, link_id: int, **fields: Any) -> None:
        with self.transaction() as c:
            c.execute(update(_links).where(_links.c.id == link_id).values(**fields))

    # --- workspaces' own quotas (rota.server.storage.workspaces) --------------------------------
    def workspace_quotas(self) -> dict[str, int]:
        with self._reading() as c:
            return {n: int(lim) for n, lim in c.execute(select(_ws_quotas.c.name,
                                                               _ws_quotas.c.limit))}

    def set_workspace_quota(self, name: str, limit: int | None, *, by: str,
                            now: float) -> None:
        """``limit`` None: back to the default."""
        with self.transaction() as c:
            c.execute(delete(_ws_quotas).where(_ws_quotas.c.name == name))
            if limit is not None:
                c.execute(insert(_ws_quotas), {"name": name, "limit": limit, "set_by": by,
                                               "set_at": now})

    # --- datasets (rota.server.storage.datasets) -------------------------------------------------
    def add_dataset_version(self, *, owner: str, name: str, digest: str, key: str,
                            store_url: str, shared: bool, files: int, size: int, source: str,
                            description: str | None, by: str, now: float,
                            ) -> tuple[DatasetRecord, bool]:
        """The version with this content: made, numbered after every version the dataset
        ever had, unless it exists (a removed one with this content comes back with its
        number); True when it was made or came back."""
        d = _datasets.c
        with self.transaction() as c:
            found = c.execute(select(_datasets).where(
                d.owner == owner, d.name == name, d.digest == digest)).first()
            if found is not None and found.removed_at is None:
                return found, False
            values = {"key": key, "store_url": store_url, "shared": shared, "files": files,
                      "bytes": size, "source": source, "description": description,
                      "created_by": by, "created_at": now, "removed_at": None}
            if found is not None:
                return c.execute(update(_datasets).where(d.id == found.id).values(**values)
                                 .returning(*_datasets.c)).one(), True
            last = c.execute(select(func.max(d.version)).where(
                d.owner == owner, d.name == name)).scalar()
            return c.execute(insert(_datasets).returning(*_datasets.c), {
                **values, "owner": owner, "name": name, "version": (last or 0) + 1,
                "digest": digest}).one(), True

    def dataset_versions(self, *, owner: str | None = None, name: str | None = None,
                         ) -> list[DatasetRecord]:
        """Versions not removed, in (owner, name, version) order; of one owner, or one
        dataset."""
        d = _datasets.c
        q = select(_datasets).where(d.removed_at.is_(None)).order_by(d.owner, d.name,
                                                                      d.version)
        if owner is not None:
            q = q.where(d.owner == owner)
        if name is not None:
            q = q.where(d.name == name)
        with self._reading() as c:
            return list(c.execute(q).all())

    def remove_dataset_versions(self, ids: Collection[int], *, now: float) -> None:
        """Removed (their numbers are kept: never given to other content)."""
        with self.transaction() as c:
            c.execute(update(_datasets).where(_datasets.c.id.in_(list(ids)))
                      .values(removed_at=now))

    def jobs_using(self, refs: Collection[str], *, live: bool = True,
                   ) -> list[tuple[int, str, str]]:
        """(job id, ref, state) of the jobs that read these dataset versions; ``live``:
        only those not ended."""
        jd, j = _job_datasets.c, _jobs.c
        q = (select(jd.job_id, jd.ref, j.state).join(_jobs, j.id == jd.job_id)
             .where(jd.ref.in_(list(refs))).order_by(jd.job_id))
        if live:
            q = q.where(j.state.not_in([s.value for s in TERMINAL]))
        with self._reading() as c:
            return [(int(i), r, s) for i, r, s in c.execute(q)]

    def live_dataset_uses(self) -> list[tuple[int, str, str, str | None]]:
        """(job id, ref, state, pool) of every job not ended that reads a dataset
        version (pool None: this machine's)."""
        jd, j = _job_datasets.c, _jobs.c
        q = (select(jd.job_id, jd.ref, j.state, j.pool).join(_jobs, j.id == jd.job_id)
             .where(j.state.not_in([s.value for s in TERMINAL])).order_by(jd.job_id))
        with self._reading() as c:
            return [(int(i), r, s, p) for i, r, s, p in c.execute(q)]
