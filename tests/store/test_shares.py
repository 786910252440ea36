"""Fair shares kept in the store, and the owner and submission time the queue loads with."""

from __future__ import annotations

import pytest

from rota.core.spec import JobSpec
from rota.store.repo import Store


def test_shares_are_kept_and_set_again(store: Store, db_url: str) -> None:
    assert store.shares() == {"user": {}, "project": {}}
    store.set_share("user", "alice", 2.0, now=1.0)
    store.set_share("project", "vision", 3.0, now=1.0)
    store.set_share("user", "alice", 0.5, now=2.0)
    store.close()
    again = Store.open(db_url)  # persisted, not held in memory
    try:
        assert again.shares() == {"user": {"alice": 0.5}, "project": {"vision": 3.0}}
    finally:
        again.close()


def test_a_share_of_an_unknown_kind_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="user's or a project's"):
        store.set_share("team", "x", 1.0, now=0.0)


def test_the_queue_loads_with_each_job_s_owner_project_and_submission(store: Store) -> None:
    store.add_jobs([JobSpec(command=["true"], project="vision")], user="ann", source="cli",
                   now=10.0)
    store.add_jobs([JobSpec(command=["true"])], user="bob", source="cli", now=20.0)
    got = store.queued(mlflow_default=False).pending
    assert [(j.user, j.project, j.submitted) for j in got] == [
        ("ann", "vision", 10.0), ("bob", None, 20.0)]
