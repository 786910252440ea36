"""Packing fractional GPUs on Alibaba openb, as Weng et al. (USENIX ATC'23) do.

    python bench/bench_packing.py [--traces DIR] [--seeds 10] [--policies ...]
                                  [--variants default,multi-gpu-50,...] [--json FILE]

The cluster is openb_node_list_gpu_node.csv (1,213 nodes, 6,212 GPUs, with their CPUs and
memory). The workload is built as the paper's simulator builds it
(hkust-adsl/kubernetes-scheduler-simulator: shuffled pods, then "workload tuning" to 1.3):
the trace's own tasks (openb_pod_list_default.csv, asking 98 % of the GPUs) in an order
shuffled by the seed, then tasks resampled from it appended up to 130 % of the GPUs
(rota.sim.fill.arrivals). They arrive one after another, none ever leaving; a task no
node can take is skipped and the run goes on. The figure is the share of the cluster's GPU
capacity allocated while the GPUs asked for (placed or not) round to 100 % of the
cluster's, as the paper's analysis reads it (rota.sim.fill.allocation_at), averaged
over the seeds. Tasks are placed by the daemon's own placement, one rota.core.pool.GpuPool
over the whole cluster with the nodes' GPU types, CPUs and memory (rota.core.nodes): the
node by the Policy's packing, then the GPUs there by the same per-GPU rules as the
daemon's pass; a task needs its cpu_milli and memory_mib free on the node. Nodes that
score alike are ranked by a permutation drawn per seed after the workload, as the paper's
simulator names its nodes (rota.core.nodes.tie_order; --first-wins-ties: the first of the
node list, as before). FGD's workload is the paper's "typical pods" of the trace (or the
variant's).

Variants (the paper's families of openb traces). Where --traces holds the paper's own file
(its artifact's data/csv/openb_pod_list_gpuspec33.csv and so on, see PAPER_TRACE) it is
used; else the variant is resampled from the default trace (one trace as long as the
default, drawn with a fixed seed), which only approximates the paper's. Either is built
into a workload per seed as above:
  multi-gpu-P  P % of the GPU tasks ask for more than one GPU (drawn from those that do)
  sharing-P    P % of the GPU tasks ask for a share of one GPU (< 1 GPU)
  gpuspec-P    P % of the GPU tasks may only run on one GPU type (drawn by GPU count)
  non-gpu-P    P % of all tasks ask for no GPU
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from rota.core.nodes import Demand, tie_order
from rota.core.packing import PACKINGS, Shape, Workload, workload_of
from rota.core.snapshot import MILLI, Policy
from rota.sim.fill import Node, allocation_at, arrivals, cluster_pool

# ../shared/traces beside the checkout (a worktree one level deeper looks one more up)
_REPO = Path(__file__).resolve().parents[1]
TRACES = next((p / "shared/traces/alibaba-gpu-v2023" for p in (_REPO.parent, _REPO.parents[1])
               if (p / "shared/traces/alibaba-gpu-v2023").is_dir()),
              _REPO.parent / "shared/traces/alibaba-gpu-v2023")
# the paper's figures at 100 % arrival, means of its 10 seeds (its artifact's
# experiments/analysis/expected_results/analysis_allo_discrete.csv, tune 1.3); non-gpu-25
# is its openb_pod_list_cpu250, gpuspec-33 its gpuspec33, and so on
PAPER = {"default": {"random": 86.30, "best-fit": 92.86, "fgd": 95.23},
         "multi-gpu-50": {"random": 81.28, "best-fit": 95.62, "fgd": 97.09},
         "sharing-100": {"random": 78.90, "best-fit": 84.62, "fgd": 86.64},
         "gpuspec-33": {"random": 83.87, "best-fit": 80.39, "fgd": 87.84},
         "non-gpu-25": {"random": 80.00, "best-fit": 91.21, "fgd": 93.20}}


#: the paper's own trace file of each variant (openb_pod_list_<name>.csv in its artifact)
PAPER_TRACE = {"default": "default", "multi-gpu-50": "multigpu50",
               "sharing-100": "gpushare100", "gpuspec-33": "gpuspec33",
               "non-gpu-25": "cpu250"}


def load(traces: Path) -> tuple[list[Node], list[Demand]]:
    with open(traces / "openb_node_list_gpu_node.csv") as f:
        nodes = [Node(r["sn"], r["model"], int(r["gpu"]), int(r["cpu_milli"]),
                      int(r["memory_mib"])) for r in csv.DictReader(f)]
    return nodes, load_pods(traces / "openb_pod_list_default.csv")


def load_pods(path: Path) -> list[Demand]:
    with open(path) as f:
        return [_demand(r) for r in csv.DictReader(f)]


def paper_trace(traces: Path, variant: str) -> list[Demand] | None:
    """The paper's own file for `variant` when it lies in `traces`, else None."""
    name = PAPER_TRACE.get(variant)
    path = traces / f"openb_pod_list_{name}.csv"
    return load_pods(path) if name and path.is_file() else None


