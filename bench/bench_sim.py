"""The simulator's own speed: 100,000 jobs on 1,024 GPUs (128 nodes x 8) in under 60 s.

    python bench/bench_sim.py [--jobs 100000] [--nodes 128] [--policy backfill]
                              [--load 0.9] [--seed 1] [--json bench/out/sim.json]
    python bench/bench_sim.py --trace TRACE_FILE  (e.g. openb_pod_list_default.csv)
    python bench/bench_sim.py --expected oracle  (every end known: backfill onto kept GPUs
                                                  and start estimates at their dearest)

The synthetic trace (rota.sim.synthetic) is made with a seeded rng, shaped like Alibaba's openb pods
(shares of one GPU as often as openb has them, 2/4/8 whole GPUs now and then, run times
log-normal around openb's median of ~10 minutes), arriving as a Poisson stream whose rate
offers ``--load`` of the cluster's GPU-seconds. Prints jobs/s, passes and the run's metrics;
exits 1 when the run takes longer than the target. ``--trace`` replays a trace file instead.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # runnable from a checkout without installing
    sys.path.insert(0, str(ROOT / "src"))

from rota.sim import parse_cluster, simulate  # noqa: E402
from rota.sim.metrics import measure  # noqa: E402
from rota.sim.policies import policy_named  # noqa: E402
from rota.sim.synthetic import synthetic  # noqa: E402
from rota.sim.traces import load  # noqa: E402

TARGET_S = 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--gpus", default="8x80G", help="GPUs per node")
    ap.add_argument("--policy", default="backfill")
    ap.add_argument("--load", type=float, default=0.9, help="offered share of GPU-seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trace", type=Path, help="replay this trace file instead")
    ap.add_argument("--expected", default="history",
                    help="expected run times: history | limit | oracle | none")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cluster = parse_cluster(args.gpus, args.nodes)
    trace = load(args.trace) if args.trace else \
        synthetic(args.jobs, cluster.gpus, args.load, random.Random(args.seed))
    t0 = time.perf_counter()
    result = simulate(trace, cluster, policy_named(args.policy), expected=args.expected)
    took = time.perf_counter() - t0
    m = measure(result)
    out = {"jobs": len(trace), "gpus": cluster.gpus, "policy": args.policy,
           "expected": args.expected,
           "seconds": round(took, 2), "jobs_per_s": round(len(trace) / took),
           "passes": result.passes, "target_s": TARGET_S, "metrics": m.as_dict()}
    print(f"{len(trace):,} jobs on {cluster.describe()}, policy {args.policy}: "
          f"{took:.1f} s, {len(trace) / took:,.0f} jobs/s, {result.passes:,} passes")
    print(f"  JCT mean {m.jct.mean:,.0f} s, p50 {m.jct.p50:,.0f} s, p99 {m.jct.p99:,.0f} s; "
          f"queueing mean {m.queueing.mean:,.0f} s; makespan {m.makespan:,.0f} s; "
          f"utilisation {m.utilisation:.1%} (bound {m.utilisation_bound:.1%})")
    e = m.estimate_error
    print(f"  expected run times: {args.expected}; start-estimate error " + (
        "n/a (no estimates)" if e is None else
        f"mean {e.mean:,.0f} s, p50 {e.p50:,.0f} s, p90 {e.p90:,.0f} s over "
        f"{m.estimated:,} jobs"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    if args.trace is None and len(trace) >= 100_000 and took > TARGET_S:
        print(f"FAIL: over the {TARGET_S:.0f} s target")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
