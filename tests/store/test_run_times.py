"""Predicted run times from the history of completed jobs (rota.server.jobs.run_times)."""

from __future__ import annotations

from rota.core.spec import JobSpec
from rota.server.jobs.run_times import HISTORY, RunTimes, predict
from rota.store.repo import Store


def spec(**kw) -> JobSpec:  # type: ignore[no-untyped-def]
    return JobSpec.model_validate({"command": ["true"], **kw})


def _attempt(gpu: int) -> dict[str, object]:
    return {"number": 1, "gpu_indices": [gpu], "gpu_uuids": [], "milli": 1000,
            "gpu_mem": None, "backend": "local", "log_path": f"/{gpu}.log",
            "status_path": f"/{gpu}.json", "started_at": 100.0}


def ran(store: Store, name: str, seconds: list[float], outcome: str = "completed") -> None:
    """Jobs of ``name`` whose one attempt ran for each of ``seconds`` (in that order)."""
    rows = store.add_jobs([spec(name=name) for _ in seconds], user="u", source="cli",
                          now=1.0)
    ids = store.start_attempts([(r.id, _attempt(n), "go") for n, r in enumerate(rows)],
                               now=100.0)
    for attempt, s in zip(ids, seconds, strict=True):
        store.update_attempt(attempt, ended_at=100.0 + s, outcome=outcome)


def test_the_prediction_is_the_90th_percentile_of_the_history() -> None:
    assert predict([]) is None
    assert predict([60.0]) == 60.0
    assert predict([float(s) for s in range(1, 11)]) == 9.0  # nearest rank: the 9th of 10
    assert predict([10.0, 10.0, 10.0, 500.0]) == 500.0


def test_completed_run_times_are_the_newest_completed_attempts_of_the_name(
        store: Store) -> None:
    ran(store, "train", [300.0, 400.0])
    ran(store, "train", [9999.0], outcome="failed")  # not a completed run
    ran(store, "eval", [5.0])
    store.add_jobs([spec(name="train")], user="u", source="cli", now=1.0)  # never ran
    assert store.completed_run_times("train", last=10) == [400.0, 300.0]
    assert store.completed_run_times("train", last=1) == [400.0]
    assert store.completed_run_times("missing", last=10) == []


def test_run_times_predict_from_history_and_cache_per_name(store: Store) -> None:
    now = [1000.0]
    rt = RunTimes(store, lambda: now[0], ttl=60.0)
    assert rt.predicted("train") is None  # no history
    ran(store, "train", [100.0, 200.0, 300.0])
    assert rt.predicted("train") is None  # cached: the store is not read again
    rt.forget("train")  # what a completed job of the name does
    assert rt.predicted("train") == 300.0
    ran(store, "train", [1000.0])
    now[0] += 61  # the cache is old: read afresh
    assert rt.predicted("train") == 1000.0
    assert rt.predicted(None) is None


def test_a_time_limit_wins_over_the_prediction(store: Store) -> None:
    ran(store, "train", [100.0])
    rt = RunTimes(store, lambda: 0.0)
    assert rt.expected(50.0, "train") == 50.0
    assert rt.expected(None, "train") == 100.0
    assert rt.expected(None, "never-ran") is None


def test_only_the_newest_runs_count(store: Store) -> None:
    ran(store, "train", [5000.0] + [10.0] * HISTORY)  # the old slow run has aged out
    assert RunTimes(store, lambda: 0.0).predicted("train") == 10.0


def test_many_names_are_read_together_each_with_its_newest_runs(store: Store) -> None:
    ran(store, "train", [300.0, 400.0, 500.0])
    ran(store, "eval", [5.0])
    ran(store, "bad", [7.0], outcome="failed")
    got = store.completed_run_times_of(["train", "eval", "bad", "missing", "train"], last=2,
                                       chunk=2)  # chunks of two names: three queries
    assert got == {"train": [500.0, 400.0], "eval": [5.0]}


def test_a_submit_reads_the_history_of_its_names_once(store: Store) -> None:
    ran(store, "train", [100.0, 200.0])
    rt = RunTimes(store, lambda: 0.0)
    calls: list[set[str]] = []
    real = store.completed_run_times_of

    def counted(names, **kw):  # type: ignore[no-untyped-def]
        calls.append(set(names))
        return real(names, **kw)

    store.completed_run_times_of = counted  # type: ignore[method-assign]
    rt.prefetch(["train", "new-0", "new-1", None, "train"])
    assert calls == [{"train", "new-0", "new-1"}]
    assert rt.predicted_many(["train", "new-0", "new-1"]) == {
        "train": 200.0, "new-0": None, "new-1": None}
    assert len(calls) == 1  # all cached, the unknown names too