def _demand(r: dict[str, str]) -> Demand:
    n, milli = int(r["num_gpu"]), int(r["gpu_milli"])
    gpus = 0 if n == 0 else (milli if n == 1 and milli < MILLI else n * MILLI)
    spec = r.get("gpu_spec") or ""
    models = frozenset(spec.split("|")) if spec else None
    return Demand(gpus, int(r["cpu_milli"]), int(r["memory_mib"]), models)


class Sampler:
    """Draws tasks for one variant: a category with its target share, else the rest."""

    def __init__(self, tasks: list[Demand], nodes: list[Node], variant: str) -> None:
        self.tasks, self.variant = tasks, variant
        self.models = [n.model for n in nodes]
        self.weights = [n.gpus for n in nodes]
        self.share = 0.0
        self.inside: list[Demand] = []
        self.outside: list[Demand] = tasks
        if variant != "default":
            family, _, pct = variant.rpartition("-")
            self.share = int(pct) / 100
            test = {"multi-gpu": lambda d: d.gpus_milli > MILLI,
                    "sharing": lambda d: 0 < d.gpus_milli < MILLI,
                    "non-gpu": lambda d: d.gpus_milli == 0,
                    "gpuspec": lambda d: False}.get(family)
            if test is None:
                raise SystemExit(f"unknown variant {variant!r}")
            self.family = family
            gpu_tasks = tasks if family == "non-gpu" else [d for d in tasks if d.gpus_milli]
            self.inside = [d for d in gpu_tasks if test(d)]
            self.outside = [d for d in gpu_tasks if not test(d)]
            self.cpu_only = [d for d in tasks if not d.gpus_milli]
            self.gpu_share = len(gpu_tasks) / len(tasks)

    def trace(self) -> list[Demand]:
        """The variant's trace: the default's own tasks, else as many drawn (fixed seed)."""
        if self.variant == "default":
            return list(self.tasks)
        rng = random.Random(-2)
        return [self.draw(rng) for _ in self.tasks]

    def draw(self, rng: random.Random) -> Demand:
        if self.variant == "default":
            return rng.choice(self.tasks)
        if self.family != "non-gpu" and rng.random() >= self.gpu_share:
            return rng.choice(self.cpu_only)  # the trace's share of CPU-only tasks stays
        if self.family == "gpuspec":
            d = rng.choice(self.outside)
            if rng.random() < self.share:
                model = rng.choices(self.models, weights=self.weights)[0]
                d = d._replace(models=frozenset({model}))
            return d
        return rng.choice(self.inside if rng.random() < self.share else self.outside)


def run_once(nodes: list[Node], trace: list[Demand], workload: Workload, packing: str,
             seed: int, integer_scores: bool = True, random_ties: bool = True) -> float:
    """Share of GPU capacity allocated when the arrived requests reach the capacity.
    `random_ties`: nodes scoring alike are ranked by a permutation drawn after the workload,
    as the paper's simulator names its nodes (rota.core.nodes.tie_order); else the first
    of the node list wins."""
    policy = Policy(packing=packing, packing_seed=seed)
    # the same tasks in the same order, and the same tie order, for every policy
    rng = random.Random(seed)
    tasks = arrivals(trace, sum(n.gpus for n in nodes) * MILLI, rng)
    order = tie_order(len(nodes), rng) if random_ties else None
    pool = cluster_pool(nodes, policy, workload, random.Random(seed), integer_scores, order)
    return allocation_at(pool, tasks)


