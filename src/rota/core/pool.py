"""Per-pass GPU state: the proposed-state overlay the scheduler places jobs into.

Nothing in a Snapshot is mutated; a pass copies capacity into a GpuPool and every check sees
the GPUs as they would be after the starts decided so far. GPUs with the same free share and
size form an equivalence class (a heap of indices), so finding the best-fit GPU costs a walk
over a handful of classes rather than over every GPU.

The GPUs may be on several nodes (GpuView.node: the simulator passes a whole cluster in one
list): a job of k whole GPUs then gets all k on one node, the node with the fewest whole
free GPUs that holds it (best fit, so whole nodes stay free for wide jobs), and a blocked
one keeps GPUs on one node. A share of a GPU goes on any GPU. On one node (the daemon's
machine) none of this bookkeeping exists.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Sequence
from dataclasses import replace

from rota.core import packing
from rota.core.feasibility import most_memory
from rota.core.nodes import Demand, NodeLayer, NodeResources
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy

ClassKey = tuple[int, int]  # (free_milli, memory_total)


class GpuPool:
    def __init__(self, gpus: Sequence[GpuView], policy: Policy,
                 workload: packing.Workload | None = None,
                 rng: random.Random | None = None,
                 nodes: Sequence[NodeResources] | None = None,
                 order: Sequence[int] | None = None, whole_points: bool = True) -> None:
        """`nodes`: what node k (GpuView.node) holds besides GPUs, for each k (the node
        layer, rota.core.nodes; `order` ranks nodes scoring alike, the lowest winning,
        None: node 0 first; `whole_points`: score nodes in whole points as the paper's
        scheduler, else by exact figures)."""
        self.policy = policy
        self.packing = packing.check_packing(policy.packing)
        # FGD's idea of the jobs to come: the caller's, the policy's, else a default
        self.workload = workload or policy.workload or packing.DEFAULT_WORKLOAD
        self.rng = rng if rng is not None else random.Random(policy.packing_seed)
        self.views = {g.index: g for g in gpus}
        self.free_milli: dict[int, int] = {}
        self.free_mem: dict[int, int] = {}
        self.reserved_for: dict[int, int] = {}
        self.unusable: dict[int, str] = {}  # index -> why no new work goes there
        self._key_of: dict[int, ClassKey | None] = {}
        self._classes: dict[ClassKey, list[int]] = {}
        self._count: dict[ClassKey, int] = {}  # live members of each class
        self.version = 0  # bumped whenever capacity changes
        self._cands: dict[tuple[int, int | None], tuple[int, frozenset[int]]] = {}
        self._sorted_keys: list[ClassKey] | None = None
        # FGD's figure over the filed GPUs, kept up to date by _file/_unfile (with nodes,
        # each node's own figure is the layer's)
        self._frag = packing.FragCache(self.workload) \
            if self.packing == "fgd" and nodes is None else None
        self.nodes: NodeLayer | None = None
        # nodes: only kept when the GPUs are on more than one
        self.multi = len({g.node for g in gpus}) > 1
        self.node_of: dict[int, int] = {}
        self.members: dict[int, list[int]] = {}  # node -> its GPUs, by index
        self._whole_on: dict[int, int] = {}  # node -> filed GPUs with all of it free
        self._free_on: dict[int, int] = {}  # node -> free thousandths of its filed GPUs
        if self.multi:
            for g in sorted(gpus, key=lambda g: g.index):
                self.node_of[g.index] = g.node
                self.members.setdefault(g.node, []).append(g.index)
                self._whole_on.setdefault(g.node, 0)
                self._free_on.setdefault(g.node, 0)
        self.all_gpus = frozenset(self.views)
        self._mem_desc: list[int] | None = None
        self._least = 0
        for g in gpus:
            self.free_milli[g.index] = g.free_milli
            self.free_mem[g.index] = g.free_memory
            why = _unusable_reason(g, policy)
            if why:
                self.unusable[g.index] = why
                self._key_of[g.index] = None
            else:
                self._file(g.index)
        if nodes is not None:
            self.nodes = NodeLayer(self, nodes, order, whole_points)

    def copy(self, policy: Policy, workload: packing.Workload | None = None) -> GpuPool:
        """A pass's own copy of a pool its caller keeps up to date (Snapshot.pool): dicts
        copied in C rather than a pool built GPU by GPU, which over a cluster's 1,024 GPUs
        costs milliseconds a pass. The copy's starts do not touch this pool."""
        if (policy.mem_threshold, policy.util_threshold) != \
                (self.policy.mem_threshold, self.policy.util_threshold):
            raise ValueError("a kept GpuPool was built under other GPU thresholds")
        for key, heap in self._classes.items():  # drop stale entries now and then
            if len(heap) > 2 * self._count.get(key, 0) + 8:
                heap[:] = [i for i in heap if self._key_of.get(i) == key]
                heapq.heapify(heap)
        new = GpuPool.__new__(GpuPool)
        new.policy, new.packing = policy, packing.check_packing(policy.packing)
        new.workload = workload or policy.workload or packing.DEFAULT_WORKLOAD
        new.rng = random.Random(policy.packing_seed)  # as a pool built for the pass
        new.views, new.all_gpus = self.views, self.all_gpus  # never changed
        new.free_milli, new.free_mem = self.free_milli.copy(), self.free_mem.copy()
        new.reserved_for, new.unusable = self.reserved_for.copy(), self.unusable.copy()
        new._key_of, new._count = self._key_of.copy(), self._count.copy()
        new._classes = {k: h.copy() for k, h in self._classes.items()}
        new.version, new._cands = self.version, {}
        new._sorted_keys = None if self._sorted_keys is None else self._sorted_keys.copy()
        new.multi, new.node_of, new.members = self.multi, self.node_of, self.members
        new._whole_on, new._free_on = self._whole_on.copy(), self._free_on.copy()
        new._mem_desc, new._least = self.mem_desc(), self.least_memory()
        new.nodes = None if self.nodes is None else self.nodes.copy(new)
        frag = None
        if new.packing == "fgd" and new.nodes is None:  # its own figure, its own workload
            frag = packing.FragCache(new.workload)
            for filed in new._key_of.values():
                if filed is not None:
                    frag.add(filed[0])
        new._frag = frag
        return new

    def mem_desc(self) -> list[int]:
        """GPU memory sizes, largest first: a k-GPU job needs the k-th to hold its gpu_mem
        (on several nodes, the k-th largest of one node: feasibility.most_memory)."""
        if self._mem_desc is None:
            views = self.views.values()
            self._mem_desc = most_memory((g.node, g.memory_total) for g in views) \
                if self.multi else sorted((g.memory_total for g in views), reverse=True)
            self._least = min((g.memory_total for g in views), default=0)
        return self._mem_desc

    def least_memory(self) -> int:
        """The smallest GPU's memory."""
        self.mem_desc()
        return self._least

    def give(self, indices: Iterable[int], milli: int, gpu_mem: int | None) -> None:
        """Undo a take: the caller's job ended (for a pool kept across passes)."""
        self.take(indices, -milli, -gpu_mem if gpu_mem else None)

    def set_unusable(self, i: int, why: str | None) -> None:
        """Take a GPU out of use (why: in words) or put it back (None), in a kept pool."""
        if why is None:
            self.unusable.pop(i, None)
        else:
            self.unusable[i] = why
        self._file(i)

    # --- class bookkeeping -------------------------------------------------------------
    def _unfile(self, i: int) -> None:
        old = self._key_of.get(i)
        if old is not None:
            self._count[old] -= 1
            if self._frag is not None:
                self._frag.add(old[0], -1)
            if self.multi:
                self._free_on[self.node_of[i]] -= old[0]
                if old[0] == MILLI:
                    self._whole_on[self.node_of[i]] -= 1
        self._key_of[i] = None

    def is_filed(self, i: int) -> bool:
        """Whether GPU i can take new work (some of it free, not kept nor out of use)."""
        return self._key_of.get(i) is not None

    def _node_changed(self, i: int) -> None:
        if self.nodes is not None:
            self.nodes.refile(self.views[i].node)

    def _file(self, i: int) -> None:
        self._unfile(i)
        self.version += 1
        if self.free_milli[i] <= 0 or i in self.reserved_for or i in self.unusable:
            self._node_changed(i)
            return
        key = (self.free_milli[i], self.views[i].memory_total)
        self._key_of[i] = key
        self._count[key] = self._count.get(key, 0) + 1
        if self._frag is not None:
            self._frag.add(key[0])
        if self.multi:
            self._free_on[self.node_of[i]] += key[0]
            if key[0] == MILLI:
                self._whole_on[self.node_of[i]] += 1
        heap = self._classes.get(key)
        if heap is None:
            self._classes[key] = heap = []
            self._sorted_keys = None
        heapq.heappush(heap, i)
        self._node_changed(i)

    def _keys(self) -> list[ClassKey]:
        if self._sorted_keys is None:
            self._sorted_keys = sorted(self._classes)
        return self._sorted_keys

    def _first_in_class(self, key: ClassKey, gpu_mem: int | None,
                        skip: frozenset[int] | set[int] = frozenset()) -> int | None:
        """Lowest valid index in a class with enough free memory (lazy deletion)."""
        heap = self._classes[key]
        aside: list[int] = []
        found: int | None = None
        while heap:
            i = heap[0]
            if self._key_of.get(i) != key:
                heapq.heappop(heap)  # stale entry: the GPU moved class
                continue
            if i in skip or (gpu_mem is not None and self.free_mem[i] < gpu_mem):
                aside.append(heapq.heappop(heap))
                continue
            found = i
            break
        for i in aside:
            heapq.heappush(heap, i)
        return found

    def cannot_fit_anywhere(self, job: PendingJob) -> bool:
        """Cheap bound: true when no GPU on the machine (reserved ones included) has room.

        Ignores allowed sets and memory, so a False proves nothing, but a True is final for
        this pass: it lets most of a long queue be rejected without a search.
        """
        reserved = [i for i in self.reserved_for]
        if job.gpus_milli < MILLI:
            if any(self.free_milli[i] >= job.gpus_milli for i in reserved):
                return False
            return not any(k[0] >= job.gpus_milli and n > 0 for k, n in self._count.items())
        if self.multi:  # the most whole free GPUs on one node
            on = dict(self._whole_on)
            for i in reserved:
                if self.free_milli[i] == MILLI:
                    on[self.node_of[i]] += 1
            return max(on.values(), default=0) < job.gpus_milli // MILLI
        whole = sum(n for k, n in self._count.items() if k[0] == MILLI)
        whole += sum(1 for i in reserved if self.free_milli[i] == MILLI)
        return whole < job.gpus_milli // MILLI

    def candidates(self, milli: int, gpu_mem: int | None) -> frozenset[int]:
        """GPUs that could hold one GPU's part of such a job now (cached until a change)."""
        key = (min(milli, MILLI), gpu_mem)
        hit = self._cands.get(key)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        found = frozenset(i for i, k in self._key_of.items() if k is not None and k[0] >= key[0]
                          and (gpu_mem is None or self.free_mem[i] >= gpu_mem))
        self._cands[key] = (self.version, found)
        return found

    def whole_free(self) -> int:
        return sum(n for k, n in self._count.items() if k[0] == MILLI)

    def most_whole_on_a_node(self) -> int:
        return max(self._whole_on.values(), default=0)

    def max_free_share(self) -> int:
        return max((k[0] for k, n in self._count.items() if n > 0), default=0)

    # --- placement ---------------------------------------------------------------------
    def usable(self, i: int, milli: int, gpu_mem: int | None) -> bool:
        return (self._key_of.get(i) is not None and self.free_milli[i] >= milli
                and (gpu_mem is None or self.free_mem[i] >= gpu_mem))

    def find(self, job: PendingJob) -> tuple[int, ...] | None:
        """GPUs for the job as the pool stands, or None. Does not take them."""
        if self.nodes is not None:
            found = self.nodes.find(Demand(job.gpus_milli, gpu_mem=job.gpu_mem))
            return None if found is None else found[1]
        return self.find_gpus(job)

    def place(self, d: Demand) -> tuple[int, tuple[int, ...]] | None:
        """Put a task on the node the policy picks (the node layer's): (node, its GPUs
        there), taken with its CPUs and memory; None when no node can take it."""
        if self.nodes is None:
            raise ValueError("GpuPool.place: the pool was built without node resources")
        found = self.nodes.find(d)
        if found is None:
            return None
        node, gpus = found
        self.take(gpus, min(d.gpus_milli, MILLI), d.gpu_mem)
        self.nodes.take(node, d)
        return found

    def find_gpus(self, job: PendingJob) -> tuple[int, ...] | None:
        """GPUs for the job by the per-GPU rules, over all GPUs or job.allowed."""
        if job.gpus_milli < MILLI:
            return self._find_share(job)
        return self._find_whole(job, job.gpus_milli // MILLI)

    def _find_share(self, job: PendingJob) -> tuple[int, ...] | None:
        m, mem = job.gpus_milli, job.gpu_mem
        if self.packing != "best-fit":
            return self._find_share_by_policy(job)
        if job.allowed is not None:
            best = min((i for i in job.allowed if self.usable(i, m, mem)),
                       key=lambda i: (self.free_milli[i], i), default=None)
            return None if best is None else (best,)
        # Best fit: the GPU with the least free share that still holds the job, so whole
        # GPUs stay free for jobs that need them.
        for key in self._keys():
            if key[0] < m or not self._classes.get(key):
                continue
            i = self._first_in_class(key, mem)
            if i is not None:
                return (i,)
        return None

    def _find_share_by_policy(self, job: PendingJob) -> tuple[int, ...] | None:
        m, mem = job.gpus_milli, job.gpu_mem
        if self._frag is not None:
            return self._find_share_fgd(job, self._frag)
        cands = (i for i in (job.allowed if job.allowed is not None else self.views)
                 if self.usable(i, m, mem))
        picked: int | None
        if self.packing == "first-fit":
            picked = min(cands, default=None)
        else:  # random
            picked = packing.random_pick(cands, self.rng)
        return None if picked is None else (picked,)

    def _find_share_fgd(self, job: PendingJob, frag: packing.FragCache) -> tuple[int, ...] | None:
        """The GPU whose use grows the fragmentation least (ties: least free, lowest index),
        as packing.fgd_pick, but from the cached figure and by class: GPUs with the same
        free share grow it the same, so each share is scored once."""
        m, mem = job.gpus_milli, job.gpu_mem
        growth: dict[int, float] = {}

        def grows(f: int) -> float:
            g = growth.get(f)
            if g is None:
                g = growth[f] = frag.growth(f, m)
            return g

        if job.allowed is not None:
            best = min(((grows(self.free_milli[i]), self.free_milli[i], i)
                        for i in job.allowed if self.usable(i, m, mem)), default=None)
            return None if best is None else (best[2],)
        ranked = sorted((grows(k[0]), k[0], k) for k in self._keys()
                        if k[0] >= m and self._count.get(k))
        at = 0
        while at < len(ranked):  # classes scoring alike (same share, other GPU sizes) together
            end = at
            while end < len(ranked) and ranked[end][:2] == ranked[at][:2]:
                end += 1
            found = [i for _, _, k in ranked[at:end]
                     if (i := self._first_in_class(k, mem)) is not None]
            if found:
                return (min(found),)
            at = end
        return None

    def _find_whole(self, job: PendingJob, count: int) -> tuple[int, ...] | None:
        mem = job.gpu_mem
        if self.multi and count > 1:
            return self._find_whole_on_a_node(job, count)
        if job.allowed is not None:
            picked = sorted(i for i in job.allowed if self.usable(i, MILLI, mem))[:count]
            return tuple(picked) if len(picked) == count else None
        chosen: set[int] = set()
        for key in self._keys():
            if key[0] != MILLI:
                continue
            while len(chosen) < count:
                i = self._first_in_class(key, mem, chosen)
                if i is None:
                    break
                chosen.add(i)
        return tuple(sorted(chosen)) if len(chosen) == count else None

    def _find_whole_on_a_node(self, job: PendingJob, count: int) -> tuple[int, ...] | None:
        """k whole GPUs on one node: the node with the fewest such GPUs that holds the job
        (ties: the lowest node), its lowest-numbered ones."""
        mem = job.gpu_mem
        if job.allowed is not None:
            by_node: dict[int, list[int]] = {}
            for i in sorted(job.allowed):
                if self.usable(i, MILLI, mem):
                    by_node.setdefault(self.node_of[i], []).append(i)
            fits = [(len(ids), node) for node, ids in by_node.items() if len(ids) >= count]
            return tuple(by_node[min(fits)[1]][:count]) if fits else None
        for _, node in sorted((n, node) for node, n in self._whole_on.items() if n >= count):
            got = [i for i in self.members[node] if self.usable(i, MILLI, mem)]
            if len(got) >= count:
                return tuple(got[:count])
        return None

    def current_views(self) -> list[GpuView]:
        """The GPUs as they stand after this pass's starts so far."""
        return [replace(g, allocated_milli=MILLI - self.free_milli[i],
                        reserved_memory=g.memory_total - g.memory_external - self.free_mem[i])
                for i, g in self.views.items()]

    def take(self, indices: Iterable[int], milli: int, gpu_mem: int | None) -> None:
        for i in indices:
            self.free_milli[i] -= milli
            if gpu_mem:
                self.free_mem[i] -= gpu_mem
            self._file(i)

    def give_back(self, indices: Iterable[int], milli: int, gpu_mem: int | None) -> None:
        """The inverse of take: a job projected to end frees its share (start estimates)."""
        for i in indices:
            self.free_milli[i] += milli
            if gpu_mem:
                self.free_mem[i] += gpu_mem
            self._file(i)

    def reserve(self, job: PendingJob) -> tuple[int, ...]:
        """Keep GPUs for a blocked job: those closest to holding it. Later jobs skip them."""
        need = max(1, job.gpus_milli // MILLI)
        milli = min(job.gpus_milli, MILLI)
        if self.multi and need > 1:
            picked = self._closest_node(job, need)
            for i in picked:
                self._unfile(i)
                self.reserved_for[i] = job.id
                self._node_changed(i)
            return picked
        candidates = [i for i in (job.allowed if job.allowed is not None else self.views)
                      if i in self.views and i not in self.unusable and i not in self.reserved_for
                      and self.views[i].memory_total >= (job.gpu_mem or 0)]
        # most free share first, then most free memory: the quickest to become enough
        candidates.sort(key=lambda i: (-self.free_milli[i], -self.free_mem[i], i))
        picked = tuple(sorted(candidates[:need]))
        if len(picked) < need or (milli < MILLI and not picked):
            return ()
        for i in picked:
            self._unfile(i)
            self.reserved_for[i] = job.id
            self._node_changed(i)
        return picked

    def _closest_node(self, job: PendingJob, need: int) -> tuple[int, ...]:
        """reserve's choice on several nodes: the ``need`` GPUs of one node closest to
        holding the job (most free share, then memory, as on one machine), from the node
        whose best ``need`` have the most free share, then memory (ties: the lowest node)."""
        free, mem, views = self.free_milli, self.free_mem, self.views
        unusable, reserved, allowed = self.unusable, self.reserved_for, job.allowed
        gpu_mem = job.gpu_mem or 0
        best: tuple[int, int, int] | None = None
        best_ids: list[int] = []
        # a node's free share (of its usable, unreserved GPUs) bounds its best k's: look at
        # the most free nodes first and stop once no node left can beat the best
        bounds = sorted(((-f, node) for node, f in self._free_on.items()))
        for neg_bound, node in bounds:
            if best is not None and neg_bound > best[0]:
                break
            members = self.members[node]
            ids = [i for i in members if i not in unusable and i not in reserved
                   and views[i].memory_total >= gpu_mem and (allowed is None or i in allowed)]
            if len(ids) < need:
                continue
            if len(ids) > need:
                ids.sort(key=lambda i: (-free[i], -mem[i], i))
                del ids[need:]
            score = (-sum(free[i] for i in ids), -sum(mem[i] for i in ids), node)
            if best is None or score < best:
                best, best_ids = score, ids
        return tuple(sorted(best_ids))

    def find_ignoring_reservations(self, job: PendingJob) -> tuple[int, ...] | None:
        """Would the job fit if nothing were reserved? (for the PRIORITY reason)"""
        if not self.reserved_for:
            return None
        saved = dict(self.reserved_for)
        version, cands = self.version, dict(self._cands)
        self.reserved_for.clear()
        for i in saved:
            self._file(i)
        try:
            return self.find(job)
        finally:
            for i in saved:
                self._unfile(i)
            self.reserved_for.update(saved)
            for i in saved:
                self._node_changed(i)
            # the pool is as it was: keep the candidate sets computed before the probe (and
            # drop any computed during it, so no version number is ever reused for them)
            self.version, self._cands = version, cands


def _unusable_reason(g: GpuView, policy: Policy) -> str | None:
    if not g.healthy:
        return "unhealthy"
    if g.paused:
        return "paused"
    if g.memory_total > 0 and g.memory_external / g.memory_total > policy.mem_threshold:
        return f"{g.memory_external / g.memory_total:.0%} of its memory used by other processes"
    if g.allocated_milli == 0 and g.utilization > policy.util_threshold:
        return f"{g.utilization:.0%} busy with other processes"
    return None
