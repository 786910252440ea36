"""The private Slurm of the Slurm engine's tests (tests/backends/slurm/conftest.py), shared."""

from __future__ import annotations

from ..slurm.conftest import slurm  # noqa: F401 - a fixture, used by name
