"""The daemon's fair-share usage: kept between sums, it equals a full read of the attempts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rota.config import PrioritySettings
from rota.core.fairshare import account_usage
from rota.core.spec import JobSpec
from rota.server.fair_order import FairOrder
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
