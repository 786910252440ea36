"""Placing tasks on a cluster of GPU nodes: the node layer of a GpuPool (rota.core.nodes),
the paper's experiment (rota.sim.fill) and the openb benchmark."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from bench.bench_packing import Sampler, load, paper_trace, run_once, typical_workload, workload_for
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.core.nodes import Demand, NodeResources, tie_order
from rota.core.packing import PACKINGS, Shape
from rota.core.pool import GpuPool
from rota.core.schedule import schedule
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy, Snapshot
from rota.sim.fill import Node, allocation_at, arrivals, cluster_pool

OPENB = Path(__file__).parent / "data" / "openb"
BIG = 1 << 20


def node(name: str, gpus: int, cpu: int = BIG, memory: int = BIG, model: str = "G") -> Node:
    return Node(name, model, gpus, cpu, memory)


def Cluster(nodes: list[Node], policy: Policy, workload: tuple[Shape, ...] | None = None,
            rng: random.Random | None = None, whole_points: bool = True,
            order: list[int] | None = None) -> GpuPool:
    return cluster_pool(nodes, policy, workload, rng, whole_points, order)


def frees(c: GpuPool) -> list[list[int]]:
    """Each node's GPUs' free thousandths."""
    assert c.nodes is not None
    return [[c.free_milli[i] for i in gpus] for gpus in c.nodes.gpus_of]


def on_node(c: GpuPool, k: int, gpus: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """(node, GPU indices) with the node's own GPU numbers, as a task placed there sees them."""
    assert c.nodes is not None
    first = c.nodes.gpus_of[k][0]
    return k, tuple(i - first for i in gpus)


def place(c: GpuPool, d: Demand) -> tuple[int, tuple[int, ...]] | None:
    got = c.place(d)
    return None if got is None else on_node(c, *got)


def take_all(c: GpuPool, k: int, milli: int) -> None:
    assert c.nodes is not None
    c.take(c.nodes.gpus_of[k], milli, None)


def test_fgd_keeps_a_whole_node_free_for_the_whole_gpu_tasks_to_come() -> None:
    # node a has 0.5 of one GPU free; node b two idle GPUs; the workload is half 0.5-GPU
    # tasks, half 2-GPU tasks. A 0.5 task on b would leave b unable to take a 2-GPU task
    # (fragmentation grows by 0.5 * 1500); on a it grows by nothing.
    nodes = [node("a", 1), node("b", 2)]
    workload = (Shape(500, 0.5), Shape(2000, 0.5))
    c = Cluster(nodes, Policy(packing="fgd"), workload)
    place(c, Demand(500))  # the first goes on a (a is empty: 1.0 free; b would lose 2.0)
    assert frees(c) == [[500], [1000, 1000]]
    assert place(c, Demand(500)) == (0, (0,))
    assert frees(c) == [[0], [1000, 1000]]
    assert place(c, Demand(2000)) == (1, (0, 1))


def test_best_fit_takes_the_fullest_node_and_first_fit_the_first() -> None:
    nodes = [node("a", 2), node("b", 2)]
    c = Cluster(nodes, Policy(packing="best-fit"))
    place(c, Demand(1000))
    assert place(c, Demand(300)) == (0, (1,))  # a has less left than b
    f = Cluster(nodes, Policy(packing="first-fit"))
    take_all(f, 0, 900)
    assert place(f, Demand(300)) == (1, (0,))  # a cannot hold it: the next one


def test_cpus_memory_and_gpu_types_are_honoured() -> None:
    nodes = [node("small", 2, cpu=4000, memory=8000, model="T4"), node("big", 2, model="V100")]
    c = Cluster(nodes, Policy(packing="best-fit"))
    assert place(c, Demand(500, cpu=8000))[0] == 1  # type: ignore[index]
    assert place(c, Demand(500, memory=9000))[0] == 1  # type: ignore[index]
    assert place(c, Demand(1000, models=frozenset({"T4"})))[0] == 0  # type: ignore[index]
    assert place(c, Demand(3000)) is None  # no node has 3 GPUs


