"""Placing tasks on a cluster of GPU nodes with a packing policy (pure).

Each node's GPUs are a `GpuPool`, so the GPUs a task gets on a node are chosen by the very
code the daemon uses on its machine (`GpuPool.find` with the `Policy`'s packing); this
module adds what one machine does not have: the choice of node, and the node's CPUs and
memory. A multi-GPU task takes all its GPUs on one node. Used by bench/bench_packing.py to
compare the policies on the Alibaba openb trace as Weng et al. (ATC'23) do.

Nodes in the same state (model, free CPUs and memory, multiset of free GPU shares) form a
class and are scored once per task, as Nomad's equivalence classes: a 1,213-node cluster
has a few hundred classes even when full.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from rota.core import packing
from rota.core.pool import GpuPool
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy


class Node(NamedTuple):
    name: str
    model: str  # GPU type
    gpus: int
    cpu: int  # capacity, any unit the demands use (openb: thousandths of a core)
    memory: int


class Demand(NamedTuple):
    """What one task asks of a node."""

    gpus_milli: int  # 0: no GPU; < 1000: a share of one GPU; k * 1000: k whole GPUs
    cpu: int = 0
    memory: int = 0
    models: frozenset[str] | None = None  # GPU types it may run on; None: any


# (model, free cpu, free memory, free GPU shares sorted): what a node's score depends on
StateKey = tuple[str, int, int, tuple[int, ...]]

#: the paper's best-fit normalises free CPU (thousandths of a core) and GPU (thousandths)
#: by the largest node it knows of, and weighs them half and half (memory is not scored)
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8 * MILLI
#: scores are whole numbers in 0-100 as in the Kubernetes scheduler framework the paper runs
#: in; nodes whose scores round to the same number tie, and the first node wins the tie
#: (first in the cluster's tie order: see `tie_order`)
MAX_SCORE = 100


def tie_order(n: int, rng: random.Random) -> list[int]:
    """A random rank for each of `n` nodes, the order in which the paper's simulator breaks
    ties: it names node i "<perm[i]>-<name>" (perm a permutation drawn after the workload)
    and the lowest name wins a tie, so ties go to a random node fixed for the run, not to
    the first of the node list."""
    ranks = list(range(n))
    rng.shuffle(ranks)
    return ranks


class Cluster:
    def __init__(self, nodes: Sequence[Node], policy: Policy,
                 workload: packing.Workload | None = None,
                 rng: random.Random | None = None, integer_scores: bool = True,
                 order: Sequence[int] | None = None) -> None:
        """`integer_scores`: score nodes as the paper's scheduler does, in whole points of
        0-100 (FGD: 100 * sigmoid(fragmentation drop / one GPU); best-fit: 100 * (1 - what
        is left, CPU and GPU half each)), the first node winning a tie; False compares the
        exact figures (FGD: growth; best-fit: sum of the shares left of GPU, CPU, memory).
        `order`: each node's rank among nodes that score alike under best-fit and FGD, the
        lowest winning (`tie_order` draws the paper's); None: the list's order."""
        self.integer_scores = integer_scores
        self.nodes = list(nodes)
        if order is None:
            order = range(len(self.nodes))
        elif sorted(order) != list(range(len(self.nodes))):
            raise ValueError(f"Cluster: order must rank the {len(self.nodes)} nodes "
                             f"0-{len(self.nodes) - 1}, each once; got {list(order)[:10]}")
        self.rank = list(order)
        self.policy = policy
        self.packing = packing.check_packing(policy.packing)
        self.workload = workload or policy.workload or packing.DEFAULT_WORKLOAD
        self.rng = rng if rng is not None else random.Random(policy.packing_seed)
        self.pools = [GpuPool([GpuView(index=i, memory_total=0) for i in range(n.gpus)],
                              policy, self.workload, self.rng) for n in self.nodes]
        self.cpu_free = [n.cpu for n in self.nodes]
        self.mem_free = [n.memory for n in self.nodes]
        self.capacity_milli = sum(n.gpus for n in self.nodes) * MILLI
        self.allocated_milli = 0
        self._key: list[StateKey] = []
        self._members: dict[StateKey, dict[int, None]] = {}  # insertion-ordered sets
        self._frag: dict[StateKey, float] = {}
        self._score: dict[tuple[StateKey, Demand], float | None] = {}
        for i in range(len(self.nodes)):
            self._key.append(self._state(i))
            self._members.setdefault(self._key[i], {})[i] = None

    # --- state ---------------------------------------------------------------------------
    def _state(self, i: int) -> StateKey:
        free = self.pools[i].free_milli
        return (self.nodes[i].model, self.cpu_free[i], self.mem_free[i],
                tuple(sorted(free.values())))

    def _refile(self, i: int) -> None:
        old = self._key[i]
        del self._members[old][i]
        if not self._members[old]:
            del self._members[old]
        self._key[i] = key = self._state(i)
        self._members.setdefault(key, {})[i] = None

    def fragmentation(self, key: StateKey) -> float:
        """The node's expected GPU capacity lost to the workload (packing.fragmentation)."""
        got = self._frag.get(key)
        if got is None:
            model, cpu, mem, free = key
            # shapes that cannot use this GPU type, and tasks asking no GPU (the paper
            # counts every free GPU as unused by them), lose all the node's free GPUs
            fits = [s for s in self.workload
                    if s.gpus_milli and (s.models is None or model in s.models)]
            lost = sum(s.weight for s in self.workload) - sum(s.weight for s in fits)
            got = packing.fragmentation(Counter(free), tuple(fits), cpu, mem) \
                + lost * sum(free)
            self._frag[key] = got
        return got

    # --- placement -----------------------------------------------------------------------
    def _job(self, d: Demand) -> PendingJob:
        return PendingJob(id=0, priority=0, seq=0, gpus_milli=d.gpus_milli)

    def _fits(self, key: StateKey, d: Demand) -> bool:
        model, cpu, mem, free = key
        if d.cpu > cpu or d.memory > mem or (d.models is not None and model not in d.models):
            return False
        if d.gpus_milli >= MILLI:
            return free.count(MILLI) >= d.gpus_milli // MILLI
        return d.gpus_milli == 0 or (bool(free) and free[-1] >= d.gpus_milli)

    def _after(self, i: int, d: Demand) -> tuple[StateKey, tuple[int, ...]]:
        """The node's state once `d` is placed on it (GPUs by its pool's packing)."""
        gpus: tuple[int, ...] = ()
        free = dict(self.pools[i].free_milli)
        if self.packing == "fgd" and self.integer_scores and 0 < d.gpus_milli < MILLI:
            gpus = (self._fgd_gpu(i, d, free),)
            free[gpus[0]] -= d.gpus_milli
        elif d.gpus_milli:
            found = self.pools[i].find(self._job(d))
            assert found is not None  # _fits said so
            gpus = found
            for g in gpus:
                free[g] -= min(d.gpus_milli, MILLI)
        model = self.nodes[i].model
        return (model, self.cpu_free[i] - d.cpu, self.mem_free[i] - d.memory,
                tuple(sorted(free.values()))), gpus

    def _fgd_gpu(self, i: int, d: Demand, free: dict[int, int]) -> int:
        """The paper's choice of GPU for a share: the best score in whole points, the
        lowest index among GPUs that score alike."""
        model, cpu, mem = self.nodes[i].model, self.cpu_free[i] - d.cpu, self.mem_free[i] - d.memory
        before = self.fragmentation(self._key[i])
        best: tuple[int, int] | None = None
        for g in sorted(free):
            f = free[g]
            if f < d.gpus_milli:
                continue
            after = sorted(free.values())
            after[after.index(f)] = f - d.gpus_milli
            growth = self.fragmentation((model, cpu, mem, tuple(sorted(after)))) - before
            points = _points(_sigmoid(-growth / MILLI))
            if best is None or points > best[0]:
                best = (points, g)
        assert best is not None  # _fits said so
        return best[1]

    def _scored(self, key: StateKey, d: Demand) -> float:
        """Lower is better: best-fit, what the node has left; fgd, fragmentation growth."""
        got = self._score.get((key, d))
        if got is None:
            i = next(iter(self._members[key]))
            after, _ = self._after(i, d)
            if self.packing == "fgd":
                growth = self.fragmentation(after) - self.fragmentation(key)
                got = -_points(_sigmoid(-growth / MILLI)) if self.integer_scores else growth
            elif self.integer_scores:  # the paper's best-fit
                left = 0.5 * after[1] / MAX_SPEC_CPU + 0.5 * sum(after[3]) / MAX_SPEC_GPU
                got = -_points(1.0 - left)
            else:  # best-fit over the node's dimensions, each as a share of the node's
                n = self.nodes[i]
                got = (sum(after[3]) / (n.gpus * MILLI) if n.gpus else 0.0) \
                    + after[1] / max(n.cpu, 1) + after[2] / max(n.memory, 1)
            self._score[(key, d)] = got
        return got

    def pick_node(self, d: Demand) -> int | None:
        """The node the policy puts `d` on, or None when no node can take it."""
        feasible = [k for k in self._members if self._fits(k, d)]
        if not feasible:
            return None
        if self.packing == "first-fit":
            return min(min(self._members[k]) for k in feasible)
        if self.packing == "random":
            sizes = [len(self._members[k]) for k in feasible]
            k = self.rng.choices(feasible, weights=sizes)[0]
            return list(self._members[k])[self.rng.randrange(len(self._members[k]))]
        best = min(self._scored(k, d) for k in feasible)
        rank = self.rank.__getitem__
        return min((i for k in feasible if self._scored(k, d) == best for i in self._members[k]),
                   key=rank)

    def place(self, d: Demand) -> tuple[int, tuple[int, ...]] | None:
        """Put `d` on the node its policy picks: (node, GPU indices there), or None."""
        i = self.pick_node(d)
        if i is None:
            return None
        _, gpus = self._after(i, d)
        self.pools[i].take(gpus, min(d.gpus_milli, MILLI), None)
        self.cpu_free[i] -= d.cpu
        self.mem_free[i] -= d.memory
        self.allocated_milli += d.gpus_milli
        self._refile(i)
        return i, gpus


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


def allocation_at(cluster: Cluster, tasks: Sequence[Demand], percent: int = 100) -> float:
    """Place `tasks` in order until the GPUs asked for pass `percent` % of the cluster's;
    the share of GPU capacity allocated, averaged over the tasks whose arrival (the GPUs
    asked so far, placed or not) rounds to `percent` % (else to within a point of it), as
    the paper's analysis reads its figure; on a cluster so small that one task jumps past
    that window, the allocation just before it. A task no node can take is skipped and the
    run goes on, as in the paper's simulator."""
    arrived, last = 0, None
    seen: dict[int, list[int]] = {percent - 1: [], percent: [], percent + 1: []}
    for d in tasks:
        arrived += d.gpus_milli
        at = round(100 * arrived / cluster.capacity_milli)
        if at > percent + 1:
            break
        cluster.place(d)
        last = cluster.allocated_milli
        if at in seen:
            seen[at].append(last)
    else:
        if not any(seen.values()):
            raise ValueError(f"allocation_at: the tasks ask for less than {percent} % of "
                             "the cluster's GPUs")
    got = seen[percent] or seen[percent - 1] + seen[percent + 1] or [last or 0]
    return sum(got) / len(got) / cluster.capacity_milli


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def _points(x: float) -> int:
    """A 0-1 figure as whole points of MAX_SCORE, truncated as Go's int64() does."""
    return int(x * MAX_SCORE)
