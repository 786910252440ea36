"""Datasets the ways a person uses them, beside copying the same bytes with `cp -r`.

    python bench/bench_datasets.py [--mib 400] [--files 8] [--small 2000] [--rounds 3]

A fresh ROTA_HOME and daemon (simulated GPUs) in a temporary folder, then per round:

(a) `rota dataset add` of a folder of ``--files`` random files, ``--mib`` MiB in all (the
    CLI lists and hashes them, uploads them in chunks over the daemon's socket, and the
    daemon checks every sha256 and publishes the version), beside `cp -r` of the folder;
(b) the same for a folder of ``--small`` files of 4 KiB (per-file costs);
(c) the first job that reads the big version: from `rota submit --dataset` to its end
    (the daemon fetches the version into its cache, verified, before the job starts),
    beside a job that reads the folder in place; then a second job, the cache warm.

Each round adds new content (a new version): nothing is taken from an earlier round. The
figures are wall seconds, MiB/s and the ratio to the baseline, with the medians.
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
import time
from collections.abc import Callable
from pathlib import Path

ROTA = [sys.executable, "-m", "rota"]
READ_ALL = ("import os, sys\nn = 0\nfor d, _, fs in os.walk(sys.argv[1]):\n"
            "    for f in fs:\n        n += len(open(os.path.join(d, f), 'rb').read())\n"
            "print(n)")


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*ROTA, *args], env=env, capture_output=True, text=True, check=False,
                       timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"rota {' '.join(args)} failed: {r.stderr}")
    return r


def timed(fn: Callable[..., object], *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def make_folder(path: Path, files: int, size: int) -> None:
    path.mkdir(parents=True)
    for i in range(files):
        (path / f"part-{i:05d}.bin").write_bytes(os.urandom(size))


def job_seconds(env: dict[str, str], cwd: Path, *args: str) -> float:
    """From submit to the job's end (its recorded ended_at is not needed: `rota wait`)."""
    t0 = time.perf_counter()
    r = subprocess.run([*ROTA, "submit", "--json", "--gpus", "0", *args], env=env, cwd=cwd,
                       capture_output=True, text=True, check=True)
    job = str(json.loads(r.stdout)["jobs"][0]["id"])
    w = run(env, "wait", job, "--timeout", "1800", "--json")
    if json.loads(w.stdout).get("state") != "completed":
        raise SystemExit(f"job {job} did not complete: {w.stdout}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=400)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rota-bench-datasets-"))
    env = {**os.environ, "ROTA_HOME": str(base / "home")}
    subprocess.run([*ROTA, "server", "--simulate", "2x24G", "--detach"], env=env, check=True,
                   capture_output=True)
    rows: dict[str, list[tuple[float, float]]] = {"big add": [], "small add": [],
                                                  "first job": [], "warm job": []}
    size = a.mib * (1 << 20)
    try:
        for n in range(a.rounds):
            big, small = base / f"big{n}", base / f"small{n}"
            make_folder(big, a.files, size // a.files)
            make_folder(small, a.small, 4096)
            rows["big add"].append((
                timed(run, env, "dataset", "add", f"big{n}", str(big)),
                timed(shutil.copytree, big, base / f"big{n}-copy")))
            rows["small add"].append((
                timed(run, env, "dataset", "add", f"small{n}", str(small)),
                timed(shutil.copytree, small, base / f"small{n}-copy")))
            var = f"$ROTA_DATASET_BIG{n}"
            first = job_seconds(env, base, "--dataset", f"big{n}", "--shell", "--",
                                f'{sys.executable} -c "{READ_ALL}" {var}')
            in_place = job_seconds(env, base, "--", sys.executable, "-c", READ_ALL, str(big))
            warm = job_seconds(env, base, "--dataset", f"big{n}", "--shell", "--",
                               f'{sys.executable} -c "{READ_ALL}" {var}')
            rows["first job"].append((first, in_place))
            rows["warm job"].append((warm, in_place))
            for path in (big, small, base / f"big{n}-copy", base / f"small{n}-copy"):
                shutil.rmtree(path)
    finally:
        subprocess.run([*ROTA, "server", "stop"], env=env, capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)
    print(f"datasets: {a.mib} MiB in {a.files} files; {a.small} files of 4 KiB; "
          f"{a.rounds} rounds (median of each; baseline: cp -r, or a job reading the folder "
          "in place)")
    print(f"{'path':<12} {'rota s':>8} {'base s':>8} {'ratio':>7} {'MiB/s':>8}")
    for name, got in rows.items():
        rota = statistics.median(r for r, _ in got)
        baseline = statistics.median(b for _, b in got)
        mib = a.mib if name != "small add" else a.small * 4096 / (1 << 20)
        print(f"{name:<12} {rota:8.2f} {baseline:8.2f} {rota / baseline:7.1f} "
              f"{mib / rota:8.0f}")


if __name__ == "__main__":
    main()
