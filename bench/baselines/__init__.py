"""Throughput baselines (Slurm, task-spooler) to compare Rota against on the same workload.

``python -m bench.baselines slurm|tsp --jobs 2000 [--tuned]`` prints one JSON result.
"""

from bench.baselines._common import BaselineError, BaselineResult

__all__ = ["BaselineError", "BaselineResult"]
