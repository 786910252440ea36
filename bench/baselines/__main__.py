"""``python -m bench.baselines slurm|tsp --jobs 2000 [--tuned]``: print one result as JSON."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from types import FrameType

from bench.baselines._common import BaselineError, BaselineResult


def _sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into SystemExit so the context managers stop their daemons.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.baselines",
        description="Run N trivial jobs (`true`) at 32 at a time (8 GPUs x 0.25) and time them.",
    )
    parser.add_argument("system", choices=["slurm", "tsp"])
    parser.add_argument("--jobs", type=int, default=2000, help="number of jobs (default 2000)")
    parser.add_argument(
        "--tuned",
        action="store_true",
        help="slurm: use the tuned SchedulerParameters from the notes (default: Slurm defaults)",
    )
    parser.add_argument(
        "--mode",
        choices=["array", "individual"],
        default="array",
        help="slurm: one job array, or one sbatch per job (default array)",
    )
    parser.add_argument(
        "--gpu-model",
        choices=["auto", "shard", "cpu-slots"],
        default="auto",
        help="slurm: how 0.25 GPU is modelled (auto: shard, else cpu-slots)",
    )
    parser.add_argument(
        "--submit-workers",
        type=int,
        default=1,
        help="slurm individual mode / tsp: parallel submitting clients (default 1)",
    )
    parser.add_argument(
        "--keep-output", action="store_true", help="write each job's output to a file"
    )
    parser.add_argument(
        "--keep-files",
        action="store_true",
        help="tsp: leave the run's folder (in TMPDIR) for the caller to remove",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds for the workload")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)

    result: BaselineResult
    try:
        if args.system == "slurm":
            from bench.baselines.slurm import run_slurm_baseline

            result = run_slurm_baseline(
                args.jobs,
                tuned=args.tuned,
                mode=args.mode,
                gpu_model=args.gpu_model,
                keep_output=args.keep_output,
                submit_workers=args.submit_workers,
                timeout=args.timeout,
            )
        else:
            from bench.baselines.tsp import run_tsp_baseline

            result = run_tsp_baseline(
                args.jobs,
                keep_output=args.keep_output,
                submit_workers=args.submit_workers,
                timeout=args.timeout,
                keep_files=args.keep_files,
            )
    except BaselineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
