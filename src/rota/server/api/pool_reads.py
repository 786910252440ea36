"""What the API says about pools: each with its engine's capabilities and health, and what an
engine would be handed for a job or for a spec not submitted (`rota pools`, `rota render JOB
--pool NAME`, `rota eval render`).

Engines are asked off the event loop: their answers come from commands and requests that
may take seconds (sinfo, a Ray head), and all pools are asked at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rota.backends import engines
from rota.backends.engine import EngineJob, PoolHealth
from rota.core.spec import JobSpec
from rota.errors import Conflict, InvalidSpec, NotFound, RotaError
from rota.pools import LOCAL, Pool, Pools
from rota.store.repo import JobRecord

log = logging.getLogger(__name__)

#: what trackers put in a job's environment from the user's stored secrets
_TRACKER_SECRETS = ("WANDB_API_KEY",)
#: how long `rota pools` waits for an engine's health before it says it did not answer
HEALTH_TIMEOUT_S = 10.0


async def pools_answer(pools: Pools, work_dir: Path, local: PoolHealth) -> dict[str, Any]:
    """Every pool, the default first, with its health; ``local`` is this machine's."""
    names = sorted(pools.pools, key=lambda n: (n != pools.default, n))

    async def ask(name: str) -> PoolHealth:
        pool = pools.pools[name]
        if pool.engine == LOCAL:
            return local
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(engines.health, pool, work_dir), HEALTH_TIMEOUT_S)
        except TimeoutError:
            return PoolHealth(reachable=False, message=f"{pool.engine} did not answer within "
                                                       f"{HEALTH_TIMEOUT_S:g}s")
        except Exception as e:  # one pool's engine failing never fails the list
            log.exception("pool %s: asking its health failed", name)
            return PoolHealth(reachable=False, message=f"{pool.engine}: {e}")

    healths = await asyncio.gather(*(ask(n) for n in names))
    caps = await asyncio.to_thread(
        lambda: [engines.capabilities(pools.pools[n], work_dir) for n in names])
    return {"default": pools.default, "pools": [
        _pool_view(n, pools.pools[n], h, c) for n, h, c in zip(names, healths, caps,
                                                               strict=True)]}


async def containers_answer(ask: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Whether this machine runs container jobs, and with GPUs (Docker is asked off the
    loop, and for at most HEALTH_TIMEOUT_S)."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(ask), HEALTH_TIMEOUT_S)
    except TimeoutError:
        why = f"Docker did not answer within {HEALTH_TIMEOUT_S:g}s"
    except RotaError as e:
        why = str(e)
    return {"available": False, "gpus": "none", "message": why}


def _pool_view(name: str, pool: Pool, health: PoolHealth, caps: Any) -> dict[str, Any]:
    settings = pool.model_dump(exclude={"engine", "max_in_flight", "description"})
    return {"name": name, "engine": pool.engine, "description": pool.description,
            "max_in_flight": pool.max_in_flight, "settings": settings,
            "health": dataclasses.asdict(health),
            "capabilities": None if caps is None else dataclasses.asdict(caps)}


#: variables the daemon sets for jobs on this machine only: an engine gives its own GPUs,
#: and the events and stop files are paths on this machine
LOCAL_ONLY_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "ROTA_GPU_FRACTION", "ROTA_EVENTS_FILE",
                            "ROTA_STOP_FILE", "ROTA_LOG_PATH"})


