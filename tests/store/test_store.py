"""The store on SQLite and PostgreSQL: the same behaviour on both."""

from __future__ import annotations

from pathlib import Path

import pytest

from rota.core.lifecycle import JobState
from rota.core.spec import JobSpec
from rota.errors import IllegalTransition, NotFound, StoreError
from rota.store.repo import Store


def spec(**kw) -> JobSpec:  # type: ignore[no-untyped-def]
    return JobSpec.model_validate({"command": ["true"], **kw})


def test_add_and_read_jobs_with_events(store: Store):
    rows = store.add_jobs([spec(name="a"), spec(hold=True)], user="ann", source="cli", now=1.0)
    assert [r.state for r in rows] == ["pending", "held"]
    got = store.get_job(rows[0].id)
    assert got.user == "ann" and got.spec["command"] == ["true"] and got.name == "a"
    assert [e.kind for e in store.events(rows[0].id)] == ["submitted"]
    assert store.count_by_state() == {"pending": 1, "held": 1}
    assert [store.count_in_state(s) for s in ("held", "pending", "running")] == [1, 1, 0]
    for missing in (999_999, 0, -1, 2**80):  # ids no column holds: not found either
        with pytest.raises(NotFound):
            store.get_job(missing)


def test_transitions_follow_the_table_and_are_checked_against_the_stored_state(store: Store):
    [row] = store.add_jobs([spec()], user="u", source="cli", now=1.0)
    store.transition(row.id, JobState.PENDING, JobState.HELD, now=2.0, message="held")
    with pytest.raises(IllegalTransition):
        store.transition(row.id, JobState.HELD, JobState.RUNNING, now=3.0)
    with pytest.raises(StoreError):  # claims the job is pending: it is held
        store.transition(row.id, JobState.PENDING, JobState.CANCELLED, now=3.0)
    store.transition(row.id, JobState.HELD, JobState.CANCELLED, now=4.0)
    with pytest.raises(IllegalTransition):  # terminal states are final
        store.transition(row.id, JobState.CANCELLED, JobState.PENDING, now=5.0)
    assert [e.to_state for e in store.events(row.id)] == ["pending", "held", "cancelled"]


def test_write_ahead_start_and_attempts(store: Store):
    [row] = store.add_jobs([spec(gpus=2)], user="u", source="cli", now=1.0)
    att = {"number": 1, "gpu_indices": [0, 1], "gpu_uuids": [], "milli": 1000, "gpu_mem": None,
           "backend": "local", "log_path": "/x.log", "status_path": "/x.json",
           "started_at": 2.0}
    assert set(store.launch_info([row.id])) == {row.id}
    [other] = store.add_jobs([spec(name="o")], user="v", source="cli", now=1.5)
    both = store.launch_info([row.id, other.id], spec_known={other.id})
    assert both[row.id].spec == row.spec and both[other.id].spec is None  # (not read)
    assert both[other.id]._replace(spec=other.spec) == \
        store.launch_info([other.id])[other.id]
    store.transition(other.id, JobState.PENDING, JobState.CANCELLED, now=1.7)  # (not active)
    [att_id] = store.start_attempts([(row.id, att, "attempt 1")], now=2.0)
    assert store.get_job(row.id).state == "starting"
    assert store.launch_info([row.id]) == {}  # no longer pending: not to be started
    with pytest.raises(StoreError):  # a second start of the same job is refused
        store.start_attempts([(row.id, {**att, "number": 2, "gpu_indices": [2]}, "again")],
                             now=3.0)
    assert len(store.attempts(row.id)) == 1
    store.update_attempt(att_id, handle={"pid": 5}, exit_code=0, ended_at=4.0)
    [a] = store.attempts(row.id)
    assert a.handle == {"pid": 5} and a.gpu_indices == [0, 1]
    assert store.last_attempts([row.id])[row.id].number == 1
    assert [r.id for r in store.active_jobs()] == [row.id]


def _attempt(number: int, gpu: int) -> dict[str, object]:
    return {"number": number, "gpu_indices": [gpu], "gpu_uuids": [], "milli": 250,
            "gpu_mem": None, "backend": "local", "log_path": f"/{gpu}.log",
            "status_path": f"/{gpu}.json", "started_at": 2.0}


