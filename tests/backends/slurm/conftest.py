"""A real, private Slurm for the engine's tests: bench/baselines/slurm.py's PrivateSlurm
with two nodes (two slurmd processes on this host), two fake GPUs and four shards each.

Skipped with the reason when Slurm cannot be installed or started here (not root, no
apt-get); ``ROTA_REQUIRE_SLURM=1`` (CI) turns that skip into a failure.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.backends.slurm import SlurmEngine
from rota.pools import SlurmPool

try:
    from bench.baselines.slurm import BaselineError, PrivateSlurm
except ImportError:  # pytest started without the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from bench.baselines.slurm import BaselineError, PrivateSlurm

SECRETS = {"api-token": "s3cr3t-Zq9!value"}


def _unavailable(reason: str) -> None:
    if os.environ.get("ROTA_REQUIRE_SLURM") == "1":
        pytest.fail(f"ROTA_REQUIRE_SLURM=1 but no private Slurm: {reason}")
    pytest.skip(f"no private Slurm here: {reason}")


def private_slurm(**settings: str) -> Iterator[PrivateSlurm]:
    """The tests' cluster, with ``settings`` on top (slurm.conf's), for a fixture to yield
    from; skipped (or failed, see the module) where it cannot start."""
    if os.geteuid() != 0:
        _unavailable("slurmctld and slurmd run as root here, and this is not root")
    # KillWait: seconds from a cancel's SIGTERM to its SIGKILL (30 by default)
    cluster = PrivateSlurm(tuned=True, gpus=2, jobs_per_gpu=4, nodes=2,
                           settings={"KillWait": "2", **settings})
    try:
        cluster.start()
    except (BaselineError, OSError) as exc:
        cluster.close()
        _unavailable(str(exc).splitlines()[0])
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def slurm() -> Iterator[PrivateSlurm]:
    yield from private_slurm()


@pytest.fixture(scope="module")
def engine(slurm: PrivateSlurm) -> SlurmEngine:
    assert slurm.folder is not None
    pool = SlurmPool(engine="slurm", slurm_conf=slurm.env["SLURM_CONF"], shards=True)
    return SlurmEngine(pool, os.path.join(slurm.folder, "rota"), secrets=SECRETS.__getitem__)
