"""A real, private Ray cluster for the engine's tests: bench/baselines/ray.py's LocalRay, a
head (4 CPUs, 2 logical GPUs, one ``accelerator_type:T4``) and a second node on this host
(2 CPUs, 1 logical GPU), stopped by pid, never by ``ray stop``.

Skipped with the reason when ``ray`` cannot be imported or the cluster does not start;
``ROTA_REQUIRE_RAY=1`` (CI) turns that skip into a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.backends.ray import RayEngine
from rota.pools import RayPool
from rota_testing import wait_until

try:  # LocalRay lives in bench/ so that bench/bench_pools.py can start one too
    from bench.baselines.ray import GPU_TYPE, HEAD, WORKER, LocalRay, free_ports
except ImportError:  # pytest started without the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from bench.baselines.ray import GPU_TYPE, HEAD, WORKER, LocalRay, free_ports

__all__ = ["GPU_TYPE", "HEAD", "SECRETS", "WORKER", "LocalRay", "free_ports", "wait_state"]

SECRETS = {"api-token": "s3cr3t-Zq9!value"}


def _unavailable(reason: str) -> None:
    if os.environ.get("ROTA_REQUIRE_RAY") == "1":
        pytest.fail(f"ROTA_REQUIRE_RAY=1 but no local Ray cluster: {reason}")
    pytest.skip(f"no local Ray cluster here: {reason}")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalRay]:
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        _unavailable(f"ray cannot be imported ({exc}); pip install 'ray[default]'")
    cluster = LocalRay()
    try:
        cluster.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired, AssertionError) as exc:
        cluster.close()
        _unavailable(f"ray start failed: {exc}")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def engine(ray_cluster: LocalRay, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[RayEngine]:
    pool = RayPool(engine="ray", address=ray_cluster.address)
    eng = RayEngine(pool, str(tmp_path_factory.mktemp("rota-ray")),
                    secrets=SECRETS.__getitem__, timeout=30)
    yield eng
    eng.close()


def wait_state(engine: RayEngine, eid: str, state: str, timeout: float = 60) -> object:
    def reached() -> object:
        st = engine.poll([eid])[eid]
        return st if st.state.value == state else None
    return wait_until(reached, timeout, every=0.2, what=f"ray job {eid} to be {state}")

