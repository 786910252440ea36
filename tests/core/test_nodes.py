"""GPUs on several nodes (GpuView.node, the simulator's cluster in one pass): a job of k
whole GPUs gets all k on one node, or waits, or is never runnable when no node has k; a
share of a GPU goes anywhere; a blocked job keeps GPUs on one node."""

from __future__ import annotations

import pytest
from builders import GIB, apply, normalised
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rota.core.feasibility import most_memory, never_runnable
from rota.core.plan import ReasonCode
from rota.core.pool import GpuPool
from rota.core.schedule import schedule
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy, Snapshot

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cluster(*sizes: int, allocated: dict[int, int] | None = None,
            memory: int = 80 * GIB) -> list[GpuView]:
    """Nodes of these many GPUs, numbered on from 0 across nodes."""
    views, i = [], 0
    for node, size in enumerate(sizes):
        for _ in range(size):
            views.append(GpuView(index=i, memory_total=memory, node=node,
                                 allocated_milli=(allocated or {}).get(i, 0)))
            i += 1
    return views


def job(job_id: int, milli: int, **kw: object) -> PendingJob:
    return PendingJob(job_id, 0, job_id, milli, **kw)  # type: ignore[arg-type]


def run(views: list[GpuView], jobs: list[PendingJob], **policy: object):  # type: ignore[no-untyped-def]
    return schedule(Snapshot(views, jobs), Policy(**policy), 0.0)  # type: ignore[arg-type]


# --- hand-checked ------------------------------------------------------------------------

def test_a_two_gpu_job_waits_when_two_gpus_are_free_on_different_nodes() -> None:
    # nodes {0,1} and {2,3}; GPUs 0 and 2 taken: 2 free GPUs, 1 on each node
    plan = run(cluster(2, 2, allocated={0: MILLI, 2: MILLI}), [job(1, 2000)])
    assert plan.starts == []
    reason = plan.reason(1)
    assert reason is not None and reason.code is ReasonCode.RESOURCES
    assert reason.message == ("waits for 2 whole GPUs; 2 free on the machine "
                              "(at most 1 on one node); GPUs 0-1 are kept for it (1 free now)")


def test_the_same_gpus_on_one_node_start_it() -> None:  # the daemon's machine, unchanged
    views = [GpuView(index=g.index, memory_total=g.memory_total,
                     allocated_milli=g.allocated_milli) for g in cluster(2, 2)]
    views[0] = GpuView(index=0, memory_total=80 * GIB, allocated_milli=MILLI)
    views[2] = GpuView(index=2, memory_total=80 * GIB, allocated_milli=MILLI)
    assert [s.gpu_indices for s in run(views, [job(1, 2000)]).starts] == [(1, 3)]


def test_whole_gpus_go_to_the_fullest_node_that_holds_them() -> None:
    # node 0: 4 free; node 1: 2 of 4 free; node 2: 3 of 4 free. A 2-GPU job takes node 1
    # (best fit), keeping node 0 whole for a 4-GPU job
    views = cluster(4, 4, 4, allocated={4: MILLI, 5: MILLI, 8: MILLI})
    plan = run(views, [job(1, 2000), job(2, 4000), job(3, 3000)])
    assert {s.job_id: s.gpu_indices for s in plan.starts} == {1: (6, 7), 2: (0, 1, 2, 3),
                                                              3: (9, 10, 11)}


def test_a_share_goes_on_any_node_best_fit() -> None:
    views = cluster(2, 2, allocated={3: 500})
    assert [s.gpu_indices for s in run(views, [job(1, 500)]).starts] == [(3,)]


def test_a_job_wider_than_every_node_is_never_runnable() -> None:
    plan = run(cluster(4, 4), [job(1, 8000), job(2, 1000)])
    reason = plan.reason(1)
    assert reason is not None and reason.code is ReasonCode.UNSATISFIABLE
    assert reason.message == ("needs 8 whole GPUs on one node but no node has 8 GPUs "
                              "(the most on one node is 4)")
    assert [s.job_id for s in plan.starts] == [2]


def test_an_allowed_set_across_nodes_is_checked_per_node() -> None:
    plan = run(cluster(2, 2), [job(1, 2000, allowed=frozenset({1, 2}))])
    reason = plan.reason(1)
    assert reason is not None and reason.code is ReasonCode.UNSATISFIABLE
    plan = run(cluster(2, 2), [job(1, 2000, allowed=frozenset({1, 2, 3}))])
    assert [s.gpu_indices for s in plan.starts] == [(2, 3)]


def test_a_blocked_job_keeps_gpus_on_one_node() -> None:
    # node 0: GPU 0 half full, GPU 1 full; node 1: both GPUs a quarter full. The 2-GPU
    # job keeps node 1's (the most free on one node), not GPU 0 and one of node 1
    views = cluster(2, 2, allocated={0: 500, 1: MILLI, 2: 250, 3: 250})
    plan = run(views, [job(1, 2000), job(2, 500)])
    assert [(r.job_id, r.gpu_indices) for r in plan.reservations] == [(1, (2, 3))]
    assert [s.gpu_indices for s in plan.starts] == [(0,)]  # backfill off the kept node


def test_never_runnable_counts_memory_per_node() -> None:
    totals = {0: 80 * GIB, 1: 40 * GIB, 2: 80 * GIB, 3: 40 * GIB}
    nodes = {0: 0, 1: 0, 2: 1, 3: 1}
    assert never_runnable(2000, 80 * GIB, None, totals) is None  # one machine: GPUs 0, 2
    assert never_runnable(2000, 80 * GIB, None, totals, nodes) == (
        "needs 2 whole GPUs with 80G free memory each on one node but no node has 2 "
        "GPUs with 80G (the most on one node is 1)")
    assert never_runnable(2000, 40 * GIB, None, totals, nodes) is None