def workload_for(sampler: Sampler, n: int = 20_000) -> Workload:
    """Rota's own: the 32 commonest GPU task shapes (GPU, CPU, memory, GPU types)."""
    rng = random.Random(-1)
    return workload_of(sampler.draw(rng) for _ in range(n))


def typical_workload(trace: list[Demand], popular: float = 0.95,
                     step: int = 1) -> Workload:
    """The paper's "typical pods" of the trace: task shapes keyed by (GPU, CPU, GPU types),
    memory left out and tasks asking no GPU kept; the commonest taken `step` at a time
    (the artifact's run script passes 1) until they cover `popular` of the tasks, then
    renormalised."""
    counts = Counter((d.gpus_milli, d.cpu, d.models) for d in trace)
    ranked = counts.most_common()
    n = len(trace)
    kept = 0
    while kept < len(ranked) and sum(c for _, c in ranked[:kept]) < popular * n:
        kept += step
    top = ranked[:kept]
    total = sum(c for _, c in top)
    return tuple(Shape(g, c / total, cpu, 0, models) for (g, cpu, models), c in top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--policies", default="random,first-fit,best-fit,fgd")
    ap.add_argument("--variants", default="default")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--workload", choices=("typical", "top32"), default="typical",
                    help="FGD's workload: the paper's typical pods, or Rota's 32 commonest")
    ap.add_argument("--typical-step", type=int, default=1,
                    help="typical pods taken this many at a time (the artifact passes 1)")
    ap.add_argument("--exact-scores", action="store_true",
                    help="compare exact node scores, not the paper's whole points")
    ap.add_argument("--first-wins-ties", action="store_true",
                    help="nodes scoring alike: the first of the node list wins (Rota before"
                         " issue 22's non-gpu-25 fix), not a seeded random node order")
    a = ap.parse_args(argv)
    policies = a.policies.split(",")
    if a.typical_step < 1:
        raise SystemExit(f"--typical-step must be >= 1, got {a.typical_step}")
    for p in policies:
        if p not in PACKINGS:
            raise SystemExit(f"unknown policy {p!r}: one of {', '.join(PACKINGS)}")
    nodes, tasks = load(a.traces)
    capacity = sum(n.gpus for n in nodes) * MILLI
    print(f"openb: {len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs, {len(tasks)} tasks;"
          f" {a.seeds} seeds; GPU allocation at 100 % arrival (mean, min-max)")
    results: dict[str, dict[str, list[float]]] = {}
    for variant in a.variants.split(","):
        sampler = Sampler(tasks, nodes, variant)
        own = paper_trace(a.traces, variant)
        trace = own if own is not None else sampler.trace()
        workload = typical_workload(trace, step=a.typical_step) if a.workload == "typical" \
            else workload_for(sampler)
        results[variant] = {}
        print(f"\n{variant}: " + ("the paper's trace" if own is not None else
                                   "resampled from the default trace")
              + f", {len(trace)} tasks asking"
              f" {100 * sum(d.gpus_milli for d in trace) / capacity:.0f} % of the GPUs")
        for p in policies:
            t0 = time.perf_counter()
            shares = [run_once(nodes, trace, workload, p, s, not a.exact_scores,
                               not a.first_wins_ties) for s in range(a.seeds)]
            took = (time.perf_counter() - t0) / a.seeds
            results[variant][p] = shares
            paper = PAPER.get(variant, {}).get(p)
            print(f"  {p:9s} {100 * statistics.mean(shares):5.1f} %"
                  f"  ({100 * min(shares):.1f}-{100 * max(shares):.1f})"
                  f"  {took:5.1f} s/run"
                  + (f"   paper {paper:.1f} %" if paper else ""), flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
