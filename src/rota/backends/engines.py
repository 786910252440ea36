"""Each cluster pool's engine, by the pool's kind, imported on demand (an engine may bring an
optional SDK): what it can do, how healthy it is, and what it would be handed for a job.

The Kubernetes engine renders manifests only: its client half (create, follow, delete) is
not built yet, so its health says so instead of asking a cluster.
"""

from __future__ import annotations

from pathlib import Path

from rota.backends.engine import Engine, EngineCapabilities, EngineJob, PoolHealth
from rota.errors import BackendError
from rota.pools import KubernetesPool, Pool, RayPool, SlurmPool

KUBERNETES_CAPABILITIES = EngineCapabilities(multi_node=True, images=True)
KUBERNETES_HEALTH = PoolHealth(
    reachable=False, message="not asked: Rota's Kubernetes client is not built yet; "
                             "`rota render JOB --pool NAME` prints the manifests")


def _slurm(pool: SlurmPool, work_dir: Path) -> Engine:
    from rota.backends.slurm import SlurmEngine

    return SlurmEngine(pool, str(work_dir / "slurm"))


def capabilities(pool: Pool, work_dir: Path) -> EngineCapabilities | None:
    """What the pool's engine can do; None for this machine (Rota places jobs itself)."""
    if isinstance(pool, SlurmPool):
        return _slurm(pool, work_dir).capabilities
    if isinstance(pool, KubernetesPool):
        return KUBERNETES_CAPABILITIES
    if isinstance(pool, RayPool):
        return _ray(pool, work_dir).capabilities
    return None


def health(pool: Pool, work_dir: Path) -> PoolHealth:
    """Asks the engine (blocking: a command or a request); never raises."""
    try:
        if isinstance(pool, SlurmPool):
            return _slurm(pool, work_dir).health()
        if isinstance(pool, KubernetesPool):
            return KUBERNETES_HEALTH
        if isinstance(pool, RayPool):
            return _ray(pool, work_dir).health()
    except BackendError as e:
        return PoolHealth(reachable=False, message=str(e))
    raise BackendError(f"{pool.engine} pools have no engine to ask")


def render(pool: Pool, job: EngineJob, *, user: str, work_dir: Path) -> str:
    """What the engine would be handed for ``job``. Raises InvalidSpec (or BackendError)
    naming what the pool cannot honour."""
    from rota.errors import InvalidSpec

    if isinstance(pool, KubernetesPool):
        from rota.backends.kubernetes import render_yaml

        return render_yaml(job, pool, user=user)
    if isinstance(pool, SlurmPool | RayPool):
        engine = _slurm(pool, work_dir) if isinstance(pool, SlurmPool) else _ray(pool, work_dir)
        reason = engine.refusal(job)
        if reason:
            raise InvalidSpec(reason, field="pool")
        return engine.render(job)
    raise InvalidSpec("this machine's pool runs jobs itself: there is nothing to render",
                      field="pool")


def _ray(pool: RayPool, work_dir: Path) -> Engine:
    from rota.backends.ray import RayEngine

    return RayEngine(pool, str(work_dir / "ray"))
