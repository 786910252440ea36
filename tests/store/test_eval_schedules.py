"""Evaluation schedules in the store (SQLite and PostgreSQL): stored, listed per user,
changed in the transaction that submits their jobs (or not at all), removed."""

from __future__ import annotations

import pytest

from rota.core.spec import JobSpec
from rota.errors import NotFound, StoreError
from rota.store.repo import Store


def _add(store: Store, user: str = "ann", **kw) -> int:  # type: ignore[no-untyped-def]
    fields = {"user": user, "name": "qwen-arc", "config_text": "version: 1\n",
              "config_path": "/x/eval.yaml", "git_commit": "a" * 40, "git_dirty": False,
              "pool": None, "kind": "every", "every_s": 60.0, "next_at": 70.0, **kw}
    return int(store.add_eval_schedule(now=10.0, **fields).id)


def test_a_schedule_is_stored_enabled_and_read_back(store: Store) -> None:
    sid = _add(store)
    row = store.eval_schedule(sid)
    assert (row.user, row.kind, row.every_s, row.next_at, row.enabled) == \
        ("ann", "every", 60.0, 70.0, True)
    assert (row.evaluated, row.runs, row.last_job, row.created_at) == ([], 0, None, 10.0)
    assert row.git_commit == "a" * 40 and row.git_dirty is False
    with pytest.raises(NotFound, match="no evaluation schedule 999"):
        store.eval_schedule(999)


def test_schedules_are_listed_per_user_and_by_whether_enabled(store: Store) -> None:
    a = _add(store, "ann")
    b = _add(store, "bob", kind="after_job", every_s=None, next_at=None, job_id=5)
    store.update_eval_schedule(b, enabled=False, disabled_reason="job 5 failed")
    assert [r.id for r in store.eval_schedules()] == [a, b]
    assert [r.id for r in store.eval_schedules(user="bob")] == [b]
    assert [r.id for r in store.eval_schedules(enabled=True)] == [a]
    assert store.eval_schedule(b).disabled_reason == "job 5 failed"


def test_a_schedule_moves_with_the_jobs_submitted_in_one_transaction(store: Store) -> None:
    """The due check's write: the evaluation's job and the schedule's next time commit
    together, or neither does."""
    sid = _add(store, kind="checkpoint", every_s=None, next_at=None, job_id=3)
    with store.transaction():
        [job] = store.add_jobs([JobSpec(command=["true"])], user="ann", source="schedule",
                               now=11.0)
        store.update_eval_schedule(sid, evaluated=["/c/step_1.pt"], runs=1, last_job=job.id)
    row = store.eval_schedule(sid)
    assert (row.evaluated, row.runs, row.last_job) == (["/c/step_1.pt"], 1, job.id)
    with pytest.raises(StoreError), store.transaction():
        store.add_jobs([JobSpec(command=["true"])], user="ann", source="schedule", now=12.0)
        store.update_eval_schedule(sid, evaluated=["/c/step_1.pt", "/c/step_2.pt"], runs=2)
        raise StoreError("the commit failed")
    assert store.eval_schedule(sid).runs == 1
    assert store.count_by_state() == {"pending": 1}


def test_a_removed_schedule_is_gone(store: Store) -> None:
    sid = _add(store)
    store.remove_eval_schedule(sid)
    assert store.eval_schedules() == []
    with pytest.raises(NotFound):
        store.remove_eval_schedule(sid)
