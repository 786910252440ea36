"""Quotas persist (set, replace, lift, remove), and the queue
read at start-up carries each pending job's owner for the pass's quota check."""

from __future__ import annotations

from rota.core.quota import Quota
from rota.core.spec import JobSpec
from rota.store.repo import Store


def test_quotas_persist_and_one_per_owner_and_measure(store: Store, db_url: str) -> None:
    store.set_quota(Quota("user", "alice", "gpus", "none", 4), by="root", now=1.0)
    store.set_quota(Quota("project", "vision", "gpu_hours", "week", 96), by="root", now=1.0)
    store.set_quota(Quota("project", "vision", "gpu_hours", "month", 300, hard=True),
                    by="root", now=2.0)  # replaces the weekly one
    store.close()
    again = Store.open(db_url)
    try:
        assert again.quotas() == [
            Quota("project", "vision", "gpu_hours", "month", 300.0, True, None),
            Quota("user", "alice", "gpus", "none", 4.0, False, None)]
        assert again.lift_quota("project", "vision", None, until=50.0, now=3.0) == 1
        assert again.quotas()[0].lifted_until == 50.0
        assert again.remove_quota("user", "alice", "gpus") == 1
        assert again.remove_quota("user", "nobody", None) == 0
        assert [q.name for q in again.quotas()] == ["vision"]
    finally:
        again.close()


def test_the_queue_carries_owner_and_project(store: Store) -> None:
    a, b = store.add_jobs([JobSpec(command=["true"], project="vision"),
                           JobSpec(command=["true"], after=[1])],
                          user="alice", source="cli", now=0.0)
    pending = store.queued(mlflow_default=False).pending
    assert [(p.id, p.user, p.project) for p in pending] == [(a.id, "alice", "vision"),
                                                            (b.id, "alice", None)]
