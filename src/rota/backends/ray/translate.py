"""An :class:`EngineJob` as the Ray Jobs API is handed it: the submission body, refusals.

Pure (no I/O). The entrypoint is the one string the Jobs API takes; it is always made by
:func:`shlex.join` from an argv list, never pasted together from user values.

- A single-node job's entrypoint is its own command (``/bin/sh -c`` for shell text); a
  ``cwd`` adds a fixed ``sh`` wrapper that changes into it (the folder is an argument of
  that wrapper, never part of its text).
- A multi-node job, or one with secrets, runs :mod:`rota.backends.ray.gang` on the cluster
  (``python -m rota.backends.ray.gang ... -- COMMAND``): it reads the secrets file and, for
  several nodes, reserves a placement group and starts one rank per node.

Resources: GPUs (fractions below one too), CPUs and memory become the entrypoint's resources
for a single node, and each bundle of the placement group for a gang (whose driver then asks
for none and runs on the head). A GPU type is Ray's own convention: the custom resource
``accelerator_type:TYPE`` (Ray sets it on nodes with that GPU, ``ray start --resources``
sets it by hand), asked for in Ray's token amount of 0.001.

The stop signal and grace go in as the two variables Ray's job supervisor reads when it
stops a job (it runs with the job's runtime_env): ``RAY_JOB_STOP_SIGNAL`` (Ray knows
SIGTERM and SIGINT only) and ``RAY_JOB_STOP_WAIT_TIME_S`` (whole seconds to the SIGKILL).
"""

from __future__ import annotations

import copy
import math
import shlex
from typing import Any
from urllib.parse import urlparse

from rota.backends.engine import EngineJob
from rota.pools import RayPool

GANG_MODULE = "rota.backends.ray.gang"
#: The Python on the cluster that has Rota installed (runs the gang module).
CLUSTER_PYTHON = "python"
ACCELERATOR_PREFIX = "accelerator_type:"
ACCELERATOR_SHARE = 0.001  # what Ray's own accelerator_type= option asks for
STOP_SIGNALS = ("SIGTERM", "SIGINT")  # the signals Ray's job stop can send
STOP_SIGNAL_VAR = "RAY_JOB_STOP_SIGNAL"
STOP_WAIT_VAR = "RAY_JOB_STOP_WAIT_TIME_S"
#: Extra seconds a gang's driver gets beyond the grace: it forwards the signal to every
#: rank, waits the grace, kills what is left, and only then may Ray kill it.
GANG_STOP_MARGIN = 10
#: runtime_env fields that Ray refuses beside ``conda`` (one Python environment per job).
_ENV_MANAGERS = ("pip", "uv", "container", "image_uri")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
SECRETS_PLACEHOLDER = "<secrets file>"
_CWD_WRAPPER = 'cd -- "$1" && shift && exec "$@"'


def is_local(pool: RayPool) -> bool:
    """Whether the head is on this machine (its address is a loopback one)."""
    return (urlparse(pool.address).hostname or "") in _LOOPBACK


# ---------------------------------------------------------------------------- refusals


def refusal(job: EngineJob, pool: RayPool, *, secrets: bool) -> str | None:
    """Why a Ray pool cannot honour ``job`` as asked, in one sentence; None when it can.
    ``secrets``: whether the engine can read Rota's stored secrets."""
    for check in (_command, _nodes, _gpus, _gpu_memory, _image, _files, _model, _conda,
                  _env, _signal, _local_paths):
        reason = check(job, pool)
        if reason:
            return reason
    if job.secret_env and not secrets:
        return ("this Ray pool was set up without access to Rota's secrets, so "
                f"{', '.join(sorted(job.secret_env))} cannot be filled")
    return None


def _command(job: EngineJob, pool: RayPool) -> str | None:
    if not job.argv or not job.argv[0].strip():
        return "the job has no command"
    return None


def _nodes(job: EngineJob, pool: RayPool) -> str | None:
    return f"nodes must be at least 1, not {job.nodes}" if job.nodes < 1 else None


def _gpus(job: EngineJob, pool: RayPool) -> str | None:
    if job.gpus < 0:
        return f"a negative number of GPUs ({job.gpus:g})"
    if job.gpus > 1 and job.gpus != int(job.gpus):
        return (f"{job.gpus:g} GPUs: Ray gives a fraction of one GPU or whole GPUs, not "
                f"both; ask for {math.ceil(job.gpus)} GPUs or for a fraction below one")
    return None


def _gpu_memory(job: EngineJob, pool: RayPool) -> str | None:
    if job.gpu_mem is None:
        return None
    return ("Ray cannot reserve GPU memory (its GPUs are counted, not sized): drop gpu_mem "
            "and ask for the fraction of a GPU the job needs (gpus=0.5), or name a GPU type")


def _image(job: EngineJob, pool: RayPool) -> str | None:
    if not job.image:
        return None
    return (f"the Ray engine runs no per-job container images (image={job.image!r}): "
            "put the environment in the pool's runtime_env, or run the job on the local "
            "pool or on Kubernetes")


def _files(job: EngineJob, pool: RayPool) -> str | None:
    if not job.files:
        return None
    return ("the Ray engine cannot mount files into a job: put "
            f"{', '.join(sorted(job.files))} in the pool's runtime_env working_dir, or in a "
            "folder every node sees, and name that path in the command")


def _model(job: EngineJob, pool: RayPool) -> str | None:
    if not job.model_uri:
        return None
    return (f"the Ray engine does not fetch a model before the job (model_uri="
            f"{job.model_uri!r}): fetch it in the job's command")


