"""Packing policies: which GPU a fractional job goes on, and GPU fragmentation.

A share of a GPU (``gpus_milli < 1000``) can go on any GPU with that much free; which one
decides how much of the machine later jobs can still use. The policies:

- ``best-fit`` (the default, and what Rota always did): the GPU with the least free share
  that still holds the job, lowest index among equals;
- ``first-fit``: the lowest-indexed GPU that holds it;
- ``random``: a GPU drawn from those that hold it, with a seeded generator passed in;
- ``fgd``: fragmentation gradient descent (Weng et al., USENIX ATC'23): the GPU whose use
  grows the fragmentation of the GPUs least, where the fragmentation of a set of GPUs is the
  GPU capacity a job drawn from the workload could not use (`fragmentation`).

Pure: no clock, no I/O, randomness only from the ``random.Random`` handed in.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from rota.core.snapshot import MILLI

PACKINGS = ("best-fit", "first-fit", "random", "fgd")
#: shapes kept in a workload: the rarest beyond these change the figure little and cost time
MAX_SHAPES = 32


class Shape(NamedTuple):
    """One kind of task in a workload, and its share of the tasks (``weight``, sums to 1)."""

    gpus_milli: int  # < 1000: a share of one GPU; k * 1000: k whole GPUs
    weight: float
    cpu: int = 0  # what a node must also have free for it (0: not counted)
    memory: int = 0
    models: frozenset[str] | None = None  # GPU types it runs on (rota.core.nodes); None: any


Workload = tuple[Shape, ...]

#: used when nothing tells what jobs look like: the shapes of the default Alibaba openb trace
#: (GPU tasks only, rounded to 1/20 of the tasks), whole GPUs most common, then large shares
DEFAULT_WORKLOAD: Workload = (
    Shape(1000, 0.55), Shape(810, 0.15), Shape(470, 0.10), Shape(320, 0.05),
    Shape(650, 0.05), Shape(230, 0.05), Shape(8000, 0.025), Shape(2000, 0.0125),
    Shape(4000, 0.0125),
)


def check_packing(name: str) -> str:
    if name not in PACKINGS:
        raise ValueError(f"packing {name!r} is not one of {', '.join(PACKINGS)}")
    return name


def workload_of(shapes: Iterable[tuple[Any, ...]]) -> Workload:
    """The workload of some tasks, given as (gpus_milli, cpu, memory[, models, ...]; what
    follows models is not part of a shape): each distinct shape with its share of the GPU
    tasks. Tasks without GPUs are left out: they leave
    every GPU usable. Only the MAX_SHAPES commonest shapes are kept (then renormalised)."""
    counts = Counter(s[:4] for s in shapes if s[0] > 0)
    top = counts.most_common(MAX_SHAPES)
    total = sum(n for _, n in top)
    return tuple(Shape(key[0], n / total, *key[1:]) for key, n in top)


def fragmentation(free: Mapping[int, int], workload: Workload,
                  cpu_free: int | None = None, memory_free: int | None = None) -> float:
    """Expected GPU capacity (thousandths) that a task drawn from `workload` cannot use.

    `free` counts the GPUs by their free thousandths (``{1000: 3, 190: 1}``: three idle GPUs
    and one with 0.19 free). For each shape: if the task cannot go there at all (too few
    whole GPUs, no GPU with the share free, or the node lacks the CPUs or memory when those
    are given), all free capacity is lost to it; else the GPUs with less free than
    ``min(gpus_milli, 1000)`` are. The paper's F_n(M) = sum over m of p_m F_n(m).
    """
    total = sum(f * n for f, n in free.items())
    if total == 0:
        return 0.0
    whole = free.get(MILLI, 0)
    frag = 0.0
    for shape in workload:
        need = shape.gpus_milli
        if (cpu_free is not None and shape.cpu > cpu_free) or \
                (memory_free is not None and shape.memory > memory_free):
            lost = total
        elif need >= MILLI:
            lost = total if whole < need // MILLI else total - whole * MILLI
        else:
            small = sum(f * n for f, n in free.items() if f < need)
            lost = total if small == total else small
        frag += shape.weight * lost
    return frag


def fgd_pick(free_by_gpu: Mapping[int, int], candidates: Iterable[int], milli: int,
             workload: Workload) -> int | None:
    """The candidate GPU whose taking `milli` grows the fragmentation least (ties: least
    free, then lowest index, as best-fit). `free_by_gpu` holds every usable GPU's free
    share, candidates among them."""
    counts = Counter(free_by_gpu.values())
    before = fragmentation(counts, workload)
    growth: dict[int, float] = {}  # by free share: GPUs with the same share score the same
    best: tuple[float, int, int] | None = None
    for i in candidates:
        f = free_by_gpu[i]
        g = growth.get(f)
        if g is None:
            counts[f] -= 1
            counts[f - milli] += 1
            g = growth[f] = fragmentation(counts, workload) - before
            counts[f - milli] -= 1
            counts[f] += 1
        key = (g, f, i)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]


class FragCache:
    """The fragmentation of a changing set of GPUs, kept up to date as GPUs change share.

    `fragmentation` walks every distinct free share for every shape; a pass that places
    thousands of shares on a large machine would redo that for each one. This keeps, per
    shape, the two sums the figure is made of (the free capacity of GPUs too small for the
    shape, and how many GPUs hold it), so adding or removing a GPU costs one step per shape
    and the growth of moving one GPU from one share to another is worked out without
    touching the other GPUs. Equal to `fragmentation(counts, workload)` at all times
    (tests/core/test_packing.py checks it against the full computation).
    """

    def __init__(self, workload: Workload) -> None:
        self.shapes = tuple(s for s in workload if s.gpus_milli > 0)
        self.counts: Counter[int] = Counter()  # GPUs by free share (> 0)
        self.total = 0  # free capacity, thousandths
        self.whole = 0  # idle GPUs
        self._need = [min(s.gpus_milli, MILLI) for s in self.shapes]
        self._small = [0] * len(self.shapes)  # free capacity on GPUs below the shape's need
        self._fit = [0] * len(self.shapes)  # GPUs holding the shape's need

    def add(self, free: int, n: int = 1) -> None:
        """`n` GPUs with `free` thousandths join the set (n < 0: leave it)."""
        if free <= 0 or n == 0:
            return
        self.counts[free] += n
        if not self.counts[free]:
            del self.counts[free]
        self.total += free * n
        if free == MILLI:
            self.whole += n
        for k, need in enumerate(self._need):
            if free < need:
                self._small[k] += free * n
            else:
                self._fit[k] += n

    def value(self) -> float:
        total, frag = self.total, 0.0
        if total == 0:
            return 0.0
        for k, shape in enumerate(self.shapes):
            if shape.gpus_milli >= MILLI:
                lost = total if self.whole < shape.gpus_milli // MILLI \
                    else total - self.whole * MILLI
            else:
                lost = total if self._fit[k] == 0 else self._small[k]
            frag += shape.weight * lost
        return frag

    def growth(self, free: int, milli: int) -> float:
        """How much the fragmentation grows if one GPU with `free` gives `milli` away."""
        before = self.value()
        self.add(free, -1)
        self.add(free - milli)
        after = self.value()
        self.add(free - milli, -1)
        self.add(free)
        return after - before


def random_pick(candidates: Iterable[int], rng: random.Random) -> int | None:
    pool = sorted(candidates)  # sorted: the draw depends on the seed only, not set order
    return rng.choice(pool) if pool else None