def engine_job(job_id: int, user: str, spec: JobSpec, attempt: int,
               env: Mapping[str, str] | None = None, *, install: str = "") -> EngineJob:
    """The job as an engine is handed its ``attempt``. ``env``: the attempt's environment
    as the launcher made it (None: the spec's own, for `rota render`). Variables the spec
    marks secret, and stored secrets, travel as secrets (``secret_env`` names them; their
    values stay in ``env`` for the engine backend only), never as values."""
    hidden = {*spec.secret_env, *spec.secrets, *_TRACKER_SECRETS}
    given = dict(spec.env) if env is None else {k: v for k, v in env.items()
                                                if k not in LOCAL_ONLY_ENV}
    if env is None:  # rendering: a stored secret's variable names the secret
        secret_env = {**{k: f"env.{k}" for k in given if k in hidden}, **spec.secrets}
    else:
        secret_env = {k: k for k in given if k in hidden}
    labels = {"user": user, **({"project": spec.project} if spec.project else {})}
    return EngineJob(
        job_id=job_id, attempt=attempt, name=spec.name or f"job-{job_id}",
        argv=tuple(spec.command), shell=spec.shell,
        env={k: v for k, v in given.items() if k not in hidden}, secret_env=secret_env,
        cwd=spec.cwd, gpus=spec.gpus, gpu_mem=spec.gpu_mem, gpu_type=spec.gpu_type,
        cpus=spec.cpus, memory=spec.memory, image=spec.image, nodes=spec.nodes,
        procs_per_node=spec.procs_per_node, time_limit=spec.time_limit,
        grace=spec.grace, stop_signal=spec.stop_signal, priority=spec.priority,
        conda=spec.conda, checkpoint_dir=spec.checkpoint_dir, files=dict(spec.files),
        model_uri=spec.model, model_dir=spec.model_dir, labels=labels, install=install)


def render_answer(pools: Pools, work_dir: Path, row: JobRecord, pool_name: str | None,
                  install: str = "", after: tuple[str, ...] = ()) -> dict[str, Any]:
    """What the pool's engine would be handed for the job's next attempt (blocking: an
    engine may look something up, e.g. Slurm's shards). ``after``: the engine ids of its
    parents in flight on that pool, which an engine that holds dependencies waits for."""
    spec = JobSpec.stored(row.spec)
    job = engine_job(row.id, row.user, spec, attempt=row.attempts + 1, install=install)
    pool = pools.pools.get(pool_name or pools.default)
    caps = engines.capabilities(pool, work_dir) if pool is not None else None
    if after and caps is not None and caps.dependencies:
        job = dataclasses.replace(job, after=after)
    return _rendered(pools, work_dir, pool_name, job, row.user)


#: the id a spec that was never submitted is rendered with (`rota eval render`)
UNSUBMITTED_ID = 0


def render_spec_answer(pools: Pools, work_dir: Path, spec: JobSpec, user: str,
                       pool_name: str, install: str = "") -> dict[str, Any]:
    """What the pool's engine would be handed for ``spec`` were ``user`` to submit it:
    its first attempt, as job 0 (``id`` None: nothing is stored). Blocking, as above.
    What the pool cannot honour is a Conflict, as intake refuses it at a submit."""
    job = engine_job(UNSUBMITTED_ID, user, spec, attempt=1, install=install)
    if pool_name in pools.pools:
        reason = engines.refusal(pools.pools[pool_name], job, work_dir=work_dir)
        if reason:
            raise Conflict(f"pool {pool_name}: {reason}")
    return _rendered(pools, work_dir, pool_name, job, user)


def _rendered(pools: Pools, work_dir: Path, pool_name: str | None, job: EngineJob,
              user: str) -> dict[str, Any]:
    """NotFound for an unknown pool; Conflict for what the pool cannot take as it is."""
    if pool_name is not None and pool_name not in pools.pools:
        raise NotFound(f"no pool {pool_name!r}; the pools are: {', '.join(sorted(pools.pools))}")
    name, pool = pools.get(pool_name)
    try:
        text = engines.render(pool, job, user=user, work_dir=work_dir)
    except InvalidSpec as e:  # the job is fine; this pool cannot take it as it is
        raise Conflict(f"pool {name}: {e}") from None
    shown = None if job.job_id == UNSUBMITTED_ID else job.job_id
    return {"id": shown, "pool": name, "engine": pool.engine, "text": text}
