"""Each cluster pool's engine, by the pool's kind, imported on demand (an engine may bring an
optional SDK): what it can do, how healthy it is, and what it would be handed for a job.

Nothing here imports an engine's SDK: each engine imports its own when it first talks to
its cluster (the Kubernetes engine its ``kubernetes`` client).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rota.backends.engine import Engine, EngineCapabilities, EngineJob, PoolHealth
from rota.errors import BackendError
from rota.pools import KubernetesPool, Pool, RayPool, SlurmPool


def make(pool: Pool, work_dir: Path, *, secrets: Callable[[str], str]) -> Engine:
    """The engine that takes the pool's jobs; ``secrets``: a secret's value by its name."""
    if isinstance(pool, SlurmPool):
        return _slurm(pool, work_dir, secrets)
    if isinstance(pool, RayPool):
        return _ray(pool, work_dir, secrets)
    if isinstance(pool, KubernetesPool):
        return _kubernetes(pool, secrets)
    raise BackendError("this machine's pool has no engine: Rota places its jobs itself")


def _slurm(pool: SlurmPool, work_dir: Path,
           secrets: Callable[[str], str] | None = None) -> Engine:
    from rota.backends.slurm import SlurmEngine

    return SlurmEngine(pool, str(work_dir / "slurm"), secrets=secrets)


def capabilities(pool: Pool, work_dir: Path) -> EngineCapabilities | None:
    """What the pool's engine can do; None for this machine (Rota places jobs itself)."""
    if isinstance(pool, SlurmPool):
        return _slurm(pool, work_dir).capabilities
    if isinstance(pool, KubernetesPool):
        return _kubernetes(pool).capabilities
    if isinstance(pool, RayPool):
        return _ray(pool, work_dir).capabilities
    return None


def health(pool: Pool, work_dir: Path) -> PoolHealth:
    """Asks the engine (blocking: a command or a request); never raises."""
    try:
        if isinstance(pool, SlurmPool):
            return _slurm(pool, work_dir).health()
        if isinstance(pool, KubernetesPool):
            return _kubernetes(pool).health()
        if isinstance(pool, RayPool):
            return _ray(pool, work_dir).health()
    except BackendError as e:
        return PoolHealth(reachable=False, message=str(e))
    raise BackendError(f"{pool.engine} pools have no engine to ask")


def refusal(pool: Pool, job: EngineJob, *, work_dir: Path) -> str | None:
    """Why the pool's engine cannot honour ``job`` as asked, in a sentence; None when it
    can."""
    if isinstance(pool, KubernetesPool):
        return _kubernetes(pool, _no_values).refusal(job)
    if isinstance(pool, SlurmPool):
        return _slurm(pool, work_dir, _no_values).refusal(job)
    if isinstance(pool, RayPool):
        return _ray(pool, work_dir, _no_values).refusal(job)
    return None


def _no_values(name: str) -> str:
    raise KeyError(name)  # refusals only ask whether secrets can be filled, not with what



def render(pool: Pool, job: EngineJob, *, user: str, work_dir: Path) -> str:
    """What the engine would be handed for ``job``. Raises InvalidSpec (or BackendError)
    naming what the pool cannot honour."""
    from rota.errors import InvalidSpec

    if isinstance(pool, KubernetesPool):
        from rota.backends.kubernetes import render_yaml

        return render_yaml(job, pool)  # the Secret is the attempt's own: no user in it
    if isinstance(pool, SlurmPool | RayPool):
        engine = (_slurm(pool, work_dir, _no_values) if isinstance(pool, SlurmPool)
                  else _ray(pool, work_dir, _no_values))
        reason = engine.refusal(job)
        if reason:
            raise InvalidSpec(reason, field="pool")
        return engine.render(job)
    return _local_text(job)


def _local_text(job: EngineJob) -> str:
    """This machine's pool has no engine: what its runner would start, as a person reads
    it (secret variables by name only)."""
    import shlex

    env = [f"{k}={shlex.quote(v)}" for k, v in sorted(job.env.items())]
    env += [f"{k}=<secret>" for k in sorted(job.secret_env)]
    command = f"sh -c {shlex.quote(job.argv[0])}" if job.shell else shlex.join(job.argv)
    cwd = job.cwd or "the daemon's"
    return "\n".join([
        "# this machine: Rota places the job on its GPUs (CUDA_VISIBLE_DEVICES) and the "
        "local runner starts it", f"# cwd: {cwd}", *(f"# env: {e}" for e in env), command, ""])


def _ray(pool: RayPool, work_dir: Path,
         secrets: Callable[[str], str] | None = None) -> Engine:
    from rota.backends.ray import RayEngine

    return RayEngine(pool, str(work_dir / "ray"), secrets=secrets)


def _kubernetes(pool: KubernetesPool,
                secrets: Callable[[str], str] | None = None) -> Engine:
    from rota.backends.kubernetes import KubernetesEngine

    return KubernetesEngine(pool, secrets=secrets)
