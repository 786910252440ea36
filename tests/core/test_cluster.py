"""Placing tasks on a cluster of GPU nodes (rota.core.cluster) and the openb benchmark."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from bench.bench_packing import Sampler, load, paper_trace, run_once, typical_workload, workload_for
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.core.cluster import Cluster, Demand, Node, allocation_at, arrivals, tie_order
from rota.core.packing import PACKINGS, Shape
from rota.core.snapshot import MILLI, Policy

OPENB = Path(__file__).parent / "data" / "openb"
BIG = 1 << 20


def node(name: str, gpus: int, cpu: int = BIG, memory: int = BIG, model: str = "G") -> Node:
    return Node(name, model, gpus, cpu, memory)


def frees(c: Cluster) -> list[list[int]]:
    return [[p.free_milli[i] for i in sorted(p.free_milli)] for p in c.pools]


def test_fgd_keeps_a_whole_node_free_for_the_whole_gpu_tasks_to_come() -> None:
    # node a has 0.5 of one GPU free; node b two idle GPUs; the workload is half 0.5-GPU
    # tasks, half 2-GPU tasks. A 0.5 task on b would leave b unable to take a 2-GPU task
    # (fragmentation grows by 0.5 * 1500); on a it grows by nothing.
    nodes = [node("a", 1), node("b", 2)]
    workload = (Shape(500, 0.5), Shape(2000, 0.5))
    c = Cluster(nodes, Policy(packing="fgd"), workload)
    c.place(Demand(500))  # the first goes on a (a is empty: 1.0 free; b would lose 2.0)
    assert frees(c) == [[500], [1000, 1000]]
    assert c.place(Demand(500)) == (0, (0,))
    assert frees(c) == [[0], [1000, 1000]]
    assert c.place(Demand(2000)) == (1, (0, 1))


def test_best_fit_takes_the_fullest_node_and_first_fit_the_first() -> None:
    nodes = [node("a", 2), node("b", 2)]
    c = Cluster(nodes, Policy(packing="best-fit"))
    c.place(Demand(1000))
    assert c.place(Demand(300)) == (0, (1,))  # a has less left than b
    f = Cluster(nodes, Policy(packing="first-fit"))
    f.pools[0].take([0, 1], 900, None)
    f._refile(0)
    assert f.place(Demand(300)) == (1, (0,))  # a cannot hold it: the next one


def test_cpus_memory_and_gpu_types_are_honoured() -> None:
    nodes = [node("small", 2, cpu=4000, memory=8000, model="T4"), node("big", 2, model="V100")]
    c = Cluster(nodes, Policy(packing="best-fit"))
    assert c.place(Demand(500, cpu=8000))[0] == 1  # type: ignore[index]
    assert c.place(Demand(500, memory=9000))[0] == 1  # type: ignore[index]
    assert c.place(Demand(1000, models=frozenset({"T4"})))[0] == 0  # type: ignore[index]
    assert c.place(Demand(3000)) is None  # no node has 3 GPUs


def test_a_multi_gpu_task_takes_all_its_gpus_on_one_node() -> None:
    c = Cluster([node("a", 2, model="X"), node("b", 2, model="Y")], Policy(packing="fgd"))
    assert c.place(Demand(1000, models=frozenset({"X"})))[0] == 0  # type: ignore[index]
    assert c.place(Demand(1000, models=frozenset({"Y"})))[0] == 1  # type: ignore[index]
    assert c.place(Demand(2000)) is None  # two GPUs free, on two nodes
    assert c.allocated_milli == 2000
    c = Cluster([node("a", 2), node("b", 2)], Policy(packing="fgd"))
    c.place(Demand(1000))
    assert c.place(Demand(1000)) == (0, (1,))  # FGD fills a: b keeps its 2 GPUs together
    assert c.place(Demand(2000)) == (1, (0, 1))


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
        got = c.place(Demand(milli, cpu=cpu))
        if got is not None:
            placed += milli
            assert len(got[1]) == (milli // MILLI if milli >= MILLI else 1 if milli else 0)
    assert all(0 <= f <= MILLI for fs in frees(c) for f in fs)
    assert all(free >= 0 for free in c.cpu_free)
    used = sum(MILLI - f for fs in frees(c) for f in fs)
    assert used == placed == c.allocated_milli


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
    exact = Cluster(nodes, Policy(packing="best-fit"), integer_scores=False)
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
            c.pools[i].take([0], MILLI, None)
            c._refile(i)
        assert len(c._members) == 3
        assert c.place(Demand(0, cpu=8000)) == (2, ()), packing
    # the list's order when none is given (the first node wins)
    c = Cluster([node("a", 1), node("b", 1)], Policy(packing="fgd"), workload)
    assert c.place(Demand(0, cpu=8000)) == (0, ())
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
    assert c.allocated_milli == 1000  # nothing placed past 101 %
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