def test_a_multi_gpu_task_takes_all_its_gpus_on_one_node() -> None:
    c = Cluster([node("a", 2, model="X"), node("b", 2, model="Y")], Policy(packing="fgd"))
    assert place(c, Demand(1000, models=frozenset({"X"})))[0] == 0  # type: ignore[index]
    assert place(c, Demand(1000, models=frozenset({"Y"})))[0] == 1  # type: ignore[index]
    assert place(c, Demand(2000)) is None  # two GPUs free, on two nodes
    assert sum(MILLI - f for fs in frees(c) for f in fs) == 2000
    c = Cluster([node("a", 2), node("b", 2)], Policy(packing="fgd"))
    place(c, Demand(1000))
    assert place(c, Demand(1000)) == (0, (1,))  # FGD fills a: b keeps its 2 GPUs together
    assert place(c, Demand(2000)) == (1, (0, 1))


tasks = st.lists(st.tuples(st.sampled_from([0, 110, 320, 470, 810, 1000, 2000, 4000, 8000]),
                           st.integers(0, 16_000)), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(packing=st.sampled_from(PACKINGS), seed=st.integers(0, 99), ts=tasks)
def test_no_policy_over_commits_a_node(packing: str, seed: int,
                                       ts: list[tuple[int, int]]) -> None:
    nodes = [node("a", 8, cpu=32_000), node("b", 2, cpu=16_000), node("c", 1, cpu=8_000)]
    c = Cluster(nodes, Policy(packing=packing, packing_seed=seed), rng=random.Random(seed))
    placed = 0
    for milli, cpu in ts:
        got = place(c, Demand(milli, cpu=cpu))
        if got is not None:
            placed += milli
            assert len(got[1]) == (milli // MILLI if milli >= MILLI else 1 if milli else 0)
    assert all(0 <= f <= MILLI for fs in frees(c) for f in fs)
    assert c.nodes is not None
    assert all(free is not None and free >= 0 for free in c.nodes.cpu_free)
    used = sum(MILLI - f for fs in frees(c) for f in fs)
    assert used == placed


def test_the_openb_experiment_runs_on_an_excerpt() -> None:
    nodes, tasks = load(OPENB)
    assert (len(nodes), len(tasks)) == (21, 204)
    for variant in ("default", "multi-gpu-50", "sharing-100", "gpuspec-33", "non-gpu-25"):
        sampler = Sampler(tasks, nodes, variant)
        trace = sampler.trace()
        assert len(trace) == len(tasks)
        for workload in (workload_for(sampler, 500), typical_workload(trace)):
            for packing in PACKINGS:
                share = run_once(nodes, trace, workload, packing, seed=1)
                assert 0.5 < share <= 1.0, (variant, packing, share)


def test_best_fit_is_the_papers_cpu_and_gpu_left_over_the_largest_node() -> None:
    # a: 64 cores, b: 16 cores, both 2 GPUs; a 1-GPU task leaves 0.5*64/128 + 0.5*1/8 on a
    # (68 points) and 0.5*16/128 + 0.5*1/8 on b (87 points): b. Each node's own shares
    # (GPU 1/2 + CPU 1 + memory 1 on both) tie, and a wins.
    nodes = [node("a", 2, cpu=64_000), node("b", 2, cpu=16_000)]
    assert Cluster(nodes, Policy(packing="best-fit")).place(Demand(1000))[0] == 1  # type: ignore[index]
    exact = Cluster(nodes, Policy(packing="best-fit"), whole_points=False)
    assert exact.place(Demand(1000))[0] == 0  # type: ignore[index]



def test_nodes_scoring_alike_go_by_the_tie_order_not_the_node_list() -> None:
    # Three nodes with all GPUs taken: a CPU-only task changes no node's fragmentation, so
    # FGD scores all three 50 and they tie (as do most nodes for most CPU-only tasks on
    # openb's non-gpu-25). The paper's simulator prefixes node names with a random
    # permutation and the lowest name wins, so the tie goes to the node ranked first (c),
    # not to the first of the list (a); best-fit's ties likewise.
    # (CPUs differ by a thousandth of a core: three states, whose scores still tie.)
    workload = (Shape(1000, 0.75), Shape(0, 0.25, cpu=4000))
    nodes = [node("a", 1, cpu=BIG), node("b", 1, cpu=BIG + 1), node("c", 1, cpu=BIG + 2)]
    for packing in ("fgd", "best-fit"):
        c = Cluster(nodes, Policy(packing=packing), workload, order=[2, 1, 0])
        for i in range(3):
            take_all(c, i, MILLI)
        assert c.nodes is not None and len(c.nodes._members) == 3
        assert place(c, Demand(0, cpu=8000)) == (2, ()), packing
    # the list's order when none is given (the first node wins)
    c = Cluster([node("a", 1), node("b", 1)], Policy(packing="fgd"), workload)
    assert place(c, Demand(0, cpu=8000)) == (0, ())
    with pytest.raises(ValueError, match="order must rank the 2 nodes 0-1"):
        Cluster([node("a", 1), node("b", 1)], Policy(packing="fgd"), order=[1, 1])
    assert sorted(tie_order(5, random.Random(3))) == [0, 1, 2, 3, 4]
    assert tie_order(50, random.Random(3)) == tie_order(50, random.Random(3))
    assert tie_order(50, random.Random(3)) != list(range(50))


def test_the_papers_workload_keeps_every_trace_task_once_then_resamples() -> None:
    # the paper's simulator shuffles the trace's own pods and appends resampled ones up to
    # 130 % of the GPUs; drawing every task with replacement (the old bench) repeats some
    # tasks and misses others before 100 %
    nodes, tasks = load(OPENB)
    capacity = sum(n.gpus for n in nodes) * MILLI
    asked = sum(d.gpus_milli for d in tasks)
    assert asked < 2 * capacity  # the excerpt asks 170 %: tune up to 200 %
    got = arrivals(tasks, capacity, random.Random(7), ratio=2.0)
    head, tail = got[:len(tasks)], got[len(tasks):]
    assert sorted(head) == sorted(tasks) and head != tasks  # each once, shuffled
    assert tail and all(d in tasks for d in tail)
    total = sum(d.gpus_milli for d in got)
    assert 2 * capacity - 8000 < total <= 2 * capacity  # the next would pass 200 %
    assert got == arrivals(tasks, capacity, random.Random(7), 2.0)  # the seed fixes it
    assert got != arrivals(tasks, capacity, random.Random(8), 2.0)
    with pytest.raises(ValueError, match="ratio must be > 0"):
        arrivals(tasks, capacity, random.Random(7), ratio=0)


def test_a_trace_asking_too_much_loses_random_tasks() -> None:
    trace = [Demand(1000)] * 10 + [Demand(0)] * 5
    got = arrivals(trace, 5000, random.Random(1), ratio=1.0)
    assert sum(d.gpus_milli for d in got) == 5000  # 5 of the 1-GPU tasks went
    assert got.count(Demand(1000)) == 5


def test_the_figure_is_read_at_100_percent_arrival_and_failed_tasks_are_skipped() -> None:
    # 4 GPUs on two nodes: the 3-GPU task fits no node and is skipped, yet counts as
    # arrived (75 %); the run goes on, and the figure is read when arrivals reach 100 %
    c = Cluster([node("a", 2), node("b", 2)], Policy(packing="first-fit"))
    tasks = [Demand(3000), Demand(500), Demand(500), Demand(1000), Demand(1000)]
    assert allocation_at(c, tasks) == 0.25
    assert sum(MILLI - f for fs in frees(c) for f in fs) == 1000  # nothing placed past 101 %
    # a big task jumping from 25 % to 125 %: the allocation just before it
    c = Cluster([node("a", 1), node("b", 1)], Policy(packing="first-fit"))
    assert allocation_at(c, [Demand(500), Demand(2000), Demand(1000)]) == 0.25
    c = Cluster([node("a", 1), node("b", 1)], Policy(packing="first-fit"))
    with pytest.raises(ValueError, match="ask for less than 100 %"):
        allocation_at(c, [Demand(500)])


def test_a_variant_uses_the_papers_own_trace_file_when_there(tmp_path: Path) -> None:
    assert paper_trace(OPENB, "gpuspec-33") is None  # not in the excerpt: resampled
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    (tmp_path / "openb_pod_list_gpuspec33.csv").write_text(
        head + "p0,8000,1024,1,500,T4\np1,4000,0,2,1000,V100M16|V100M32\n")
    assert paper_trace(tmp_path, "gpuspec-33") == [
        Demand(500, 8000, 1024, frozenset({"T4"})),
        Demand(2000, 4000, 0, frozenset({"V100M16", "V100M32"}))]


def test_typical_pods_are_the_commonest_shapes_covering_95_percent_one_at_a_time() -> None:
    trace = [Demand(500, 1000)] * 90 + [Demand(1000, 2000)] * 6 + [Demand(0, 4000)] * 4
    one = typical_workload(trace)  # 90 %, then 96 %: two shapes
    assert [(s.gpus_milli, s.cpu) for s in one] == [(500, 1000), (1000, 2000)]
    assert abs(sum(s.weight for s in one) - 1) < 1e-9 and one[0].weight == 90 / 96
    assert len(typical_workload(trace, step=10)) == 3  # ten at a time: all of them


def test_the_pass_places_on_nodes_by_the_node_layer() -> None:
    # core's own pass over a pool with node resources: the FGD case of the first test, as
    # the simulator would run it (schedule -> GpuPool.find -> the node layer)
    workload = (Shape(500, 0.5), Shape(2000, 0.5))
    pool = Cluster([node("a", 1), node("b", 2)], Policy(packing="fgd"), workload)
    jobs = [PendingJob(id=1, priority=0, seq=1, gpus_milli=500),
            PendingJob(id=2, priority=0, seq=2, gpus_milli=500),
            PendingJob(id=3, priority=0, seq=3, gpus_milli=2000)]
    plan = schedule(Snapshot((), jobs, pool=pool), Policy(packing="fgd"), 0.0)
    assert {s.job_id: s.gpu_indices for s in plan.starts} == {1: (0,), 2: (0,), 3: (1, 2)}
    assert frees(pool) == [[1000], [1000, 1000]]  # the pass worked on its own copy


def test_a_copy_keeps_its_own_nodes_and_a_gpu_out_of_use_offers_nothing() -> None:
    pool = Cluster([node("a", 2, cpu=8000), node("b", 2, cpu=8000)], Policy(packing="best-fit"))
    copy = pool.copy(Policy(packing="best-fit"))
    assert place(copy, Demand(1000, cpu=6000)) == (0, (0,))
    assert copy.nodes is not None and pool.nodes is not None
    assert (copy.nodes.cpu_free, pool.nodes.cpu_free) == ([2000, 8000], [8000, 8000])
    assert place(pool, Demand(1000, cpu=6000)) == (0, (0,))  # the original: untouched
    # best-fit takes the fullest node that holds it: a, unless a's other GPU is out of use
    assert place(copy, Demand(500)) == (0, (1,))
    pool.set_unusable(1, "unhealthy")
    assert place(pool, Demand(500)) == (1, (0,))
    assert place(pool, Demand(0, cpu=4000)) == (1, ())  # a has 2 cores left


def test_a_pool_without_node_resources_places_no_task_and_a_gpu_needs_its_node() -> None:
    views = [GpuView(index=0, memory_total=0, node=0), GpuView(index=1, memory_total=0, node=1)]
    with pytest.raises(ValueError, match="place: the pool was built without node resources"):
        GpuPool(views, Policy()).place(Demand(500))
    with pytest.raises(ValueError, match="GPU 1 is on node 1, but resources are given for "
                                         "nodes 0-0 only"):
        GpuPool(views, Policy(), nodes=[NodeResources("G")])
