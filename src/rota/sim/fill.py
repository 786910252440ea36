"""Filling a cluster task by task, as Weng et al. (USENIX ATC'23) measure packing (pure).

Tasks arrive one after another and never leave; each is placed by the daemon's own
placement (`GpuPool.place` over the cluster's nodes, rota.core.nodes). The figure is the
share of GPU capacity allocated as the GPUs asked for reach the cluster's. Used by
bench/bench_packing.py on the Alibaba openb trace.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import NamedTuple

from rota.core import packing
from rota.core.nodes import Demand, NodeResources
from rota.core.pool import GpuPool
from rota.core.snapshot import MILLI, GpuView, Policy


class Node(NamedTuple):
    """A node of a cluster file: its name, GPU type and count, CPUs and memory."""

    name: str
    model: str
    gpus: int
    cpu: int  # any unit the demands use (openb: thousandths of a core)
    memory: int


def cluster_pool(nodes: Sequence[Node], policy: Policy,
                 workload: packing.Workload | None = None,
                 rng: random.Random | None = None, whole_points: bool = True,
                 order: Sequence[int] | None = None) -> GpuPool:
    """One GpuPool over every node's GPUs (numbered on across nodes), with the nodes'
    types, CPUs and memory: the pool places a task on a node, then on its GPUs there."""
    views: list[GpuView] = []
    for k, n in enumerate(nodes):
        views += [GpuView(index=len(views) + j, memory_total=0, node=k) for j in range(n.gpus)]
    return GpuPool(views, policy, workload, rng,
                   nodes=[NodeResources(n.model, n.cpu, n.memory) for n in nodes],
                   order=order, whole_points=whole_points)


def arrivals(trace: Sequence[Demand], capacity_milli: int, rng: random.Random,
             ratio: float = 1.3) -> list[Demand]:
    """The paper's workload for one seed: the trace's own tasks in an order shuffled by
    `rng`, then tasks drawn from the trace (with replacement) appended until the next would
    take the GPUs asked for past `ratio` of `capacity_milli`; a trace asking more than that
    loses tasks drawn at random instead. openb's own tasks ask 98 % of its GPUs, so the
    figure at 100 % arrival is almost all the trace's tasks, each once."""
    if not trace:
        raise ValueError("arrivals: the trace has no tasks")
    if ratio <= 0:
        raise ValueError(f"arrivals: ratio must be > 0, got {ratio}")
    tasks = list(trace)
    rng.shuffle(tasks)
    target = ratio * capacity_milli
    asked = sum(d.gpus_milli for d in tasks)
    while asked > target:
        asked -= tasks.pop(rng.randrange(len(tasks))).gpus_milli
    if not any(d.gpus_milli for d in trace):
        return tasks  # resampling GPU-less tasks would never reach the target
    while True:
        d = trace[rng.randrange(len(trace))]
        if asked + d.gpus_milli > target:
            return tasks
        asked += d.gpus_milli
        tasks.append(d)


def allocation_at(pool: GpuPool, tasks: Sequence[Demand], percent: int = 100) -> float:
    """Place `tasks` in order until the GPUs asked for pass `percent` % of the pool's;
    the share of GPU capacity allocated, averaged over the tasks whose arrival (the GPUs
    asked so far, placed or not) rounds to `percent` % (else to within a point of it), as
    the paper's analysis reads its figure; on a cluster so small that one task jumps past
    that window, the allocation just before it. A task no node can take is skipped and the
    run goes on, as in the paper's simulator."""
    capacity = len(pool.views) * MILLI
    arrived, allocated, last = 0, 0, None
    seen: dict[int, list[int]] = {percent - 1: [], percent: [], percent + 1: []}
    for d in tasks:
        arrived += d.gpus_milli
        at = round(100 * arrived / capacity)
        if at > percent + 1:
            break
        if pool.place(d) is not None:
            allocated += d.gpus_milli
        last = allocated
        if at in seen:
            seen[at].append(last)
    else:
        if not any(seen.values()):
            raise ValueError(f"allocation_at: the tasks ask for less than {percent} % of "
                             "the cluster's GPUs")
    got = seen[percent] or seen[percent - 1] + seen[percent + 1] or [last or 0]
    return sum(got) / len(got) / capacity
