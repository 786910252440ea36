"""Packing policies for shares of a GPU (rota.core.packing) through the scheduling pass."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.core.builders import a_gpu, a_job, apply, machine, placed, plan_for

from rota.config import Settings
from rota.core.packing import PACKINGS, FragCache, Shape, fgd_pick, fragmentation, workload_of
from rota.core.pool import GpuPool
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy
from rota.server.loop.daemon import Daemon

HALVES = (Shape(500, 1.0),)


# --- fragmentation, by hand ---------------------------------------------------------------

def test_fragmentation_counts_the_shares_a_job_cannot_use() -> None:
    free = {1000: 1, 700: 1, 400: 1}
    assert fragmentation(free, HALVES) == 400  # only the 0.4 is too small for a 0.5 job
    assert fragmentation(free, (Shape(1000, 1.0),)) == 1100  # both partial GPUs
    assert fragmentation(free, (Shape(2000, 1.0),)) == 2100  # one idle GPU: none fits
    assert fragmentation({300: 2}, HALVES) == 600  # no GPU holds it: all is lost
    # weighted by the shapes' shares: 0.5 * 400 + 0.5 * 1100
    assert fragmentation(free, (Shape(500, 0.5), Shape(1000, 0.5))) == 750


def test_fragmentation_counts_a_node_without_the_cpus_as_all_lost() -> None:
    free = {1000: 2}
    assert fragmentation(free, (Shape(500, 1.0, cpu=8),), cpu_free=4) == 2000
    assert fragmentation(free, (Shape(500, 1.0, cpu=8),), cpu_free=8) == 0


def test_workload_of_counts_gpu_shapes_only() -> None:
    w = workload_of([(500, 0, 0), (500, 0, 0), (1000, 0, 0), (0, 4, 0)])
    assert sorted((s.gpus_milli, s.weight) for s in w) == [(500, 2 / 3), (1000, 1 / 3)]


# --- which GPU each policy picks ----------------------------------------------------------

# free shares 1.0, 0.4 and 0.3 (GPU 0 idle, GPU 1 has 0.6 taken, GPU 2 has 0.7 taken)
FREE = machine(a_gpu(0), a_gpu(1).allocated(0.6), a_gpu(2).allocated(0.7))


def pick(packing: str, job_gpus: float, gs: list | None = None, **kw: object) -> int:
    plan = plan_for(gs or FREE, [a_job(1).gpus(job_gpus)],
                    policy=Policy(packing=packing, **kw))  # type: ignore[arg-type]
    return placed(plan)[1][0]


def test_best_fit_picks_the_tightest_gpu() -> None:
    assert pick("best-fit", 0.3) == 2  # 0.3 free: exactly enough
    assert pick("best-fit", 0.35) == 1  # 0.4 free is the least that holds 0.35
    assert pick("best-fit", 0.5) == 0


def test_first_fit_picks_the_lowest_index_that_holds_it() -> None:
    assert pick("first-fit", 0.3) == 0
    gs = machine(a_gpu(0).allocated(0.9), a_gpu(1).allocated(0.6), a_gpu(2))
    assert pick("first-fit", 0.3, gs) == 1


def test_random_is_seeded_and_draws_among_the_gpus_that_fit() -> None:
    seen = {pick("random", 0.3, packing_seed=s) for s in range(40)}
    assert seen == {0, 1, 2}
    assert pick("random", 0.35, packing_seed=7) == pick("random", 0.35, packing_seed=7)
    assert {pick("random", 0.35, packing_seed=s) for s in range(40)} == {0, 1}


def test_fgd_picks_the_least_fragmentation_growth_where_best_fit_does_not() -> None:
    # free 1.0, 0.6 and 0.7; jobs to come are all 0.5 GPU; a 0.2 job arrives.
    # on GPU 0: 1.0 -> 0.8, nothing lost (growth 0); on GPU 1: 0.6 -> 0.4, and 0.4 can hold
    # no 0.5 job (growth 400); on GPU 2: 0.7 -> 0.5, still holds one (growth 0).
    # best-fit takes GPU 1 (least free); FGD takes GPU 2 (growth 0, less free than GPU 0).
    gs = machine(a_gpu(0), a_gpu(1).allocated(0.4), a_gpu(2).allocated(0.3))
    assert pick("best-fit", 0.2, gs) == 1
    assert pick("fgd", 0.2, gs, workload=HALVES) == 2
    assert fgd_pick({0: 1000, 1: 600, 2: 700}, [0, 1, 2], 200, HALVES) == 2
    # only GPUs 0 and 1 allowed: GPU 0 (growth 0) beats GPU 1 (growth 400)
    assert fgd_pick({0: 1000, 1: 600, 2: 700}, [1, 0], 200, HALVES) == 0


def test_fgd_learns_the_workload_from_the_queue() -> None:
    # free 1.0, 0.6, 0.7 again; a 0.2 job heads a queue of whole-GPU jobs. Whole-GPU jobs
    # to come: the idle GPU must stay idle, and of the partial ones either is lost to them,
    # so the 0.2 goes on GPU 1 (least free). With half-GPU jobs to come it went on GPU 2.
    gs = machine(a_gpu(0), a_gpu(1).allocated(0.4), a_gpu(2).allocated(0.3))
    whole = [a_job(i).gpus(1).priority(5) for i in range(2, 30)]
    plan = plan_for(gs, [a_job(1).gpus(0.2).priority(-1), *whole], policy=Policy(packing="fgd"))
    assert placed(plan)[1] == (1,)
    halves = [a_job(i).gpus(0.5).priority(5) for i in range(2, 30)]
    plan = plan_for(gs, [a_job(1).gpus(0.2).priority(-1), *halves], policy=Policy(packing="fgd"))
    assert placed(plan)[1] == (2,)


def test_a_packing_rota_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="packing 'tightest' is not one of best-fit"):
        GpuPool(FREE, Policy(packing="tightest"))
    with pytest.raises(ValueError, match="packing"):
        Settings(packing="tightest")


def test_the_setting_reaches_the_policy() -> None:
    s = Settings(packing="fgd", packing_seed=3)
    policy = Daemon.policy(SimpleNamespace(settings=s, draining=False))  # type: ignore[arg-type]
    assert (policy.packing, policy.packing_seed) == ("fgd", 3)
    assert Daemon.policy(SimpleNamespace(settings=Settings(), draining=False)  # type: ignore[arg-type]
                         ).packing == "best-fit"


# --- no policy over-commits ---------------------------------------------------------------

shares = st.sampled_from([50, 110, 230, 320, 470, 500, 650, 810, 1000, 2000])


@settings(max_examples=60, deadline=None)
@given(packing=st.sampled_from(PACKINGS), seed=st.integers(0, 1000),
       taken=st.lists(st.sampled_from([0, 100, 300, 500, 900, 1000]), min_size=1, max_size=6),
       waves=st.lists(st.lists(shares, min_size=1, max_size=8), min_size=1, max_size=4))
def test_no_policy_over_commits_a_gpu(packing: str, seed: int, taken: list[int],
                                      waves: list[list[int]]) -> None:
    gs = machine(*(a_gpu(i).allocated(t / MILLI) for i, t in enumerate(taken)))
    policy = Policy(packing=packing, packing_seed=seed)
    rng, next_id = random.Random(seed), 1
    for wave in waves:  # a pass per wave, each on the GPUs as the last one left them
        jobs = [a_job(next_id + k).milli(m).priority(rng.randrange(3))
                for k, m in enumerate(wave)]
        next_id += len(wave)
        plan = plan_for(gs, jobs, policy=policy)
        for start in plan.starts:
            assert len(set(start.gpu_indices)) == len(start.gpu_indices)
        gs = apply(gs, plan)
        assert all(0 <= g.allocated_milli <= MILLI for g in gs), gs


# --- the cached fragmentation equals the full computation --------------------------------

free_shares = st.sampled_from([0, 50, 100, 190, 300, 470, 500, 650, 810, 1000])
workloads = st.lists(st.tuples(st.sampled_from([50, 230, 470, 500, 810, 1000, 2000, 4000, 8000]),
                               st.integers(1, 20)), min_size=1, max_size=6).map(
    lambda ws: tuple(Shape(m, n / sum(k for _, k in ws)) for m, n in ws))


@settings(max_examples=150, deadline=None)
@given(workload=workloads,
       steps=st.lists(st.tuples(st.booleans(), free_shares), max_size=40),
       move=st.tuples(free_shares, st.sampled_from([50, 100, 230, 500, 1000])))
def test_frag_cache_equals_the_full_computation(workload: tuple[Shape, ...],
                                                steps: list[tuple[bool, int]],
                                                move: tuple[int, int]) -> None:
    cache, gpus = FragCache(workload), []
    for join, f in steps:  # GPUs join, or one of those there leaves
        if join or not gpus:
            gpus.append(f)
            cache.add(f)
        else:
            cache.add(gpus.pop(len(gpus) // 2), -1)
        assert cache.value() == pytest.approx(fragmentation(Counter(gpus), workload))
    f, milli = move
    if f in gpus and milli <= f:
        after = list(gpus)
        after[after.index(f)] = f - milli
        want = fragmentation(Counter(after), workload) - fragmentation(Counter(gpus), workload)
        assert cache.growth(f, milli) == pytest.approx(want)
        assert cache.value() == pytest.approx(fragmentation(Counter(gpus), workload))


@settings(max_examples=100, deadline=None)
@given(workload=workloads,
       free=st.lists(free_shares, min_size=1, max_size=16),
       size=st.lists(st.sampled_from([40, 80]), min_size=16, max_size=16),
       jobs=st.lists(st.tuples(st.sampled_from([50, 100, 230, 470, 500, 810]),
                               st.sampled_from([None, 30]), st.booleans()),
                     min_size=1, max_size=12),
       allowed_seed=st.integers(0, 100))
def test_the_pools_fgd_picks_what_the_full_computation_picks(
        workload: tuple[Shape, ...], free: list[int], size: list[int],
        jobs: list[tuple[int, int | None, bool]], allowed_seed: int) -> None:
    """GpuPool keeps the fragmentation cached and scores classes of GPUs; one job after
    another it must pick the GPU packing.fgd_pick finds from scratch over every GPU."""
    gib = 1 << 30
    gpus = [GpuView(index=i, memory_total=size[i] * gib, allocated_milli=MILLI - f,
                    reserved_memory=(MILLI - f) * size[i] * gib // MILLI)
            for i, f in enumerate(free)]
    pool = GpuPool(gpus, Policy(packing="fgd"), workload)
    rng = random.Random(allowed_seed)
    for k, (milli, mem_gib, pinned) in enumerate(jobs):
        mem = mem_gib * gib if mem_gib else None
        allowed = frozenset(rng.sample(range(len(free)), max(1, len(free) // 2))) \
            if pinned else None
        job = PendingJob(id=k, priority=0, seq=k, gpus_milli=milli, gpu_mem=mem,
                         allowed=allowed)
        usable = {i: f for i, f in pool.free_milli.items() if pool._key_of.get(i) is not None}
        cands = [i for i in (allowed if allowed is not None else usable)
                 if pool.usable(i, milli, mem)]
        want = fgd_pick(usable, cands, milli, workload)
        got = pool.find(job)
        assert got == (None if want is None else (want,))
        if got is not None:
            pool.take(got, milli, mem)
