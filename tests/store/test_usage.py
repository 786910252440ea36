"""The accounting read model: attempts inside a window, clipped, running ones up to now."""

from __future__ import annotations

import pytest

from rota.core.spec import JobSpec
from rota.core.usage import cost, gpu_seconds, totals
from rota.store.repo import Store


def _attempt(started: float, *, tier: str | None = None,
             price: float | None = None) -> dict[str, object]:
    return {"number": 1, "gpu_indices": [0], "gpu_uuids": [], "milli": 1000,
            "gpu_mem": None, "backend": "local", "log_path": "/l", "status_path": "/s",
            "started_at": started, "tier": tier, "price": price}


def test_usage_reads_the_attempts_inside_a_window_with_their_owner_and_price(store: Store):
    ann, bob, old = store.add_jobs(
        [JobSpec(command=["true"], gpus=2, project="vision"),
         JobSpec(command=["true"], gpus=0.5), JobSpec(command=["true"])],
        user="ann", source="cli", now=0.0)
    ids = store.start_attempts([(ann.id, _attempt(100.0, tier="a100", price=2.0), "go"),
                                (bob.id, _attempt(150.0), "go"),
                                (old.id, _attempt(10.0), "go")], now=100.0)
    store.update_attempt(ids[0], ended_at=400.0)
    store.update_attempt(ids[2], ended_at=50.0)  # ended before the window: not read
    records = store.usage(since=60.0, until=1000.0)
    assert [(r.job_id, r.user, r.project, r.gpus, r.ended_at) for r in records] == [
        (ann.id, "ann", "vision", 2.0, 400.0), (bob.id, "ann", None, 0.5, None)]
    first, running = records
    assert (first.tier, first.price, first.pool, first.backend) == ("a100", 2.0, None, "local")
    # 2 GPUs x (400 - 100) s; a window cuts it; a running one counts up to now
    assert gpu_seconds(first, 60.0, 1000.0, now=500.0) == 600.0
    assert gpu_seconds(first, 300.0, 1000.0, now=500.0) == 200.0
    assert gpu_seconds(running, 60.0, 1000.0, now=250.0) == 50.0
    assert cost(first, 0.0, 1e9, now=500.0) == pytest.approx(600.0 / 3600.0 * 2.0)
    assert cost(running, 0.0, 1e9, now=500.0) == 0.0  # no price: nothing charged
    by_project = totals(records, lambda r: r.project, 0.0, 1e9, now=250.0)
    assert by_project == {"vision": (600.0, pytest.approx(600.0 / 3600.0 * 2.0)),
                          None: (50.0, 0.0)}