def _conda(job: EngineJob, pool: RayPool) -> str | None:
    if job.conda is None:
        return None
    clash = [k for k in _ENV_MANAGERS if k in pool.runtime_env]
    if clash:
        return (f"conda environment {job.conda!r}: the pool's runtime_env already sets "
                f"{', '.join(clash)}, and Ray takes one Python environment per job")
    return None


def _env(job: EngineJob, pool: RayPool) -> str | None:
    for name in (*job.env, *job.secret_env):
        if not name or "=" in name or "\0" in name:
            return f"{name!r} is not a valid environment variable name"
        if name in (STOP_SIGNAL_VAR, STOP_WAIT_VAR):
            return (f"the variable {name} is Rota's: it is set from the job's stop_signal "
                    "and grace")
    return None


def _signal(job: EngineJob, pool: RayPool) -> str | None:
    name = job.stop_signal if job.stop_signal.startswith("SIG") else f"SIG{job.stop_signal}"
    if name not in STOP_SIGNALS:
        return (f"stop signal {job.stop_signal!r}: Ray's job stop sends SIGTERM or SIGINT "
                "only; trap one of those")
    if job.grace < 0:
        return f"a negative grace ({job.grace:g}s)"
    return None


def _local_paths(job: EngineJob, pool: RayPool) -> str | None:
    if is_local(pool):
        return None
    if job.cwd:
        return (f"cwd {job.cwd!r} is a folder on this machine and the Ray head at "
                f"{pool.address} is not: drop cwd, or set runtime_env working_dir in the "
                "pool (Ray uploads it and the job starts in it)")
    if job.secret_env:
        return (f"secrets reach a Ray job only when its head is on this machine, and "
                f"{pool.address} is not: Ray shows every job's runtime_env (env_vars "
                "included) on its dashboard, so Rota never puts secret values there")
    return None


# ---------------------------------------------------------------------------- submission


def command(job: EngineJob) -> list[str]:
    """The job's argv: in ``/bin/sh -c`` when it is shell text."""
    if job.shell:
        return ["/bin/sh", "-c", job.argv[0], "sh", *job.argv[1:]]
    return list(job.argv)


def uses_gang(job: EngineJob) -> bool:
    """Whether the entrypoint is Rota's gang module (several nodes, or secrets to fill)."""
    return job.nodes > 1 or bool(job.secret_env)


def entrypoint(job: EngineJob, secrets_file: str | None = None) -> str:
    """The entrypoint string, made by :func:`shlex.join` from an argv list."""
    if uses_gang(job):
        return shlex.join(gang_argv(job, secrets_file))
    argv = command(job)
    if job.cwd:
        argv = ["/bin/sh", "-c", _CWD_WRAPPER, "rota-cwd", job.cwd, *argv]
    return shlex.join(argv)


def gang_argv(job: EngineJob, secrets_file: str | None) -> list[str]:
    argv = [CLUSTER_PYTHON, "-m", GANG_MODULE, "--key", job.key, "--nodes", str(job.nodes)]
    if job.nodes > 1:
        argv += ["--gpus", f"{job.gpus:g}", "--grace", f"{job.grace:g}",
                 "--nproc", str(job.torchrun_procs)]
        argv += [f"--cpus={job.cpus:g}"] if job.cpus else []
        argv += [f"--memory={job.memory}"] if job.memory else []
        argv += [f"--accelerator={job.gpu_type}"] if job.gpu_type else []
    argv += [f"--cwd={job.cwd}"] if job.cwd else []
    argv += [f"--secrets={secrets_file}"] if secrets_file else []
    return [*argv, "--", *command(job)]




def resources(job: EngineJob) -> dict[str, Any]:
    """The entrypoint's resources; none for a gang, whose ranks hold the nodes."""
    if job.nodes > 1:
        return {}
    out: dict[str, Any] = {}
    if job.gpus:
        out["entrypoint_num_gpus"] = job.gpus
    if job.cpus:
        out["entrypoint_num_cpus"] = job.cpus
    if job.memory:
        out["entrypoint_memory"] = int(job.memory)
    if job.gpu_type:
        out["entrypoint_resources"] = {ACCELERATOR_PREFIX + job.gpu_type: ACCELERATOR_SHARE}
    return out


def runtime_env(job: EngineJob, pool: RayPool) -> dict[str, Any]:
    """The pool's runtime_env with the job's variables, conda and stop settings over it."""
    env: dict[str, Any] = copy.deepcopy(pool.runtime_env)
    variables = {str(k): str(v) for k, v in dict(env.get("env_vars") or {}).items()}
    variables.update(job.env)
    signal = job.stop_signal if job.stop_signal.startswith("SIG") else f"SIG{job.stop_signal}"
    wait = max(1, math.ceil(job.grace)) + (GANG_STOP_MARGIN if job.nodes > 1 else 0)
    variables.update({STOP_SIGNAL_VAR: signal, STOP_WAIT_VAR: str(wait)})
    env["env_vars"] = variables
    if job.conda:
        env["conda"] = job.conda
    return env


def metadata(job: EngineJob) -> dict[str, str]:
    """Rota's ids and the job's labels, as Ray's (string-only) job metadata."""
    out = {f"label.{k}": str(v) for k, v in job.labels.items()}
    out.update({"rota_job_id": str(job.job_id), "rota_attempt": str(job.attempt),
                "rota_name": job.name})
    return out


def submission(job: EngineJob, pool: RayPool, secrets_file: str | None = None
               ) -> dict[str, Any]:
    """The body of ``POST /api/jobs/``: the job's submission id is its key."""
    return {"entrypoint": entrypoint(job, secrets_file), "submission_id": job.key,
            "runtime_env": runtime_env(job, pool), "metadata": metadata(job),
            **resources(job)}
