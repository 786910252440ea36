"""Throughput side by side: Rota and task-spooler in alternating rounds.

    python bench/rounds.py [--rounds 5] [--jobs 2000] [--json bench/out/rounds.json]

One round runs, one after the other on the same machine: Rota's end-to-end throughput
(``bench_e2e.py --parts a``: 2,000 ``true`` jobs at 0.25 GPU on 8 simulated GPUs,
submitted 100 per request, each with its own log file), task-spooler with ``-n`` (32
slots, output discarded) and task-spooler keeping each job's output in a file, as Rota
does. Alternating rounds spread the machine's slow and fast spells over every system
(on a shared 2-core VM one system's run can be half as fast as the next one's); the
report gives each system's median and the ratio of medians, and every round's figures.

Every run's files (Rota's ROTA_HOME with a log per job, task-spooler's outputs) stay in one
folder until all rounds are done. On an ext4 without a journal, as on the development VM,
creating a file scans past every inode deleted in the last 1-5 minutes (the kernel's
``recently_deleted``), so removing one run's 2,000 files right after it made the next run's
file creations up to 20 times dearer and penalised whichever system ran next and created
files. ``--clean-between`` removes each run's files right after it, as before, to show that
effect. Each round first prints what creating a file costs then (CPU per ``open(O_CREAT)``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.file_cost import file_create_us, warn_if_slow  # noqa: E402

SYSTEMS = ("rota", "tsp", "tsp_keep_output")


def _run_json(argv: list[str], timeout: float, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout)[-800:]}")
    return (proc.stdout and json.loads(proc.stdout[proc.stdout.index("{"):])) or {}


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp)}


def rota(jobs: int, timeout: float, tmp: Path, keep: bool) -> dict[str, float]:
    """bench_e2e's throughput figures: ``jobs_per_s`` and the CPU per job of the daemon,
    the local runner and the jobs themselves."""
    with tempfile.TemporaryDirectory(dir=tmp) as json_dir:
        out = Path(json_dir) / "e2e.json"
        proc = subprocess.run([sys.executable, "bench/bench_e2e.py", "--parts", "a",
                               "--batch-only", "--jobs", str(jobs), "--json", str(out)]
                              + (["--keep-home"] if keep else []),
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              check=False, env=_env(tmp))
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"bench_e2e failed: {(proc.stderr or proc.stdout)[-800:]}")
        r = json.loads(out.read_text())["throughput_batch"]
        if not r["all_completed"]:
            raise RuntimeError(f"not every Rota job completed: {r['states']}")
        return {k: float(r[k]) for k in ("jobs_per_s", "daemon_cpu_ms_per_job",
                                         "runner_cpu_ms_per_job", "jobs_cpu_ms_per_job")}


def tsp(jobs: int, keep_output: bool, timeout: float, tmp: Path, keep: bool) -> float:
    argv = [sys.executable, "-m", "bench.baselines", "tsp", "--jobs", str(jobs)]
    if keep_output:
        argv.append("--keep-output")
    if keep:
        argv.append("--keep-files")
    return float(_run_json(argv, timeout, _env(tmp))["jobs_per_s"])


def run(rounds: int, jobs: int, timeout: float, clean_between: bool = False,
        log: Any = print) -> dict[str, Any]:
    per: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    create_us: list[float] = []
    cpu: list[dict[str, float]] = []
    tmp = Path(tempfile.mkdtemp(prefix="rota-rounds-"))
    keep = not clean_between
    try:
        for n in range(1, rounds + 1):
            create_us.append(file_create_us(tmp))
            warn_if_slow(create_us[-1])
            figures = rota(jobs, timeout, tmp, keep)
            per["rota"].append(figures.pop("jobs_per_s"))
            cpu.append(figures)
            per["tsp"].append(tsp(jobs, False, timeout, tmp, keep))
            per["tsp_keep_output"].append(tsp(jobs, True, timeout, tmp, keep))
            log(f"round {n}: " + ", ".join(f"{s} {per[s][-1]:.0f}" for s in SYSTEMS)
                + f" jobs/s (a file creation cost {create_us[-1]:.0f} us before it; Rota's "
                "CPU per job: " + ", ".join(f"{k.removesuffix('_cpu_ms_per_job')} {v:.2f}"
                                            for k, v in cpu[-1].items()) + " ms)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {s: statistics.median(v) for s, v in per.items()}
    res = {"jobs": jobs, "rounds": rounds, "clean_between": clean_between,
           "file_create_us": create_us, "jobs_per_s": per, "rota_cpu_ms_per_job": cpu,
           "median": med,
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
    p.add_argument("--clean-between", action="store_true",
                   help="remove each run's files right after it (see above)")
    args = p.parse_args(argv)
    res = run(args.rounds, args.jobs, args.timeout, args.clean_between)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
