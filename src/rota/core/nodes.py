"""The node layer of a GpuPool whose nodes say what they hold besides GPUs (pure).

A pool built with `NodeResources` (a GPU type, CPUs and memory per node: a cluster, as
the packing benchmark and the simulator replay one) places a task in two steps: first the
node, by the pool's packing policy, among the nodes that can take the task whole (its
GPUs, CPUs, memory and GPU type), then its GPUs on that node by the pool's own per-GPU
rules, the daemon's on its one machine. A multi-GPU task takes all its GPUs on one node.

Node scores are those of Weng et al. (USENIX ATC'23) and the Kubernetes scheduler their
simulator runs in: whole points of 0-100 (FGD: 100 * sigmoid(fragmentation drop / one
GPU); best-fit: 100 * (1 - what is left, CPU and GPU half each, over the largest node)),
nodes scoring alike ranked by a tie order (`tie_order`: the paper's is a random
permutation fixed for the run). ``whole_points=False`` compares exact figures instead
(FGD: the growth; best-fit: the shares left of GPU, CPU and memory).

Nodes in the same state (model, free CPUs and memory, multiset of free GPU shares) form a
class and are scored once per task, as Nomad's equivalence classes: openb's 1,213 nodes
are a few hundred classes even when full.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from rota.core import packing
from rota.core.snapshot import MILLI, PendingJob

if TYPE_CHECKING:
    from rota.core.pool import GpuPool


class NodeResources(NamedTuple):
    """What a node holds besides its GPUs. None: not counted (never short)."""

    model: str = ""  # its GPUs' type
    cpu: int | None = None  # any unit the demands use (openb: thousandths of a core)
    memory: int | None = None


class Demand(NamedTuple):
    """What one task asks of a node."""

    gpus_milli: int  # 0: no GPU; < 1000: a share of one GPU; k * 1000: k whole GPUs
    cpu: int = 0
    memory: int = 0
    models: frozenset[str] | None = None  # GPU types it may run on; None: any
    gpu_mem: int | None = None  # bytes per GPU


# (model, free cpu, free memory, free GPU shares sorted): what a node's score depends on
StateKey = tuple[str, int | None, int | None, tuple[int, ...]]

#: the paper's best-fit normalises free CPU (thousandths of a core) and GPU (thousandths)
#: by the largest node it knows of, and weighs them half and half (memory is not scored)
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8 * MILLI
#: whole points of 0-100, as the Kubernetes scheduler framework scores nodes
MAX_SCORE = 100


def tie_order(n: int, rng: random.Random) -> list[int]:
    """A random rank for each of `n` nodes, the order in which the paper's simulator breaks
    ties: it names node i "<perm[i]>-<name>" (perm a permutation drawn after the workload)
    and the lowest name wins a tie, so ties go to a random node fixed for the run, not to
    the first of the node list."""
    ranks = list(range(n))
    rng.shuffle(ranks)
    return ranks


class NodeLayer:
    """A pool's nodes: their CPUs and memory left, their classes, and the choice of node."""

    def __init__(self, pool: GpuPool, nodes: Sequence[NodeResources],
                 order: Sequence[int] | None, whole_points: bool) -> None:
        on: dict[int, list[int]] = {k: [] for k in range(len(nodes))}
        for i in sorted(pool.views):
            node = pool.views[i].node
            if node not in on:
                raise ValueError(f"GpuPool: GPU {i} is on node {node}, but resources are "
                                 f"given for nodes 0-{len(nodes) - 1} only")
            on[node].append(i)
        if order is None:
            order = range(len(nodes))
        elif sorted(order) != list(range(len(nodes))):
            raise ValueError(f"GpuPool: order must rank the {len(nodes)} nodes "
                             f"0-{len(nodes) - 1}, each once; got {list(order)[:10]}")
        self.pool = pool
        self.nodes = list(nodes)
        self.gpus_of = [on[k] for k in range(len(nodes))]
        self.allowed = [frozenset(g) for g in self.gpus_of]
        self.rank = list(order)
        self.whole_points = whole_points
        self.cpu_free = [n.cpu for n in nodes]
        self.mem_free = [n.memory for n in nodes]
        self._key: list[StateKey] = []
        self._members: dict[StateKey, dict[int, None]] = {}  # insertion-ordered sets
        self._frag: dict[StateKey, float] = {}  # pure functions of a state: shared by copies
        self._score: dict[tuple[StateKey, Demand], float] = {}
        for k in range(len(nodes)):
            self._key.append(self._state(k))
            self._members.setdefault(self._key[k], {})[k] = None

    def copy(self, pool: GpuPool) -> NodeLayer:
        """This layer over `pool`, a copy of its own pool (GpuPool.copy)."""
        new = NodeLayer.__new__(NodeLayer)
        new.__dict__.update(self.__dict__)
        new.pool = pool
        new.cpu_free, new.mem_free, new._key = self.cpu_free.copy(), self.mem_free.copy(), \
            self._key.copy()
        new._members = {k: m.copy() for k, m in self._members.items()}
        return new

    # --- state ---------------------------------------------------------------------------
    def _state(self, k: int) -> StateKey:
        pool = self.pool
        # a GPU out of use (unusable, kept for a blocked job) has nothing free to offer
        free = [pool.free_milli[i] if pool.is_filed(i) else 0 for i in self.gpus_of[k]]
        free.sort()
        return (self.nodes[k].model, self.cpu_free[k], self.mem_free[k], tuple(free))

    def refile(self, k: int) -> None:
        """Node `k` changed (a GPU's share, its CPUs or memory): its class again."""
        old = self._key[k]
        members = self._members[old]
        del members[k]
        if not members:
            del self._members[old]
        self._key[k] = key = self._state(k)
        self._members.setdefault(key, {})[k] = None

    def fragmentation(self, key: StateKey) -> float:
        """The node's expected GPU capacity lost to the workload (packing.fragmentation)."""
        got = self._frag.get(key)
        if got is None:
            model, cpu, mem, free = key
            workload = self.pool.workload
            # shapes that cannot use this GPU type, and tasks asking no GPU (the paper
            # counts every free GPU as unused by them), lose all the node's free GPUs
            fits = [s for s in workload
                    if s.gpus_milli and (s.models is None or model in s.models)]
            lost = sum(s.weight for s in workload) - sum(s.weight for s in fits)
            got = packing.fragmentation(Counter(free), tuple(fits), cpu, mem) \
                + lost * sum(free)
            self._frag[key] = got
        return got

    # --- placement -----------------------------------------------------------------------
    def _fits(self, key: StateKey, d: Demand) -> bool:
        model, cpu, mem, free = key
        if (cpu is not None and d.cpu > cpu) or (mem is not None and d.memory > mem) \
                or (d.models is not None and model not in d.models):
            return False
        if d.gpus_milli >= MILLI:
            return free.count(MILLI) >= d.gpus_milli // MILLI
        return d.gpus_milli == 0 or (bool(free) and free[-1] >= d.gpus_milli)

    def gpus_on(self, k: int, d: Demand) -> tuple[int, ...] | None:
        """The GPUs `d` gets on node `k`: the pool's per-GPU rules over the node's GPUs
        (FGD's share: the GPU that leaves the node least fragmented)."""
        if not d.gpus_milli:
            return ()
        if self.pool.packing == "fgd" and 0 < d.gpus_milli < MILLI:
            return self._fgd_gpu(k, d)
        job = PendingJob(id=0, priority=0, seq=0, gpus_milli=d.gpus_milli,
                         gpu_mem=d.gpu_mem, allowed=self.allowed[k])
        return self.pool.find_gpus(job)

    def _after(self, k: int, d: Demand) -> tuple[StateKey, tuple[int, ...]]:
        """Node `k`'s state once `d` is placed on it, and the GPUs it gets there."""
        gpus = self.gpus_on(k, d)
        assert gpus is not None  # _fits said so
        model, cpu, mem, free = self._key[k]
        shares = list(free)
        for i in gpus:
            f = self.pool.free_milli[i]
            shares[shares.index(f)] = f - min(d.gpus_milli, MILLI)
        return (model, None if cpu is None else cpu - d.cpu,
                None if mem is None else mem - d.memory, tuple(sorted(shares))), gpus

    def _fgd_gpu(self, k: int, d: Demand) -> tuple[int, ...] | None:
        """The GPU whose share grows the node's fragmentation least: in whole points, the
        lowest index among GPUs that score alike (as the paper's scheduler); exact, the
        least growth, then the least free, then the lowest index."""
        model, cpu, mem, free = self._key[k]
        cpu = None if cpu is None else cpu - d.cpu
        mem = None if mem is None else mem - d.memory
        before = self.fragmentation(self._key[k])
        pool, m = self.pool, d.gpus_milli
        best: tuple[float, int, int] | None = None
        for i in self.gpus_of[k]:
            if not pool.usable(i, m, d.gpu_mem):
                continue
            f = pool.free_milli[i]
            after = list(free)
            after[after.index(f)] = f - m
            growth = self.fragmentation((model, cpu, mem, tuple(sorted(after)))) - before
            score = (-_points(_sigmoid(-growth / MILLI)), 0, i) if self.whole_points \
                else (growth, f, i)
            if best is None or score < best:
                best = score
        return None if best is None else (best[2],)

    def _scored(self, key: StateKey, d: Demand) -> float:
        """Lower is better: best-fit, what the node has left; fgd, fragmentation growth."""
        got = self._score.get((key, d))
        if got is None:
            k = next(iter(self._members[key]))
            after, _ = self._after(k, d)
            _, cpu_left, mem_left, free_left = after
            if self.pool.packing == "fgd":
                growth = self.fragmentation(after) - self.fragmentation(key)
                got = -_points(_sigmoid(-growth / MILLI)) if self.whole_points else growth
            elif self.whole_points:  # the paper's best-fit
                left = 0.5 * (cpu_left or 0) / MAX_SPEC_CPU + 0.5 * sum(free_left) / MAX_SPEC_GPU
                got = -_points(1.0 - left)
            else:  # best-fit over the node's dimensions, each as a share of the node's
                n, gpus = self.nodes[k], len(self.gpus_of[k])
                got = (sum(free_left) / (gpus * MILLI) if gpus else 0.0) \
                    + (cpu_left / max(n.cpu, 1) if n.cpu is not None and cpu_left else 0.0) \
                    + (mem_left / max(n.memory, 1) if n.memory is not None and mem_left
                       else 0.0)
            self._score[(key, d)] = got
        return got

    def pick(self, d: Demand) -> int | None:
        """The node the policy puts `d` on, or None when no node can take it."""
        feasible = [key for key in self._members if self._fits(key, d)]
        if not feasible:
            return None
        packing_, members = self.pool.packing, self._members
        if packing_ == "first-fit":
            return min(min(members[key]) for key in feasible)
        if packing_ == "random":
            rng = self.pool.rng
            key = rng.choices(feasible, weights=[len(members[key]) for key in feasible])[0]
            return list(members[key])[rng.randrange(len(members[key]))]
        best = min(self._scored(key, d) for key in feasible)
        return min((k for key in feasible if self._scored(key, d) == best
                    for k in members[key]), key=self.rank.__getitem__)

    def find(self, d: Demand) -> tuple[int, tuple[int, ...]] | None:
        """(node, GPUs there) for `d`, or None. Takes nothing."""
        k = self.pick(d)
        return None if k is None else (k, self._after(k, d)[1])

    def take(self, k: int, d: Demand) -> None:
        """`d`'s CPUs and memory on node `k` (its GPUs: GpuPool.take, which refiles)."""
        if d.cpu and self.cpu_free[k] is not None:
            self.cpu_free[k] -= d.cpu  # type: ignore[operator]
        if d.memory and self.mem_free[k] is not None:
            self.mem_free[k] -= d.memory  # type: ignore[operator]
        self.refile(k)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def _points(x: float) -> int:
    """A 0-1 figure as whole points of MAX_SCORE, truncated as Go's int64() does."""
    return int(x * MAX_SCORE)
