"""Throughput side by side: Rota and task-spooler in alternating rounds.

    python bench/rounds.py [--rounds 5] [--jobs 2000] [--json bench/out/rounds.json]

One round runs, one after the other on the same machine: Rota's end-to-end throughput
(``bench_e2e.py --parts a``: 2,000 ``true`` jobs at 0.25 GPU on 8 simulated GPUs,
submitted 100 per request, each with its own log file), task-spooler with ``-n`` (32
slots, output discarded) and task-spooler keeping each job's output in a file, as Rota
does. Alternating rounds spread the machine's slow and fast spells over every system
(on a shared 2-core VM one system's run can be half as fast as the next one's); the
report gives each system's median and the ratio of medians, and every round's figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("rota", "tsp", "tsp_keep_output")


def _run_json(argv: list[str], timeout: float) -> dict[str, Any]:
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout)[-800:]}")
    return (proc.stdout and json.loads(proc.stdout[proc.stdout.index("{"):])) or {}


def rota(jobs: int, timeout: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "e2e.json"
        proc = subprocess.run([sys.executable, "bench/bench_e2e.py", "--parts", "a",
                               "--batch-only", "--jobs", str(jobs), "--json", str(out)],
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"bench_e2e failed: {(proc.stderr or proc.stdout)[-800:]}")
        r = json.loads(out.read_text())["throughput_batch"]
        if not r["all_completed"]:
            raise RuntimeError(f"not every Rota job completed: {r['states']}")
        return float(r["jobs_per_s"])


def tsp(jobs: int, keep_output: bool, timeout: float) -> float:
    argv = [sys.executable, "-m", "bench.baselines", "tsp", "--jobs", str(jobs)]
    if keep_output:
        argv.append("--keep-output")
    return float(_run_json(argv, timeout)["jobs_per_s"])


def run(rounds: int, jobs: int, timeout: float, log: Any = print) -> dict[str, Any]:
    per: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    for n in range(1, rounds + 1):
        per["rota"].append(rota(jobs, timeout))
        per["tsp"].append(tsp(jobs, False, timeout))
        per["tsp_keep_output"].append(tsp(jobs, True, timeout))
        log(f"round {n}: " + ", ".join(f"{s} {per[s][-1]:.0f}" for s in SYSTEMS) + " jobs/s")
    med = {s: statistics.median(v) for s, v in per.items()}
    res = {"jobs": jobs, "rounds": rounds, "jobs_per_s": per, "median": med,
           "rota_over": {s: med["rota"] / med[s] for s in SYSTEMS[1:]},
           "rota_ahead_in_rounds": {s: sum(r > t for r, t in zip(per["rota"], per[s],
                                                                 strict=True))
                                    for s in SYSTEMS[1:]}}
    log("median jobs/s: " + ", ".join(f"{s} {v:.0f}" for s, v in med.items()))
    log("Rota / task-spooler -n: x{:.2f}; Rota / task-spooler keeping output: x{:.2f}".format(
        res["rota_over"]["tsp"], res["rota_over"]["tsp_keep_output"]))
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per single run")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    res = run(args.rounds, args.jobs, args.timeout)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