def test_idle_gpu_hours_sum_attempts_idle_seconds_by_user(store: Store):
    """Wasted GPU-hours (docs/policy.md, Idle GPUs) come from the attempts' idle seconds,
    by user; since/until pick attempts by their start; a new attempt holds 0."""
    ann1, ann2, bob = store.add_jobs([spec(), spec()], user="ann", source="cli", now=1.0) + \
        store.add_jobs([spec()], user="bob", source="cli", now=1.0)
    ids = store.start_attempts([(j.id, {**_attempt(1, i), "started_at": 10.0 * (i + 1)}, "go")
                                for i, j in enumerate((ann1, ann2, bob))], now=2.0)
    assert [a.idle_seconds for a in store.attempts(ann1.id)] == [0.0]
    assert store.idle_gpu_hours() == {}
    for att_id, secs in zip(ids, (3600.0, 1800.0, 720.0), strict=True):
        store.update_attempt(att_id, idle_seconds=secs)
    assert store.idle_gpu_hours() == {"ann": 1.5, "bob": 0.2}
    assert store.idle_gpu_hours(since=15.0) == {"ann": 0.5, "bob": 0.2}
    assert store.idle_gpu_hours(until=25.0) == {"ann": 1.5}


def test_a_batch_of_starts_is_all_or_none_and_gives_each_job_its_attempt(store: Store):
    a, held, b = store.add_jobs([spec(), spec(hold=True), spec()], user="u", source="cli",
                                now=1.0)
    assert set(store.launch_info([a.id, held.id, b.id])) == {a.id, b.id}
    with pytest.raises(StoreError):  # the held one fails the batch: nothing is stored
        store.start_attempts([(a.id, _attempt(1, 0), "a on 0"),
                              (held.id, _attempt(1, 1), "held on 1")], now=2.0)
    assert store.get_job(a.id).state == "pending" and not store.attempts(a.id)
    ids = store.start_attempts([(a.id, _attempt(1, 0), "a on 0"),
                                (b.id, _attempt(1, 2), "b on 2")], now=2.0)
    for job, gpu, attempt_id in ((a, 0, ids[0]), (b, 2, ids[1])):
        [att] = store.attempts(job.id)  # each attempt id belongs to its own job
        assert att.id == attempt_id and att.gpu_indices == [gpu]
        assert store.get_job(job.id).state == "starting"
        assert [e.message for e in store.events(job.id)][-1] == f"{'ab'[gpu // 2]} on {gpu}"


def test_updates_held_in_a_batch_are_seen_by_its_reads_and_keep_their_order(store: Store):
    rows = store.add_jobs([spec() for _ in range(3)], user="u", source="cli", now=1.0)
    ids = dict(zip([r.id for r in rows], store.start_attempts(
        [(r.id, _attempt(1, n), "go") for n, r in enumerate(rows)], now=2.0), strict=True))
    with store.transaction():
        for r in rows:
            store.update_attempt(ids[r.id], handle={"pid": r.id})
            store.transition(r.id, JobState.STARTING, JobState.RUNNING, now=3.0,
                             started_at=2.0)
        assert store.get_job(rows[0].id).state == "running"  # a read sees the held writes
        # the same row twice in one batch: the second change meets the first's result
        store.transition(rows[1].id, JobState.RUNNING, JobState.COMPLETED, now=4.0,
                         exit_code=0)
        store.update_attempt(ids[rows[1].id], exit_code=0, ended_at=4.0)
        store.transition(rows[2].id, JobState.RUNNING, JobState.FAILED, now=4.0, exit_code=3)
    assert [store.get_job(r.id).state for r in rows] == ["running", "completed", "failed"]
    assert [store.attempts(r.id)[0].handle for r in rows] == [{"pid": r.id} for r in rows]
    assert store.attempts(rows[1].id)[0].exit_code == 0
    assert [e.to_state for e in store.events(rows[1].id)] == \
        ["pending", "starting", "running", "completed"]


