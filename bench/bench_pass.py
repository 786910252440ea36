"""One scheduling pass over a long pending queue on a large simulated machine.

    python bench/bench_pass.py [--runs 5] [--packing best-fit] [--json bench/out/pass.json]

Builds a seeded, realistic workload (1,024 GPUs, partly allocated; 100,000 pending jobs with
a mix of 0.25/0.5 shares and 1/2/4/8 whole GPUs, some with gpu_mem, ~5% limited to a set of
allowed GPUs, priorities 0-9) and times ``rota.core.schedule.schedule`` on it:

- presorted=True  (what the daemon does: its queue is kept in (priority, seq) order),
- presorted=False (the pass sorts the queue itself),

as the median and max of ``--runs`` runs, plus the peak memory the pass allocates
(tracemalloc, measured in a separate run because tracing slows the pass down). The same pass
over 10k / 30k / 100k jobs shows how the time grows with the queue (CPU time, which a busy
machine disturbs less than wall time), next to the n log n ratio.

A third workload, "backfill", is the realistic one with expected run times (EASY backfill and
start estimates, rota.core.backfill): a running job on every allocated GPU with an expected end
(10% unknown), and 70% of the pending jobs with an expected run time; it is timed with the
start estimates of the first 1,000 waiting jobs (the default) and without any. "kept room" is
backfill's hard case: every GPU busy for an hour but 8, a 16-GPU job first (it keeps the 8
free ones), then 100,000 jobs of whom only those expected to end within the hour may use them.

A second workload, "stranded", is a stress case: every GPU keeps a share free but too little
memory for any pending job, so the pass cannot stop early and has to look at every job.

``--packing`` times the pass under another packing policy (rota.core.packing; default the
daemon's default, best-fit). Only the pure scheduler is timed: building the snapshot is the
caller's work and is left out.

``--fair-share`` times the pass as the daemon runs it with ``[priority] fair_share = true``
instead: the 100,000 jobs of 50 users in 10 projects, ordered by
``rota.core.fairshare.order_queue`` (done when the usage or the queue changes, at most every
``refresh`` seconds otherwise), then the same pass over that order.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # runnable from a checkout without installing
    sys.path.insert(0, str(ROOT / "src"))

from rota.core.fairshare import Accounts, Standing, Weights, order_queue  # noqa: E402
from rota.core.kept_order import KeptOrder  # noqa: E402
from rota.core.plan import Plan  # noqa: E402
from rota.core.preempt import RunningJob  # noqa: E402
from rota.core.schedule import queue_order, schedule  # noqa: E402
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy, Snapshot  # noqa: E402

GIB = 1 << 30
N_GPUS = 1024
TARGET_MS = 100.0
SIZES = (10_000, 30_000, 100_000)
NLOGN_SLACK = 1.25  # measured growth may exceed the n log n ratio by this factor (timer noise)


# --- workloads -----------------------------------------------------------------------------
def make_gpus(rng: random.Random, count: int = N_GPUS) -> list[GpuView]:
    """A big machine, partly busy: ~35% full, ~25% partly allocated, the rest free;
    a few GPUs unhealthy, paused, or mostly taken by processes Rota did not start."""
    gpus = []
    for i in range(count):
        total = 80 * GIB if rng.random() < 0.75 else 40 * GIB
        r = rng.random()
        if r < 0.35:
            alloc, reserved = MILLI, rng.choice((0, total // 2, total - 4 * GIB))
        elif r < 0.60:
            alloc = rng.choice((250, 500, 750))
            reserved = rng.choice((0, 0, int(total * alloc / MILLI)))
        else:
            alloc, reserved = 0, 0
        external = 0
        if rng.random() < 0.03:
            external = int(total * rng.choice((0.1, 0.5, 0.9)))  # 0.9: above the threshold
        external = min(external, total - reserved)
        gpus.append(GpuView(index=i, memory_total=total, memory_external=external,
                            utilization=rng.random() * 0.5 if alloc else 0.0,
                            healthy=rng.random() > 0.01, paused=rng.random() < 0.01,
                            allocated_milli=alloc, reserved_memory=reserved))
    return gpus


_SHAPES = ((250, 0.30), (500, 0.20), (1000, 0.25), (2000, 0.12), (4000, 0.08), (8000, 0.05))
_MEMS = (8 * GIB, 16 * GIB, 24 * GIB, 40 * GIB, 70 * GIB)


def _allowed_set(rng: random.Random, need: int) -> frozenset[int]:
    """Users pin jobs to one 8-GPU node, a node pair, or a hand-picked handful of GPUs."""
    r = rng.random()
    if r < 0.5:
        node = rng.randrange(N_GPUS // 8)
        base = set(range(node * 8, node * 8 + 8))
    elif r < 0.8:
        node = rng.randrange(N_GPUS // 16)
        base = set(range(node * 16, node * 16 + 16))
    else:
        base = set(rng.sample(range(N_GPUS), rng.randint(2, 12)))
    while len(base) < need:
        base.add(rng.randrange(N_GPUS))
    return frozenset(base)


def make_pending(rng: random.Random, n: int) -> list[PendingJob]:
    """n jobs in submission order (seq = id); priorities 0-9 at random."""
    milli_choices = [m for m, _ in _SHAPES]
    weights = [w for _, w in _SHAPES]
    shapes = rng.choices(milli_choices, weights, k=n)
    jobs = []
    for k in range(n):
        milli = shapes[k]
        gpu_mem = rng.choice(_MEMS) if rng.random() < 0.20 else None
        allowed = _allowed_set(rng, milli // MILLI) if rng.random() < 0.05 else None
        jobs.append(PendingJob(id=k + 1, priority=rng.randrange(10), seq=k + 1,
                               gpus_milli=milli, gpu_mem=gpu_mem, allowed=allowed))
    return jobs


def make_stranded(rng: random.Random, n: int) -> tuple[list[GpuView], list[PendingJob]]:
    """Every GPU has 0.25-0.5 free but < 8 GiB free memory; every pending job wants more
    memory than that. Nothing fits and the free-share cut-off never fires."""
    gpus = []
    for i in range(N_GPUS):
        total = 80 * GIB
        alloc = rng.choice((500, 750))
        gpus.append(GpuView(index=i, memory_total=total, allocated_milli=alloc,
                            reserved_memory=total - rng.randint(1, 7) * GIB))
    jobs = make_pending(rng, n)
    jobs = [PendingJob(j.id, j.priority, j.seq, j.gpus_milli, j.gpu_mem or rng.choice(_MEMS),
                       j.allowed) for j in jobs]
    return gpus, jobs


POLICY = Policy()  # main() sets it from --packing


def make_running(rng: random.Random, gpus: list[GpuView], now: float) -> list[RunningJob]:
    """A running job on every allocated GPU, holding its allocation, with an expected end
    10 minutes to 10 hours away (10% unknown)."""
    return [RunningJob(id=10_000_000 + g.index, priority=0, gpu_indices=(g.index,),
                       milli=g.allocated_milli, gpu_mem=g.reserved_memory or None,
                       expected_end=None if rng.random() < 0.1
                       else now + rng.uniform(600, 36_000))
            for g in gpus if g.allocated_milli]


def with_expected(rng: random.Random, jobs: list[PendingJob]) -> list[PendingJob]:
    """70% of the jobs with an expected run time of 1 minute to 24 hours."""
    return [j._replace(expected=rng.uniform(60, 86_400)) if rng.random() < 0.7 else j
            for j in jobs]


def make_kept_room(rng: random.Random, n: int, now: float
                   ) -> tuple[list[GpuView], list[PendingJob], list[RunningJob]]:
    gpus = [GpuView(index=i, memory_total=80 * GIB, allocated_milli=0 if i < 8 else MILLI)
            for i in range(N_GPUS)]
    running = [RunningJob(id=10_000_000 + i, priority=0, gpu_indices=(i,), milli=MILLI,
                          gpu_mem=None, expected_end=now + 3600) for i in range(8, N_GPUS)]
    jobs = [PendingJob(1, 0, 1, 16 * MILLI)] + [
        PendingJob(k, 1, k, rng.choice((500, 1000, 2000)), expected=rng.uniform(60, 86_400))
        for k in range(2, n + 1)]
    return gpus, jobs, running


def measure_backfill(gpus: list[GpuView], jobs: list[PendingJob], runs: int,
                     estimate_jobs: int, running: list[RunningJob] | None = None
                     ) -> dict[str, Any]:
    now = 1_000_000.0
    if running is None:
        running = make_running(random.Random(3), gpus, now)
    snap = Snapshot(gpus=gpus, pending=sorted(jobs, key=queue_order), presorted=True,
                    running=running)
    policy = Policy(estimate_jobs=estimate_jobs)
    times, cpu = [], []
    plan = Plan()
    for _ in range(runs):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        plan = schedule(snap, policy, now)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return {"jobs": len(jobs), "estimate_jobs": estimate_jobs,
            "median_ms": statistics.median(times), "max_ms": max(times),
            "cpu_median_ms": statistics.median(cpu), "estimates": len(plan.start_estimates),
            **plan_summary(plan)}


# --- measuring -----------------------------------------------------------------------------
def _snapshot(gpus: list[GpuView], jobs: list[PendingJob], presorted: bool) -> Snapshot:
    pending = sorted(jobs, key=queue_order) if presorted else list(jobs)
    return Snapshot(gpus=gpus, pending=pending, presorted=presorted)


def time_pass(snap: Snapshot, runs: int) -> tuple[list[float], list[float], Plan]:
    """Wall-clock and CPU (process_time) milliseconds of each run; the last run's plan."""
    times, cpu = [], []
    plan = Plan()
    policy = POLICY
    for _ in range(runs):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        plan = schedule(snap, policy, 1_000_000.0)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return times, cpu, plan


