"""Expected run times, backfill onto kept GPUs, start estimates and fair share in the
simulator: the daemon's own policy code (core.runtime, core.backfill, core.fairshare)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from rota.config import PrioritySettings
from rota.core.fairshare import Standing, account_usage, order_queue
from rota.core.snapshot import PendingJob
from rota.errors import InvalidSpec
from rota.sim import POLICIES, SimJob, parse_cluster, simulate
from rota.sim.metrics import measure


def starts(trace: list[SimJob], policy: str, gpus: str = "2x80G",
           **options: object) -> dict[int, float | None]:
    result = simulate(trace, parse_cluster(gpus), POLICIES[policy], **options)
    return {r.job.id: r.start for r in result.records}


# One node of 2 GPUs. t=0 A (1 GPU, limit 100 s) starts on one GPU.
#   t=1 B (2 GPUs) cannot start: core keeps the free GPU for it; its shadow time is A's
#   expected end, 100.  t=2 C (1 GPU, limit 50 s) would end at 52 <= 100: it backfills onto
#   the kept GPU at once. Without expected run times C's end is unknown: it waits for B
#   (B runs 100..200, C starts at 200).
BACKFILL = [SimJob(1, 0, 100, 1000, name="A", time_limit=100),
            SimJob(2, 1, 100, 2000, name="B"),
            SimJob(3, 2, 50, 1000, name="C", time_limit=50)]


def test_a_short_job_with_a_time_limit_backfills_onto_kept_gpus() -> None:
    assert starts(BACKFILL, "backfill", expected="limit") == {1: 0, 2: 100, 3: 2}
    assert starts(BACKFILL, "backfill", expected="history") == {1: 0, 2: 100, 3: 2}
    assert starts(BACKFILL, "backfill", expected="none") == {1: 0, 2: 100, 3: 200}


# The same, but C has no time limit: its run time is predicted from the earlier completed
# run of its name (S, 10 s at t=0..10: p90 of [10] = 10), so at t=22 it is expected to end
# at 32, before A's expected end 120, and backfills. "limit" knows no such thing: C waits.
HISTORY = [SimJob(1, 0, 10, 1000, name="short"),
           SimJob(2, 20, 100, 1000, name="A", time_limit=100),
           SimJob(3, 21, 100, 2000, name="B"),
           SimJob(4, 22, 10, 1000, name="short")]


def test_a_run_time_predicted_from_the_history_of_its_name_lets_a_job_backfill() -> None:
    assert starts(HISTORY, "backfill", expected="history")[4] == 22
    assert starts(HISTORY, "backfill", expected="limit")[4] == 220


# One GPU, fifo. t=0 A (limit 100) runs. t=10 B (limit 60, runs 50) waits: its estimate is
# A's expected end, 100, and it starts at 100 (error 0). t=20 C (limit 10) waits behind B:
# when A ends at 100 and B starts, C's estimate is B's expected end 160; B ends at 150 and C
# starts then (error 10). Errors [0, 10]: mean 5, p50 0, p90 10.
ESTIMATES = [SimJob(1, 0, 100, 1000, time_limit=100),
             SimJob(2, 10, 50, 1000, time_limit=60),
             SimJob(3, 20, 10, 1000, time_limit=10)]


def test_the_start_estimate_error_on_a_tiny_trace() -> None:
    m = measure(simulate(ESTIMATES, parse_cluster("1x80G"), POLICIES["fifo"],
                         expected="limit"))
    assert m.estimated == 2
    assert m.estimate_error is not None
    assert (m.estimate_error.mean, m.estimate_error.p50, m.estimate_error.p90) == \
        (5.0, 0.0, 10.0)
    oracle = measure(simulate(ESTIMATES, parse_cluster("1x80G"), POLICIES["fifo"],
                              expected="oracle"))
    assert oracle.estimate_error is not None and oracle.estimate_error.mean == 0.0
    # nothing is expected to end: no estimates at all
    none = measure(simulate(ESTIMATES, parse_cluster("1x80G"), POLICIES["fifo"],
                            expected="none"))
    assert none.estimate_error is None and none.estimated == 0


def test_an_unknown_expected_mode_is_refused_by_name() -> None:
    with pytest.raises(InvalidSpec, match="expected run times 'psychic'"):
        simulate(ESTIMATES, parse_cluster("1x80G"), POLICIES["fifo"], expected="psychic")


class Run(NamedTuple):
    user: str
    project: str | None
    gpus: float
    started_at: float
    ended_at: float | None


# Two GPUs. x0 (user x, 100 s) and y0 (user y, 50 s) run from t=0; x1, y1, z1 (1000 s
# each) queue at t=1, 2, 3 in that order. t=50 y0 ends: x has used 50 GPU-s, y 50 (ended,
# older), z nothing: z1 starts. t=100 x0 ends: x used 100, y 50: y1 starts before x1.
FAIR = [SimJob(1, 0, 100, 1000, user="x"), SimJob(2, 0, 50, 1000, user="y"),
        SimJob(3, 1, 1000, 1000, user="x"), SimJob(4, 2, 1000, 1000, user="y"),
        SimJob(5, 3, 1000, 1000, user="z")]


def test_fairshare_in_the_sim_starts_jobs_in_core_order_queue_order() -> None:
    settings = PrioritySettings(half_life=3600)
    got = starts(FAIR, "fairshare", priority=settings)
    assert got == {1: 0, 2: 0, 5: 50, 4: 100, 3: 1050}
    # core's own order for the same usage, as the daemon computes it at t=50 and t=100
    queued = [PendingJob(3, 0, 2, 1000, user="x", submitted=1),
              PendingJob(4, 0, 3, 1000, user="y", submitted=2),
              PendingJob(5, 0, 4, 1000, user="z", submitted=3)]
    at50 = account_usage([Run("x", None, 1, 0, None), Run("y", None, 1, 0, 50)], 50, 3600)
    first = order_queue(queued, Standing.of(at50, {}, {}), settings.weights(), 50, 2000)
    assert first[0].id == 5
    at100 = account_usage([Run("x", None, 1, 0, 100), Run("y", None, 1, 0, 50),
                           Run("z", None, 1, 50, None)], 100, 3600)
    second = order_queue(first[1:], Standing.of(at100, {}, {}), settings.weights(), 100,
                         2000)
    assert [j.id for j in second] == [4, 3]
    # fifo would have run them in submission order
    assert starts(FAIR, "fifo") == {1: 0, 2: 0, 3: 50, 4: 100, 5: 1050}