def test_changes_of_one_row_in_a_batch_are_written_as_one_update(
        store: Store, caplog: pytest.LogCaptureFixture):
    """A job started, read and ended within one batch (its launch answered just before its
    exit): one UPDATE of its row and one of its attempt's, doing what each change in turn
    would; a move from a state the first did not leave it in is written after it, and
    changes nothing (logged)."""
    from sqlalchemy import event

    a, b = store.add_jobs([spec(), spec()], user="u", source="cli", now=1.0)
    [att, _] = store.start_attempts([(a.id, _attempt(1, 0), "go"), (b.id, _attempt(1, 1), "go")],
                                    now=2.0)
    updates: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().startswith("UPDATE"):
            updates.append(statement.split()[1])

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        with store.transaction():
            store.update_attempt(att, handle={"pid": 7})
            store.transition(a.id, JobState.STARTING, JobState.RUNNING, now=3.0, started_at=2.5)
            store.add_metrics([], {a.id: {"attempt": 1, "log_offset": 40}})
            store.transition(a.id, JobState.RUNNING, JobState.COMPLETED, now=4.0, exit_code=0,
                             ended_at=3.5)
            store.update_attempt(att, ended_at=3.5, exit_code=0, outcome="completed")
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert sorted(updates) == ["attempts", "jobs"]
    job, [attempt] = store.job_with_attempts(a.id)
    assert (job.state, job.started_at, job.ended_at, job.exit_code) == ("completed", 2.5, 3.5, 0)
    assert job.progress == {"attempt": 1, "log_offset": 40}
    assert (attempt.handle, attempt.exit_code, attempt.outcome) == ({"pid": 7}, 0, "completed")
    assert [e.to_state for e in store.events(a.id)] == \
        ["pending", "starting", "running", "completed"]
    # b's second move claims a state its first did not leave it in: not joined, and lost
    with store.transaction():
        store.transition(b.id, JobState.STARTING, JobState.RUNNING, now=5.0)
        store.transition(b.id, JobState.STARTING, JobState.FAILED, now=5.0)
    assert store.get_job(b.id).state == "running"
    assert f"job {b.id} is running, expected starting" in caplog.text


def test_samples_that_cannot_be_stored_in_a_batch_fail_the_batch(store: Store):
    """Inside a batch, a failed insert of samples is the store's failure (a StoreError the
    daemon's batch handles), not one item's to log and pass over (``each``)."""
    from rota.server.jobs.batch import each

    [row] = store.add_jobs([spec()], user="u", source="cli", now=1.0)
    bad = [{"job_id": 999_999, "attempt": 1, "ts": 2.0, "step": 1, "name": "loss",
            "value": 0.5}]  # no such job
    with pytest.raises(StoreError, match="could not write"), store.transaction():
        store.transition(row.id, JobState.PENDING, JobState.HELD, now=2.0)
        each(store.add_metrics, bad, {})
    assert store.get_job(row.id).state == "pending"  # nothing of the batch stored


def test_a_batched_transition_from_a_wrong_state_is_logged_and_the_others_stand(
        store: Store, caplog: pytest.LogCaptureFixture):
    a, b = store.add_jobs([spec(), spec()], user="u", source="cli", now=1.0)
    with store.transaction():
        store.transition(a.id, JobState.PENDING, JobState.HELD, now=2.0)
        store.transition(b.id, JobState.HELD, JobState.PENDING, now=2.0)  # b is pending
    assert store.get_job(a.id).state == "held" and store.get_job(b.id).state == "pending"
    assert f"job {b.id} is pending, expected held" in caplog.text


def test_dedup_hashes_ignore_failed_jobs(store: Store):
    a, b = store.add_jobs([spec(command=["a"]), spec(command=["b"])], user="u", source="f",
                          now=1.0)
    store.transition(b.id, JobState.PENDING, JobState.FAILED, now=2.0)
    live = store.live_hashes([a.content_hash, b.content_hash])
    assert live == {a.content_hash}  # a failed job may be queued again


def test_idempotency_key_is_unique(store: Store):
    [a] = store.add_jobs([spec()], user="u", source="api", now=1.0, idempotency_key="k")
    assert store.job_by_idempotency_key("k").id == a.id  # type: ignore[union-attr]
    with pytest.raises(StoreError):
        store.add_jobs([spec()], user="u", source="api", now=2.0, idempotency_key="k")


def test_gpu_pause_and_settings_persist(store: Store, db_url: str):
    store.set_gpu_paused("GPU-x", 3, True)
    store.set_setting("draining", "1")
    again = Store.open(db_url)  # a restarted daemon sees the same
    assert again.paused_gpus() == {"GPU-x": 3} and again.get_setting("draining") == "1"
    again.set_gpu_paused("GPU-x", 3, False)
    assert again.paused_gpus() == {}
    again.close()


def test_listing_filters_and_pages(store: Store):
    rows = store.add_jobs([spec(name=f"n{i}") for i in range(5)], user="u", source="cli",
                          now=1.0)
    store.add_jobs([spec(name="other")], user="v", source="cli", now=1.0)
    page = store.list_jobs(user="u", limit=2)
    assert [r.id for r in page] == [rows[4].id, rows[3].id]
    nxt = store.list_jobs(user="u", limit=2, before_id=page[-1].id)
    assert [r.id for r in nxt] == [rows[2].id, rows[1].id]
    assert [r.name for r in store.list_jobs(name="oth")] == ["other"]


