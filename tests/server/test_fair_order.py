"""The daemon's fair-share usage: kept between sums, it equals a full read of the attempts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rota.config import PrioritySettings
from rota.core.fairshare import account_usage
from rota.core.spec import JobSpec
from rota.server.policy.fair_order import FairOrder
from rota.store.repo import Store


def _attempt(started: float) -> dict[str, object]:
    return {"number": 1, "gpu_indices": [0], "gpu_uuids": [], "milli": 1000,
            "gpu_mem": None, "backend": "local", "log_path": "/l", "status_path": "/s",
            "started_at": started}


def test_usage_kept_between_sums_equals_a_full_read(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")
    now = [1000.0]
    settings = PrioritySettings(fair_share=True, half_life=600.0, refresh=1.0)
    fair = FairOrder(settings, store, lambda: now[0])
    jobs = store.add_jobs([JobSpec(command=["true"], project="vision"),
                           JobSpec(command=["true"]), JobSpec(command=["true"], gpus=2)],
                          user="ann", source="cli", now=0.0)
    bob = store.add_jobs([JobSpec(command=["true"])], user="bob", source="cli", now=0.0)[0]
    a, b, c, d = store.start_attempts([(j.id, _attempt(900.0 + 10 * n), "go")
                                       for n, j in enumerate([*jobs, bob])], now=900.0)
    fair.standing()  # everything running
    store.update_attempt(a, ended_at=1050.0)
    now[0] = 1100.0
    fair.standing([1])
    # an end stored late: it ended before the last sum, which saw the attempt running
    store.update_attempt(b, ended_at=1080.0)
    store.update_attempt(d, ended_at=1150.0)
    now[0] = 1200.0
    got = fair.standing([2])
    now[0] = 1250.0
    store.update_attempt(c, ended_at=1240.0)
    got = fair.standing([3])
    full = account_usage(store.usage(0.0, now[0]), now[0], 600.0)
    assert {k: f.usage for k, f in got.users.items()} == pytest.approx(full.users)
    assert {k: f.usage for k, f in got.projects.items()} == pytest.approx(full.projects)
    assert full.users["ann"] > full.users["bob"] > 0
    store.close()


def test_a_gpu_second_counts_by_the_kind_of_gpu(tmp_path: Path) -> None:
    """[priority] gpu_weights: ann's hour on an H100 counts twice bob's hour on a T4 (the
    kind each attempt recorded at its start), so ann's fair-share factor is the lower."""
    store = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")
    settings = PrioritySettings(fair_share=True, half_life=1e9, gpu_weights={"h100": 2.0})
    fair = FairOrder(settings, store, lambda: 5000.0)
    ann = store.add_jobs([JobSpec(command=["true"])], user="ann", source="cli", now=0.0)[0]
    bob = store.add_jobs([JobSpec(command=["true"])], user="bob", source="cli", now=0.0)[0]
    a, b = store.start_attempts([
        (ann.id, {**_attempt(1000.0), "gpu_type": "NVIDIA H100 80GB HBM3"}, "go"),
        (bob.id, {**_attempt(1000.0), "gpu_type": "Tesla T4"}, "go")], now=1000.0)
    store.update_attempt(a, ended_at=4600.0)
    store.update_attempt(b, ended_at=4600.0)
    got = fair.standing()
    assert got.users["ann"].usage == pytest.approx(2 * got.users["bob"].usage, rel=1e-6)
    assert got.factor("ann", None) < got.factor("bob", None)
    store.close()


def test_the_kept_order_follows_the_queue_through_every_kind_of_change(
        tmp_path: Path) -> None:
    """FairOrder orders from the queue's changes (PendingQueue.changes) and a KeptOrder:
    through adds, removals, replacements, a machine whose GPUs change (jobs set aside and
    taken back) and a burst too long to replay, its order is order_queue's of the jobs a
    pass looks at."""
    import random

    from rota.core.fairshare import order_queue
    from rota.core.schedule import queue_order
    from rota.core.snapshot import MILLI, PendingJob
    from rota.server.jobs.queue import PendingQueue

    store = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")
    now = [1000.0]
    fair = FairOrder(PrioritySettings(fair_share=True, refresh=1e9), store, lambda: now[0])
    queue, rng = PendingQueue(), random.Random(7)

    def new(job_id: int) -> PendingJob:
        return PendingJob(id=job_id, priority=rng.choice((0, 0, 5)), seq=job_id,
                          gpus_milli=rng.choice((500, 1000, 4000, 16000)),
                          user=rng.choice(("ann", "bob")), submitted=rng.uniform(0, 1000))

    def check() -> None:
        got = fair.ordered(queue, 8, ())
        want = order_queue(queue.ordered(), fair.standing(()), fair.weights, fair._at,
                           largest_milli=8 * MILLI)
        assert got == want

    queue.load(sorted((new(i) for i in range(1, 40)), key=queue_order))  # as stored
    check()
    next_id = 40
    for step in range(200):
        op = rng.random()
        if op < 0.4:
            queue.add(new(next_id))
            next_id += 1
        elif op < 0.7 and len(queue):
            queue.remove(rng.choice(list(queue.index())))
        elif op < 0.9 and len(queue):
            again = rng.choice(list(queue.index()))
            queue.add(new(again))  # replaced under its id
        else:  # the machine changes: 16-GPU jobs set aside on 8 GPUs, taken back on 16
            queue.fit_to({i: 80 << 30 for i in range(rng.choice((8, 16)))})
        if step % 3 == 0:
            check()
    for _ in range(5000):  # a burst: taken afresh rather than replayed
        queue.add(new(next_id))
        next_id += 1
    check()
    store.close()


def test_usage_after_reads_new_attempts_and_the_named_ones_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")
    jobs = store.add_jobs([JobSpec(command=["true"]) for _ in range(4)], user="ann",
                          source="cli", now=0.0)
    a, b, c, d = store.start_attempts([(j.id, _attempt(10.0 * n), "go")
                                       for n, j in enumerate(jobs)], now=40.0)
    assert [r.attempt_id for r in store.usage_after(b, [])] == [c, d]
    assert [r.attempt_id for r in store.usage_after(c, [a])] == [a, d]
    # more running than a query names: the sum reads the whole horizon again, still right
    import rota.server.policy.fair_order as fo

    monkeypatch.setattr(fo, "MAX_WATCHED", 1)
    now = [100.0]
    fair = FairOrder(PrioritySettings(fair_share=True, half_life=600.0), store,
                     lambda: now[0])
    fair.standing()
    store.update_attempt(a, ended_at=90.0)
    now[0] = 200.0
    got = fair.standing([9])
    full = account_usage(store.usage(0.0, now[0]), now[0], 600.0)
    assert got.users["ann"].usage == pytest.approx(full.users["ann"])
    store.close()
