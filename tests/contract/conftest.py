"""The engines' private clusters (tests/backends), shared with the pool contract suite."""

from __future__ import annotations

from backends.ray.conftest import ray_cluster  # noqa: F401 - fixtures, used by name
from backends.slurm.conftest import slurm  # noqa: F401
