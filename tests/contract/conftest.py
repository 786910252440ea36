"""The engines' private clusters and dockerd (tests/backends), shared with the contract
suite."""

from __future__ import annotations

from backends.container.conftest import docker_client, dockerd  # noqa: F401 - fixtures
from backends.ray.conftest import ray_cluster  # noqa: F401 - used by name
from backends.slurm.conftest import slurm  # noqa: F401
