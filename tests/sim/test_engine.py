"""The simulator replays core's decisions: hand-checked JCTs, reasons from core, ends
through core.outcome, wide jobs across nodes, determinism."""

from __future__ import annotations

import random

import pytest

from rota.sim import POLICIES, SimJob, parse_cluster, simulate
from rota.sim.engine import Shares
from rota.sim.metrics import measure
from rota.sim.synthetic import synthetic

# One node of 2 GPUs. t=0: A (0.5 GPU, 10 s) lands on GPU 0 and P (0.75, 30 s) on GPU 1
# (best fit), leaving 0.5 free on GPU 0 and 0.25 on GPU 1.
#   t=1 B (1 whole GPU, 10 s) cannot start: core reserves GPU 0 (the most free) for it.
#   t=2 C (0.25 GPU, 2 s) fits GPU 1.  t=3 D (1 whole GPU, 1 s) cannot start.
# fifo: C and D wait behind B. t=10 A ends: B starts on GPU 0 (ends 20), C on GPU 1
#   (ends 12); D starts at 20 (ends 21). JCTs A 10, P 30, B 19, C 10, D 18: mean 17.4.
# backfill: C starts at 2 on the unreserved GPU 1 (ends 4); the rest as fifo:
#   JCTs 10, 30, 19, 2, 18: mean 15.8.
# sjf (run time first): C (2 s) is first at t=2 and starts (ends 4); at t=3 D (1 s) is
#   first and blocks B; t=10 D starts (ends 11), then B at 11 (ends 21):
#   JCTs 10, 30, 20, 2, 8: mean 14.0.
TINY = [SimJob(1, 0, 10, 500, name="A"), SimJob(2, 0, 30, 750, name="P"),
        SimJob(3, 1, 10, 1000, name="B"), SimJob(4, 2, 2, 250, name="C"),
        SimJob(5, 3, 1, 1000, name="D")]
EXPECTED = {"fifo": {1: 10, 2: 30, 3: 19, 4: 10, 5: 18},
            "backfill": {1: 10, 2: 30, 3: 19, 4: 2, 5: 18},
            "sjf": {1: 10, 2: 30, 3: 20, 4: 2, 5: 8}}


def jcts(policy: str) -> dict[int, float]:
    result = simulate(TINY, parse_cluster("2x80G"), POLICIES[policy])
    return {r.job.id: r.end - r.job.submit for r in result.records if r.end is not None}


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_tiny_trace_gives_the_hand_computed_jcts(policy: str) -> None:
    assert jcts(policy) == EXPECTED[policy]
    m = measure(simulate(TINY, parse_cluster("2x80G"), POLICIES[policy]))
    assert m.jct.mean == pytest.approx(sum(EXPECTED[policy].values()) / 5)
    assert m.makespan == 30


def test_a_waiting_jobs_reason_comes_from_core() -> None:
    from rota.sim.engine import Simulation

    result = Simulation(TINY, parse_cluster("2x80G"), POLICIES["fifo"],
                        record_reasons=True).run()
    assert result.reasons[4] == "waits behind job 3, first in the queue"  # core's words
    assert result.reasons[3] == ("waits for 1 whole GPU; 0 free on the machine; GPU 0 is "
                                 "kept for it (0.5 free now)")


def test_a_time_limit_ends_the_job_as_core_outcome_says() -> None:
    trace = [SimJob(1, 0, 100, 1000, time_limit=40), SimJob(2, 0, 10, 1000)]
    result = simulate(trace, parse_cluster("1x80G"), POLICIES["fifo"])
    by_id = {r.job.id: r for r in result.records}
    assert (by_id[1].outcome, by_id[1].end) == ("timeout", 40)
    assert (by_id[2].outcome, by_id[2].start) == ("completed", 40)
    assert measure(result).timed_out == 1


def test_jobs_of_a_node_or_less_stay_on_one_node() -> None:
    # 2 nodes x 2 GPUs: a 1-GPU job on each node leaves 2 GPUs free, but not on one node
    trace = [SimJob(1, 0, 10, 1000), SimJob(2, 0, 10, 1000), SimJob(3, 0, 10, 2000),
             SimJob(4, 0, 10, 2000)]
    cluster = parse_cluster("2x80G", nodes=2)
    result = simulate(trace, cluster, POLICIES["fifo"])
    starts = {r.job.id: r.start for r in result.records}
    # core's first fit: jobs 1 and 2 share node 0, job 3 takes node 1, job 4 waits
    assert starts == {1: 0, 2: 0, 3: 0, 4: 10}


def test_a_job_wider_than_a_node_runs_on_several_whole_nodes() -> None:
    trace = [SimJob(1, 0, 10, 1000), SimJob(2, 0, 5, 4000), SimJob(3, 1, 5, 1000)]
    result = simulate(trace, parse_cluster("2x80G", nodes=2), POLICIES["fifo"])
    starts = {r.job.id: r.start for r in result.records}
    # job 2 needs both nodes: it gets node 1 at 0 and node 0 when job 1 ends at 10;
    # job 3 (fifo) waits behind it
    assert starts == {1: 0, 2: 10, 3: 15}