def test_json_columns_that_orjson_refuses_are_still_read(tmp_path: Path) -> None:
    """Older releases let a spec hold an infinite time limit, which the standard library
    writes as Infinity and orjson (the fast reader) refuses: such a SQLite row must still
    be read. (PostgreSQL's JSON columns never took it.)"""
    store = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")
    [row] = store.add_jobs([spec()], user="u", source="cli", now=1.0)
    with store.engine.begin() as c:
        c.exec_driver_sql("UPDATE jobs SET spec = ? WHERE id = ?",
                          ('{"command": ["true"], "time_limit": Infinity}', row.id))
    [listed] = store.list_jobs()
    assert listed.spec == {"command": ["true"], "time_limit": float("inf")}
    assert store.get_job(row.id).spec == listed.spec
    store.close()


def test_list_filters_match_their_text_literally(store: Store) -> None:
    """%, _ and the escape character in a name or tag filter are matched as themselves,
    not as LIKE wildcards; the filters combine."""
    store.add_jobs([spec(name="a%b/c", tags=["t_1"]), spec(name="axb/c", tags=["tx1"]),
                    spec(name="a_b", tags=["t%"])], user="u", source="cli", now=1.0)
    store.add_jobs([spec(name="a%b/c", tags=["t_1"])], user="v", source="cli", now=1.0)

    def names(**filters: object) -> list[str]:
        return [f"{r.user}:{r.name}" for r in store.list_jobs(**filters)]  # type: ignore[arg-type]

    assert names(name="a%b") == ["v:a%b/c", "u:a%b/c"]
    assert names(name="b/c") == ["v:a%b/c", "u:axb/c", "u:a%b/c"]
    assert names(name="a_") == ["u:a_b"]
    assert names(tag="t_1") == ["v:a%b/c", "u:a%b/c"]
    assert names(tag="t%") == ["u:a_b"]
    assert names(tag="t") == []  # a whole tag, not a prefix
    assert names(tag="t_1", user="u") == ["u:a%b/c"]
    assert names(name="a", states=["pending"], user="u", limit=2) == ["u:a_b", "u:axb/c"]