def test_most_memory_is_the_best_kth_largest_of_one_node() -> None:
    assert most_memory([(0, 80), (0, 40), (1, 48), (1, 48), (1, 16)]) == [80, 48, 16]
    assert most_memory([(0, 24), (0, 80)]) == [80, 24]  # one node: largest first


# --- properties --------------------------------------------------------------------------

_node = st.lists(st.tuples(st.sampled_from([0, 0, 250, 500, 1000]),
                           st.sampled_from([24 * GIB, 80 * GIB])), min_size=1, max_size=6)
layouts = st.lists(_node, min_size=1, max_size=5)
_jobs = st.lists(st.tuples(st.sampled_from([250, 500, 1000, 2000, 3000, 4000, 6000]),
                           st.sampled_from([None, None, 30 * GIB])), min_size=1, max_size=12)


def _views(layout: list[list[tuple[int, int]]]) -> list[GpuView]:
    views, i = [], 0
    for node, gpus in enumerate(layout):
        for allocated, memory in gpus:
            views.append(GpuView(index=i, memory_total=memory, node=node,
                                 allocated_milli=allocated))
            i += 1
    return views


@PROPS
@given(layouts, _jobs, st.booleans())
def test_no_start_spans_nodes_nor_overcommits(layout: list[list[tuple[int, int]]],
                                              shapes: list[tuple[int, int | None]],
                                              backfill: bool) -> None:
    views = _views(layout)
    node = {g.index: g.node for g in views}
    jobs = [job(k + 1, m, gpu_mem=mem) for k, (m, mem) in enumerate(shapes)]
    plan = run(views, jobs, backfill=backfill)
    by_id = {j.id: j for j in jobs}
    for s in plan.starts:
        assert len({node[i] for i in s.gpu_indices}) == 1, s
        assert len(s.gpu_indices) == max(1, by_id[s.job_id].gpus_milli // MILLI)
    for r in plan.reservations:
        assert len({node[i] for i in r.gpu_indices}) == 1, r
    for g in apply(views, plan):
        assert g.allocated_milli <= MILLI
        assert g.reserved_memory <= g.memory_total


@PROPS
@given(layouts, st.sampled_from([2000, 3000, 4000, 6000]), st.sampled_from([None, 30 * GIB]))
def test_a_lone_job_starts_exactly_when_one_node_holds_it(
        layout: list[list[tuple[int, int]]], milli: int, mem: int | None) -> None:
    views = _views(layout)
    k = milli // MILLI
    fits = any(sum(1 for g in views if g.node == n and g.allocated_milli == 0
                   and (mem is None or g.memory_total >= mem)) >= k
               for n in range(len(layout)))
    plan = run(views, [job(1, milli, gpu_mem=mem)])
    assert bool(plan.starts) == fits
    if not fits:
        never = any(sum(1 for g in views if g.node == n
                        and (mem is None or g.memory_total >= mem)) >= k
                    for n in range(len(layout)))
        reason = plan.reason(1)
        assert reason is not None
        assert reason.code is (ReasonCode.RESOURCES if never else ReasonCode.UNSATISFIABLE)


# --- a pool the caller keeps (Snapshot.pool) ---------------------------------------------

@PROPS
@given(layouts, _jobs, st.booleans(), st.sampled_from(["best-fit", "fgd"]))
def test_a_pass_on_a_kept_pool_decides_as_one_built_from_the_gpus(
        layout: list[list[tuple[int, int]]], shapes: list[tuple[int, int | None]],
        backfill: bool, packing: str) -> None:
    views = _views(layout)
    jobs = [job(k + 1, m, gpu_mem=mem) for k, (m, mem) in enumerate(shapes)]
    policy = Policy(backfill=backfill, packing=packing)
    kept = GpuPool(views, policy)
    before = (dict(kept.free_milli), dict(kept.free_mem), kept.version)
    built = schedule(Snapshot(views, jobs), policy, 0.0)
    copied = schedule(Snapshot((), jobs, pool=kept), policy, 0.0)
    assert normalised(copied) == normalised(built)
    assert (kept.free_milli, kept.free_mem, kept.version) == before  # the pass copied it


def test_a_kept_pool_follows_takes_gives_and_held_gpus() -> None:
    policy = Policy()
    kept = GpuPool(cluster(2, 2), policy)
    kept.take((0, 1), MILLI, None)  # node 0 busy
    plan = schedule(Snapshot((), [job(1, 2000)], pool=kept), policy, 0.0)
    assert [s.gpu_indices for s in plan.starts] == [(2, 3)]
    kept.set_unusable(2, "held for job 9")
    plan = schedule(Snapshot((), [job(1, 2000)], pool=kept), policy, 0.0)
    assert plan.starts == [] and "GPU 2 held for job 9" in (plan.reason_text(1) or "")
    kept.give((0, 1), MILLI, None)
    plan = schedule(Snapshot((), [job(1, 2000)], pool=kept), policy, 0.0)
    assert [s.gpu_indices for s in plan.starts] == [(0, 1)]
    kept.set_unusable(2, None)
    assert kept.usable(2, MILLI, None)


def test_a_kept_pool_refuses_a_pass_under_other_thresholds() -> None:
    kept = GpuPool(cluster(2), Policy())
    with pytest.raises(ValueError, match="other GPU thresholds"):
        schedule(Snapshot((), [job(1, 1000)], pool=kept), Policy(mem_threshold=0.5), 0.0)
