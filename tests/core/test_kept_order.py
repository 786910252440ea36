"""KeptOrder gives order_queue's order exactly, as jobs come, go and are replaced."""

from __future__ import annotations

import random

import pytest

from rota.core.fairshare import Accounts, Standing, Weights, order_queue
from rota.core.kept_order import KeptOrder
from rota.core.snapshot import PendingJob


def job(rng: random.Random, job_id: int) -> PendingJob:
    return PendingJob(
        id=job_id, priority=rng.choice((-5, 0, 0, 3, 10)), seq=job_id,
        gpus_milli=rng.choice((0, 250, 1000, 2000, 8000)), user=f"u{rng.randrange(5)}",
        project=rng.choice((None, "vision", "speech")),
        # 0: no submission time (no age); equal times tie on the total, seq breaks it
        submitted=rng.choice((0.0, 500.0, 500.0, rng.uniform(0, 1000))))


def standing(rng: random.Random) -> Standing:
    users = {f"u{k}": rng.uniform(0, 1e5) for k in range(5)}
    projects = {"vision": rng.uniform(0, 1e5)}
    return Standing.of(Accounts(users, projects), {"u0": 2.0}, {"speech": 3.0})


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("weights", [
    Weights(size=10.0), Weights(max_age_s=0.0), Weights(size=5.0, favor_small=True),
    Weights(priority=0.0, age=0.0, fair_share=0.0)])
def test_the_kept_order_is_order_queue_s_through_adds_removes_and_replacements(
        seed: int, weights: Weights) -> None:
    rng = random.Random(seed)
    jobs = {i: job(rng, i) for i in range(1, 60)}
    kept = KeptOrder(jobs.values())
    next_id = 60
    for step in range(120):
        op = rng.random()
        if op < 0.4:  # a new job
            jobs[next_id] = job(rng, next_id)
            kept.add(jobs[next_id])
            next_id += 1
        elif op < 0.75 and jobs:  # one starts or is cancelled
            gone = rng.choice(list(jobs))
            del jobs[gone]
            kept.remove(gone)
        elif jobs:  # one comes back changed under its id (a new priority, a requeue)
            again = rng.choice(list(jobs))
            jobs[again] = job(rng, again)._replace(seq=again)
            kept.add(jobs[again])
        s, now = standing(rng), rng.uniform(0, 2e6)
        largest = rng.choice((None, 8000, 32000))
        assert len(kept) == len(jobs)
        assert kept.order(s, weights, now, largest) == \
            order_queue(jobs.values(), s, weights, now, largest), step
    kept.remove(10**9)  # one it never had: nothing happens
    assert len(kept) == len(jobs)


def test_reset_keeps_exactly_the_given_jobs_and_refuses_an_id_twice() -> None:
    rng = random.Random(1)
    first = [job(rng, i) for i in range(1, 5)]
    kept = KeptOrder(first)
    kept.reset([first[2], first[0]])
    s = standing(rng)
    assert kept.order(s, Weights(), 0.0) == order_queue([first[0], first[2]], s, Weights(), 0.0)
    with pytest.raises(ValueError, match="twice"):
        kept.reset([first[0], first[0]])
    assert KeptOrder().order(s, Weights(), 0.0) == []


def test_it_grows_past_its_first_arrays() -> None:
    rng = random.Random(2)
    kept, jobs = KeptOrder(), []
    for i in range(1, 3000):  # the arrays start at 1,024 places
        jobs.append(job(rng, i))
        kept.add(jobs[-1])
    s = standing(rng)
    assert kept.order(s, Weights(), 800.0) == order_queue(jobs, s, Weights(), 800.0)