def peak_memory_mb(snap: Snapshot) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        plan = schedule(snap, POLICY, 1_000_000.0)
        _, peak = tracemalloc.get_traced_memory()
        del plan
    finally:
        tracemalloc.stop()
    return (peak - base) / 1e6


def plan_summary(plan: Plan) -> dict[str, Any]:
    return {"starts": len(plan.starts), "reasons_eager": len(plan.reasons),
            "tail": len(plan.tail), "reservations": len(plan.reservations)}


def measure(gpus: list[GpuView], jobs: list[PendingJob], presorted: bool, runs: int,
            memory: bool = True) -> dict[str, Any]:
    snap = _snapshot(gpus, jobs, presorted)
    times, cpu, plan = time_pass(snap, runs)
    out: dict[str, Any] = {"jobs": len(jobs), "presorted": presorted,
                           "median_ms": statistics.median(times), "max_ms": max(times),
                           "cpu_median_ms": statistics.median(cpu),
                           "runs_ms": [round(t, 3) for t in times], **plan_summary(plan)}
    if memory:
        out["peak_mb"] = peak_memory_mb(snap)
    return out


def time_reasons(gpus: list[GpuView], jobs: list[PendingJob], sample: int = 2000) -> float:
    """The pass leaves the reasons of the jobs behind its cut-off to be worked out on demand
    (Plan.reason: the API's job views, `rota why`); microseconds of CPU per job asked."""
    plan = schedule(_snapshot(gpus, jobs, True), POLICY, 1_000_000.0)
    tail = list(plan.tail[:: max(1, len(plan.tail) // sample)])[:sample]
    gc.collect()
    c0 = time.process_time()
    for job in tail:
        plan.reason_text(job.id)
    return (time.process_time() - c0) * 1e6 / max(1, len(tail))


def _line(label: str, r: dict[str, Any]) -> str:
    return (f"{label:9} n={r['jobs']:>7,} presorted={r['presorted']!s:5}: "
            f"median {r['median_ms']:7.2f} ms  max {r['max_ms']:7.2f} ms  "
            f"cpu {r['cpu_median_ms']:7.2f} ms  peak {r['peak_mb']:5.1f} MB  "
            f"(starts {r['starts']}, eager reasons {r['reasons_eager']}, lazy tail {r['tail']})")


def growth(rows: dict[int, float]) -> list[dict[str, Any]]:
    out = []
    sizes = sorted(rows)
    for a, b in pairwise(sizes):
        measured = rows[b] / rows[a] if rows[a] > 0 else math.inf
        bound = (b * math.log(b)) / (a * math.log(a))
        out.append({"from": a, "to": b, "time_ratio": measured, "nlogn_ratio": bound,
                    "ok": measured <= bound * NLOGN_SLACK})
    return out


# --- main ----------------------------------------------------------------------------------
def run(runs: int, seed: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    gpus = make_gpus(random.Random(seed))
    usable = sum(1 for g in gpus if g.healthy and not g.paused)
    log(f"machine: {N_GPUS} GPUs ({usable} healthy and not paused), "
        f"{sum(g.allocated_milli for g in gpus) / MILLI:.0f} GPUs' worth allocated")
    result: dict[str, Any] = {"gpus": N_GPUS, "runs": runs, "seed": seed,
                              "target_ms": TARGET_MS, "realistic": {}, "stranded": {}}
    by_size: dict[bool, dict[int, float]] = {True: {}, False: {}}
    for n in SIZES:
        jobs = make_pending(random.Random(seed + n), n)
        for presorted in (True, False):
            r = measure(gpus, jobs, presorted, runs)
            result["realistic"][f"{n}_{'presorted' if presorted else 'unsorted'}"] = r
            by_size[presorted][n] = r["cpu_median_ms"]
            log(_line("realistic", r))
    big = make_pending(random.Random(seed + SIZES[-1]), SIZES[-1])
    result["reason_on_demand_us"] = time_reasons(gpus, big)
    log(f"after the 100k pass, working out one lazy tail job's reason (rota why, job lists): "
        f"{result['reason_on_demand_us']:.1f} us per job, i.e. "
        f"{result['reason_on_demand_us'] * SIZES[-1] / 1000:.0f} ms for all of them")
    bjobs = with_expected(random.Random(seed + 2), big)
    result["backfill"] = {}
    for limit in (1000, 0):
        r = measure_backfill(gpus, bjobs, runs, limit)
        result["backfill"][f"estimates_{limit}"] = r
        log(f"backfill  n={r['jobs']:>7,} presorted=True  estimates for {limit:>5}: median "
            f"{r['median_ms']:7.2f} ms  max {r['max_ms']:7.2f} ms  cpu "
            f"{r['cpu_median_ms']:7.2f} ms  (starts {r['starts']}, estimates "
            f"{r['estimates']}, eager reasons {r['reasons_eager']}, lazy tail {r['tail']})")
    kgpus, kjobs, krun = make_kept_room(random.Random(seed + 3), SIZES[-1], 1_000_000.0)
    r = measure_backfill(kgpus, kjobs, runs, 1000, krun)
    result["backfill"]["kept_room"] = r
    log(f"kept room n={r['jobs']:>7,} presorted=True  estimates for  1000: median "
        f"{r['median_ms']:7.2f} ms  max {r['max_ms']:7.2f} ms  cpu {r['cpu_median_ms']:7.2f} "
        f"ms  (starts {r['starts']}, estimates {r['estimates']}, lazy tail {r['tail']})")
    sgpus, sjobs = make_stranded(random.Random(seed + 1), SIZES[-1])
    for presorted in (True, False):
        r = measure(sgpus, sjobs, presorted, runs)
        result["stranded"]["100000_" + ("presorted" if presorted else "unsorted")] = r
        log(_line("stranded", r))
    result["growth"] = {"presorted": growth(by_size[True]), "unsorted": growth(by_size[False])}
    for key, rows in result["growth"].items():
        for g in rows:
            log(f"growth {key:9} {g['from']:>7,} -> {g['to']:>7,}: CPU time x{g['time_ratio']:.2f}"
                f"  (n log n x{g['nlogn_ratio']:.2f}) {'ok' if g['ok'] else 'WORSE'}")
    head = result["realistic"][f"{SIZES[-1]}_presorted"]
    result["pass_100k_presorted_ms"] = head["median_ms"]
    result["pass_100k_presorted_max_ms"] = head["max_ms"]
    result["pass_100k_unsorted_ms"] = result["realistic"][f"{SIZES[-1]}_unsorted"]["median_ms"]
    result["growth_ok"] = all(g["ok"] for rows in result["growth"].values() for g in rows)
    result["pass_ok"] = head["median_ms"] <= TARGET_MS
    log(f"target: <= {TARGET_MS:.0f} ms at 100k (presorted, median of {runs}): "
        f"{'PASS' if result['pass_ok'] else 'MISS'}; growth no worse than n log n: "
        f"{'PASS' if result['growth_ok'] else 'MISS'}")
    return result


def with_owners(rng: random.Random, jobs: list[PendingJob], users: int = 50,
                projects: int = 10) -> tuple[list[PendingJob], Standing]:
    """The jobs given owners, projects and submission times (a day's worth), and a standing
    of random usage and shares for those owners."""
    owned = [j._replace(user=f"u{rng.randrange(users)}",
                        project=f"p{rng.randrange(projects)}" if rng.random() < 0.7 else None,
                        submitted=1_000_000.0 - rng.random() * 86_400.0) for j in jobs]
    used = {f"u{k}": rng.random() * 1e6 for k in range(users)}
    shares = {f"u{k}": float(rng.choice((1, 1, 2, 4))) for k in range(users)}
    proj = {f"p{k}": rng.random() * 1e6 for k in range(projects)}
    return owned, Standing.of(Accounts(used, proj), shares, {})


def run_fair(runs: int, seed: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """order_queue (the definition, what the simulator runs) and the daemon's KeptOrder
    (the same order from the queue's changes) over the same jobs, then the pass."""
    gpus = make_gpus(random.Random(seed))
    jobs, standing = with_owners(random.Random(seed),
                                 make_pending(random.Random(seed + SIZES[-1]), SIZES[-1]))
    weights, now = Weights(size=10.0), 1_000_000.0
    order_ms, kept_ms, pass_ms = [], [], []
    ordered: list[PendingJob] = []
    kept = KeptOrder(jobs)
    rng = random.Random(seed)
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        ordered = order_queue(jobs, standing, weights, now, largest_milli=N_GPUS * MILLI)
        order_ms.append((time.perf_counter() - t0) * 1000)
        gc.collect()
        # what a daemon's re-order does after a pass: ten jobs started, ten submitted
        t0 = time.perf_counter()
        for job in rng.sample(jobs, 10):
            kept.remove(job.id)
            kept.add(job)
        again = kept.order(standing, weights, now, largest_milli=N_GPUS * MILLI)
        kept_ms.append((time.perf_counter() - t0) * 1000)
        assert again == ordered
    snap = Snapshot(gpus=gpus, pending=ordered, presorted=True)
    times, _, plan = time_pass(snap, runs)
    pass_ms.extend(times)
    result = {"jobs": len(jobs), "runs": runs, "seed": seed,
              "order_median_ms": statistics.median(order_ms), "order_max_ms": max(order_ms),
              "kept_median_ms": statistics.median(kept_ms), "kept_max_ms": max(kept_ms),
              "pass_median_ms": statistics.median(pass_ms), "pass_max_ms": max(pass_ms),
              **plan_summary(plan)}
    log(f"fair share, {len(jobs):,} pending: order_queue median "
        f"{result['order_median_ms']:.1f} ms (max {result['order_max_ms']:.1f}); the "
        f"daemon's KeptOrder (10 out, 10 in, order) median {result['kept_median_ms']:.1f} "
        f"ms (max {result['kept_max_ms']:.1f}); the pass over that order median "
        f"{result['pass_median_ms']:.1f} ms (max {result['pass_max_ms']:.1f}); "
        f"{result['starts']} starts; order + pass "
        f"{result['kept_median_ms'] + result['pass_median_ms']:.1f} ms (budget 100)")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--packing", default="best-fit", help="rota.core.packing policy")
    parser.add_argument("--fair-share", action="store_true",
                        help="time the fair-share order and the pass over it instead")
    args = parser.parse_args(argv)
    global POLICY
    POLICY = Policy(packing=args.packing)
    result = (run_fair if args.fair_share else run)(args.runs, args.seed)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