def test_fairshare_puts_the_user_who_used_less_first() -> None:
    # one GPU; alice used it for 100 s; then bob and alice queue at the same time
    trace = [SimJob(1, 0, 100, 1000, user="alice"), SimJob(2, 1, 10, 1000, user="alice"),
             SimJob(3, 2, 10, 1000, user="bob")]
    fifo = {r.job.id: r.start for r in simulate(trace, parse_cluster("1x80G"),
                                                POLICIES["fifo"]).records}
    fair = {r.job.id: r.start for r in simulate(trace, parse_cluster("1x80G"),
                                                POLICIES["fairshare"]).records}
    assert fifo[2] < fifo[3]
    assert fair[3] < fair[2]


def test_fairshare_orders_by_the_shares_given() -> None:
    # alice and bob each use one of two GPUs for 100 s; then each queues a 2-GPU job:
    # one of them goes first at 100
    trace = [SimJob(1, 0, 100, 1000, user="alice", project="vision"),
             SimJob(4, 0, 100, 1000, user="bob", project="speech"),
             SimJob(2, 1, 10, 2000, user="alice", project="vision"),
             SimJob(3, 2, 10, 2000, user="bob", project="speech")]

    def starts(shares: Shares | None) -> dict[int, float | None]:
        result = simulate(trace, parse_cluster("2x80G"), POLICIES["fairshare"],
                          shares=shares)
        return {r.job.id: r.start for r in result.records}

    assert starts(None)[2] == 100  # equal shares, equal usage: the older job
    assert starts(Shares(users={"bob": 10.0}))[3] == 100  # bob's usage is within his share
    assert starts(Shares(projects={"speech": 10.0}))[3] == 100
    assert starts(Shares(users={"alice": 10.0}))[2] == 100


def test_the_same_seed_gives_the_same_run() -> None:
    cluster = parse_cluster("8x80G", nodes=4)

    def run(seed: int) -> list[tuple[int, float | None, float | None]]:
        trace = synthetic(400, cluster.gpus, 1.2, random.Random(seed))
        result = simulate(trace, cluster, POLICIES["backfill"])
        return [(r.job.id, r.start, r.end) for r in result.records]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_metrics_on_a_loaded_run_are_consistent() -> None:
    cluster = parse_cluster("8x80G", nodes=2)
    trace = synthetic(300, cluster.gpus, 1.5, random.Random(3))
    m = measure(simulate(trace, cluster, POLICIES["backfill"]))
    assert m.finished == 300 and m.never_started == 0
    assert m.makespan >= m.makespan_bound
    assert 0 < m.utilisation <= m.utilisation_bound <= 1
    assert m.fragmentation is not None and 0 <= m.fragmentation <= 1
    assert m.fairness_worst is not None and m.fairness_worst >= 1
    assert m.estimate_error is None  # core's Plan carries no start_estimates yet


def test_one_wide_job_gathers_nodes_at_a_time_even_in_one_pass() -> None:
    # 3 nodes x 2 GPUs, two 4-GPU jobs at t=0: one pass could grant a node to each (both
    # then wait for a third); job 1 gathers nodes 0 and 1 and runs, job 2 waits for it
    trace = [SimJob(1, 0, 10, 4000), SimJob(2, 0, 10, 4000)]
    result = simulate(trace, parse_cluster("2x80G", nodes=3), POLICIES["fifo"])
    assert {r.job.id: r.start for r in result.records} == {1: 0, 2: 10}


def test_two_users_flooding_a_simulated_day_get_gpu_hours_as_their_shares() -> None:
    """8 GPUs for a simulated day, alice's 400 half-hour jobs queued before bob's 400: in
    submission order alice takes the day; fair share with shares 2:1 gives 2:1 GPU-hours
    (within 10 %), and 1:1 with equal shares."""
    day = 86_400.0
    trace = [SimJob(i, 0.0, 1800.0, 1000, user="alice" if i <= 400 else "bob")
             for i in range(1, 801)]

    def gpu_hours(policy: str, shares: Shares | None = None) -> dict[str, float]:
        used = {"alice": 0.0, "bob": 0.0}
        for r in simulate(trace, parse_cluster("8x80G"), POLICIES[policy],
                          shares=shares).records:
            if r.start is not None and r.start < day:
                assert r.end is not None
                used[r.job.user] += (min(r.end, day) - r.start) * r.job.gpus / 3600
        return used

    fifo = gpu_hours("fifo")
    assert fifo["bob"] == 0 and fifo["alice"] == 8 * 24
    two_to_one = gpu_hours("fairshare", Shares(users={"alice": 2.0}))
    assert two_to_one["alice"] / two_to_one["bob"] == pytest.approx(2.0, rel=0.1)
    equal = gpu_hours("fairshare")
    assert equal["alice"] / equal["bob"] == pytest.approx(1.0, rel=0.1)
    assert sum(equal.values()) == pytest.approx(8 * 24)