def test_the_migrations_build_exactly_the_tables_the_code_declares(store: Store) -> None:
    """Alembic's own comparison of the migrated database with the ORM's tables."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from rota.store.tables import Base

    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_metrics_and_progress_are_stored_and_paged(store: Store) -> None:
    [row] = store.add_jobs([spec()], user="u", source="test", now=1.0)
    samples = [{"job_id": row.id, "attempt": 1, "ts": 10.0 + i, "step": i, "name": n,
                "value": float(i)} for i in range(5) for n in ("loss", "lr")]
    store.add_metrics(samples, {row.id: {"attempt": 1, "step": 4, "log_offset": 99}})
    assert store.get_job(row.id).progress == {"attempt": 1, "step": 4, "log_offset": 99}
    first = store.metrics(row.id, limit=4)
    assert [(m.name, m.step) for m in first] == [("loss", 0), ("lr", 0), ("loss", 1), ("lr", 1)]
    rest = store.metrics(row.id, after_id=first[-1].id)
    assert len(rest) == 6 and rest[0].id > first[-1].id
    assert [m.value for m in store.metrics(row.id, names=["lr"])] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert store.metrics(row.id, attempt=2) == []


def test_the_queue_is_read_in_queue_order_with_the_schedulers_facts(store: Store) -> None:
    from rota.core.snapshot import PendingJob

    a, b, c, held, d, e = store.add_jobs(
        [spec(priority=2), spec(gpus=0.25, gpu_mem=5 << 30, allowed_gpus=[3, 1]),
         spec(priority=-1, after=[1, 2]), spec(hold=True), spec(priority=2),
         spec(priority=3, workspace=False)],
        user="u", source="cli", now=1.0)
    store.transition(d.id, JobState.PENDING, JobState.HELD, now=2.0)  # no longer pending
    store.update_job(a.id, not_before=9.5)
    got = store.queued(mlflow_default=False, chunk=2)  # pages of 2: each page is read
    assert got.pending == [
        PendingJob(c.id, -1, c.id, 1000, None, None, (1, 2), None, None, "u", None, 1.0),
        PendingJob(b.id, 0, b.id, 250, 5 << 30, frozenset({1, 3}), (), None, None, "u",
                   None, 1.0),
        PendingJob(a.id, 2, a.id, 1000, None, None, (), 9.5, None, "u", None, 1.0),
        PendingJob(e.id, 3, e.id, 1000, None, None, (), None, None, "u", None, 1.0)]
    # a job that needs no workspace is not held for it
    assert [j.workspace for j in got.pending] == [True, True, True, False]
    assert got.held == [held.id, d.id] and got.tracked == []


def test_jobs_that_want_an_mlflow_run_are_read_apart(store: Store) -> None:
    on, off, default, held_on = store.add_jobs(
        [spec(mlflow=True), spec(mlflow=False), spec(), spec(mlflow=True, hold=True)],
        user="u", source="cli", now=1.0)
    got = store.queued(mlflow_default=False)
    assert [j.id for j in got.pending] == [off.id, default.id]
    assert got.tracked == [on.id, held_on.id] and got.held == []
    got = store.queued(mlflow_default=True)  # the daemon's setting: every job gets a run
    assert [j.id for j in got.pending] == [off.id]
    assert got.tracked == [on.id, default.id, held_on.id]


def test_the_queue_columns_are_filled_from_the_specs_of_a_store_made_before_them(
        db_url: str) -> None:
    """Migration 0005 on a store of the revision before: its waiting jobs get the columns
    the queue is read from."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    from rota.store.db import _MIGRATIONS, make_engine

    url = db_url
    store = Store.open(url)
    [a, b, free] = store.add_jobs([spec(allowed_gpus=[0, 2], after=[7], mlflow=False,
                                        time_limit="90m"), spec(),
                                   spec(mlflow=False, workspace=False)],
                                  user="u", source="cli", now=1.0)
    store.close()
    engine = make_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as c:
        cfg.attributes["connection"] = c
        command.downgrade(cfg, "0004")
        c.execute(text("UPDATE jobs SET priority = 1"))
    engine.dispose()
    store = Store.open(url)  # upgrades again
    try:
        got = store.queued(mlflow_default=True)
        assert [(j.id, j.allowed, j.after, j.expected, j.workspace) for j in got.pending] \
            == [(a.id, frozenset({0, 2}), (7,), 5400.0, True),  # 0016: the time limit too
                (free.id, None, (), None, False)]  # 0021: a job that needs no workspace
        assert got.tracked == [b.id]  # its spec leaves it to the daemon's setting
    finally:
        store.close()


def test_the_queue_loads_with_each_job_s_time_limit_else_its_name_s_prediction(
        store: Store) -> None:
    store.add_jobs([spec(name="train", time_limit="2h"), spec(name="train"),
                    spec(name="eval"), spec()], user="u", source="cli", now=1.0)
    asked: list[list[str]] = []

    def predicted(names: list[str]) -> dict[str, float | None]:
        asked.append(names)
        return {n: 600.0 if n == "train" else None for n in names}

    got = store.queued(mlflow_default=False, predicted=predicted).pending
    assert [j.expected for j in got] == [7200.0, 600.0, None, None]
    # once for the page: the names of the jobs without a time limit
    assert asked == [["train", "eval"]]
    assert [j.expected for j in store.queued(mlflow_default=False).pending] == [
        7200.0, None, None, None]


def test_the_last_peak_of_each_name_comes_from_its_newest_finished_attempt(
        store: Store) -> None:
    rows = store.add_jobs([spec(name="train"), spec(name="train"), spec(name="eval"),
                           spec(name="train"), spec(name="other")], user="u", source="cli",
                          now=1.0)
    ids = store.start_attempts([(r.id, _attempt(1, n), "go") for n, r in enumerate(rows)],
                               now=2.0)
    store.update_attempt(ids[0], peak_gpu_mem=5 << 30, ended_at=3.0)
    store.update_attempt(ids[1], peak_gpu_mem=7 << 30, ended_at=4.0)  # the newest train
    store.update_attempt(ids[2], peak_gpu_mem=1 << 30, ended_at=4.0)
    store.update_attempt(ids[3], peak_gpu_mem=9 << 30)  # still running: not counted
    store.update_attempt(ids[4], ended_at=4.0)  # no peak recorded
    assert store.last_peaks(["train", "eval", "other", "missing", "train"]) == {
        "train": (rows[1].id, 7 << 30), "eval": (rows[2].id, 1 << 30)}
    assert store.last_peaks([]) == {}
