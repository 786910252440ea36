"""An :class:`EngineJob` as Slurm is handed it: the sbatch argv, the batch script, refusals.

Pure but for one PATH lookup (is conda there?). Every option is an sbatch command-line
option in the ``--name=value`` form (a value can never read as another option); the script
holds only the job's command, quoted by :func:`shlex.join`, and Rota's own integers.
Environment values never appear in either: the engine hands them to sbatch through its
process environment and ``--export=ALL`` copies them into the job (see engine.py).

A sweep's first attempts may go as one job array (:func:`array_script`): one ``case`` branch
per task, each the task's own quoted command, with Rota's own per-task integers exported.

Single-node jobs ``exec`` the command, so it *is* the batch shell: ``--signal=B:SIG@grace``
(batch shell only) and ``scancel --full`` reach it directly, with no shell in between that
would defer the signal. Multi-node jobs ``exec srun`` the command once per node; their
stop signal goes to the job steps (every task on every node), never to srun itself, which
would abort the step on SIGTERM.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex
import signal
from collections.abc import Sequence

from rota.backends.common import conda_exe
from rota.backends.engine import TASK_VARIABLES, EngineJob
from rota.pools import SlurmPool

MIB = 1024 * 1024
MAX_SIGNAL_TIME = 65535  # sbatch --signal: sig_time is 0..65535 seconds
MAX_NICE = 2147483645  # Slurm's largest --nice
#: Variables sbatch or srun read as their own options: a job must not set them.
RESERVED_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")
#: A Slurm job id, or one task of an array (``12_3``).
JOB_ID = re.compile(r"\d+(_\d+)?")


def log_dir(work_dir: str) -> str:
    return posixpath.join(work_dir, "logs")


def user_log_dir(work_dir: str, user: str) -> str:
    """Where the jobs run as ``user`` write their output: a folder of theirs alone (Slurm
    opens a job's output file as the job's user)."""
    return posixpath.join(log_dir(work_dir), user)


def log_path(work_dir: str, engine_id: str) -> str:
    """The one file a job's stdout and stderr go to (``%j`` is its Slurm id; an array's
    task writes ``%A_%a``: the array's id and its index, the task's engine id)."""
    return posixpath.join(log_dir(work_dir), f"{engine_id}.log")


def is_job_id(text: str) -> bool:
    return JOB_ID.fullmatch(text) is not None


def signal_name(name: str) -> str | None:
    """``"SIGTERM"`` -> ``"TERM"`` (the form sbatch and scancel take); None if unknown."""
    try:
        return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"].name[3:]
    except KeyError:
        return None


# ---------------------------------------------------------------------------- refusals


def refusal(job: EngineJob, pool: SlurmPool) -> str | None:
    """Why a Slurm pool cannot honour ``job`` as asked, in one sentence; None when it can."""
    for check in (_command, _gpus, _gpu_memory, _image, _files, _model, _conda, _env,
                  _signal, _nodes, _after):
        reason = check(job, pool)
        if reason:
            return reason
    return None


def _command(job: EngineJob, pool: SlurmPool) -> str | None:
    if not job.argv or not job.argv[0].strip():
        return "the job has no command"
    if not job.shell and job.argv[0].startswith("-"):
        return f"the program {job.argv[0]!r} starts with '-', which exec and srun read as an option"
    return None


def _gpus(job: EngineJob, pool: SlurmPool) -> str | None:
    if job.gpus == int(job.gpus):
        return None
    if job.gpus > 1:
        return (f"{job.gpus:g} GPUs: Slurm gives whole GPUs, or shards of one GPU; ask for "
                f"{math.ceil(job.gpus)} GPUs or for a fraction below one")
    if not pool.shards:
        return (f"a fraction of a GPU ({job.gpus:g}) needs GRES shards, which this pool does "
                "not declare: set `shards = true` in the pool's settings (the cluster's "
                "gres.conf must define shards), or ask for a whole GPU")
    if job.gpu_type:
        return (f"a fraction of a GPU of type {job.gpu_type!r}: Slurm's shards carry no GPU "
                "type here; drop gpu_type or ask for a whole GPU")
    return None


def _gpu_memory(job: EngineJob, pool: SlurmPool) -> str | None:
    if job.gpu_mem is None:
        return None
    return ("Slurm cannot reserve GPU memory: a GPU GRES counts devices (or shards), not "
            "bytes; drop gpu_mem and pick GPUs that are big enough with gpu_type (or ask the "
            "admins for a memory-sized GRES such as MPS and name it in sbatch_args)")


def _image(job: EngineJob, pool: SlurmPool) -> str | None:
    if not job.image:
        return None
    return (f"the Slurm engine runs no container images (image={job.image!r}): run the job "
            "on the local pool or on Kubernetes, or use a conda environment on the cluster")


def _files(job: EngineJob, pool: SlurmPool) -> str | None:
    if not job.files:
        return None
    return ("the Slurm engine cannot mount files into a job: put "
            f"{', '.join(sorted(job.files))} in a folder every node sees and name that path "
            "in the command")


def _model(job: EngineJob, pool: SlurmPool) -> str | None:
    if not job.model_uri:
        return None
    return (f"the Slurm engine does not fetch a model before the job (model_uri="
            f"{job.model_uri!r}): fetch it in the job's command, into a folder every node sees")


def _conda(job: EngineJob, pool: SlurmPool) -> str | None:
    if job.conda is None or conda_exe() is not None:
        return None
    return (f"conda environment {job.conda!r} requested but conda is not installed where "
            "Rota submits Slurm jobs (the batch script runs `conda run` with that conda)")


def _env(job: EngineJob, pool: SlurmPool) -> str | None:
    for name in (*job.env, *job.secret_env):
        if name.startswith(RESERVED_PREFIXES):
            return (f"the variable {name} would be read by sbatch or srun as one of their own "
                    "settings: rename it, or put the sbatch option in the pool's sbatch_args")
        if not name or "=" in name or "\0" in name:
            return f"{name!r} is not a valid environment variable name"
    return None


def _signal(job: EngineJob, pool: SlurmPool) -> str | None:
    if signal_name(job.stop_signal) is None:
        return f"unknown stop signal {job.stop_signal!r}: name one such as SIGTERM or SIGUSR1"
    if job.time_limit is not None and job.grace > MAX_SIGNAL_TIME:
        return (f"a grace of {job.grace:g}s: sbatch sends the stop signal at most "
                f"{MAX_SIGNAL_TIME}s before the time limit")
    return None


def _nodes(job: EngineJob, pool: SlurmPool) -> str | None:
    return f"nodes must be at least 1, not {job.nodes}" if job.nodes < 1 else None


def _after(job: EngineJob, pool: SlurmPool) -> str | None:
    bad = [i for i in job.after if not is_job_id(i)]
    return f"{', '.join(map(repr, bad))}: not Slurm job ids to wait for" if bad else None


# ---------------------------------------------------------------------------- sbatch argv


def sbatch_argv(job: EngineJob, pool: SlurmPool, work_dir: str, *,
                shards_per_gpu: int | None = None, array: tuple[str, int] | None = None,
                home: str | None = None) -> list[str]:
    """The sbatch argv (without the program) for ``job``; the script goes on stdin.

    ``shards_per_gpu`` is the cluster's (read from sinfo by the engine): a fraction f of a
    GPU becomes ``--gres=shard:ceil(f * shards_per_gpu)``. ``array``: (the group's key, its
    number of tasks) when ``job`` is the first of a job array's identical members.
    ``--no-requeue``: one attempt is one Slurm job; Rota runs it again itself when Slurm
    preempts it or loses its node. A job run as another account (``job.run_as``, whose
    ``home`` is its folder when it names none) writes its output in ``user_log_dir``.
    """
    key, pattern = (job.key, "%j") if array is None else (array[0], "%A_%a")
    wd = work_dir.replace("%", "%%")  # sbatch's patterns, not ours
    log = posixpath.join(user_log_dir(wd, job.run_as), f"{pattern}.log") if job.run_as \
        else log_path(wd, pattern)
    argv = [*pool.sbatch_args, "--parsable", f"--job-name={key}", f"--comment={key}",
            f"--output={log}", f"--error={log}", "--open-mode=append",
            f"--chdir={job.cwd or (home if job.run_as and home else work_dir)}",
            "--export=ALL", "--no-requeue"]
    if array is not None:
        argv.append(f"--array=0-{array[1] - 1}")
    argv += _placement(job, pool)
    argv += _resources(job, pool, shards_per_gpu)
    argv += _limits(job)
    argv += _dependency(job)
    if job.priority > 0:  # later in Rota's order: lower in Slurm's (negative needs an admin)
        argv.append(f"--nice={min(job.priority, MAX_NICE)}")
    return argv


def _placement(job: EngineJob, pool: SlurmPool) -> list[str]:
    out = [f"--{opt}={value}" for opt, value in
           (("partition", pool.partition), ("account", pool.account), ("qos", pool.qos))
           if value]
    if job.nodes > 1:  # one task per node: the command (torchrun, ...) starts its own ranks
        out += [f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    else:
        out += ["--nodes=1", "--ntasks=1"]
    return out


def _resources(job: EngineJob, pool: SlurmPool, shards_per_gpu: int | None) -> list[str]:
    out: list[str] = []
    if job.cpus:
        out.append(f"--cpus-per-task={math.ceil(job.cpus)}")
    if job.memory:
        out.append(f"--mem={math.ceil(job.memory / MIB)}M")
    if job.gpus >= 1 and job.gpus == int(job.gpus):
        kind = f"{pool.gpu_gres}:{job.gpu_type}" if job.gpu_type else pool.gpu_gres
        out.append(f"--gres={kind}:{int(job.gpus)}")
    elif 0 < job.gpus < 1:
        out.append(f"--gres=shard:{max(1, math.ceil(job.gpus * (shards_per_gpu or 1)))}")
    return out


def _limits(job: EngineJob) -> list[str]:
    if job.time_limit is None:
        return []
    sig = signal_name(job.stop_signal) or "TERM"
    grace = min(MAX_SIGNAL_TIME, math.ceil(job.grace))
    # B: (batch shell only) reaches a single-node job's command, which the script execs;
    # without B: every step's tasks get it: every rank of a multi-node job.
    where = "B:" if job.nodes == 1 else ""
    return [f"--time={max(1, math.ceil(job.time_limit / 60))}",
            f"--signal={where}{sig}@{grace}"]


def _dependency(job: EngineJob) -> list[str]:
    """Slurm holds the job until each of ``after`` has completed (exit 0), and cancels it
    (reason DependencyNeverSatisfied) once one cannot, instead of keeping it forever."""
    if not job.after:
        return []
    return [f"--dependency=afterok:{':'.join(job.after)}", "--kill-on-invalid-dep=yes"]


# ---------------------------------------------------------------------------- the script


def command(job: EngineJob, conda: str | None = None) -> list[str]:
    """The argv the script runs: the job's, in ``/bin/sh -c`` when it is shell text, behind
    ``conda run`` when it names an environment (``conda``: that conda's path)."""
    argv = (["/bin/sh", "-c", job.argv[0], "sh", *job.argv[1:]] if job.shell
            else list(job.argv))
    if job.conda:
        argv = [conda or "conda", "run", "-n", job.conda, "--no-capture-output", *argv]
    return argv


def batch_script(job: EngineJob, conda: str | None = None) -> str:
    """The batch script: the quoted command, exec'd (and by srun on every node if nodes > 1)."""
    lines = ["#!/bin/sh", f"# Rota job {job.job_id}, attempt {job.attempt} ({job.key})"]
    cmd = shlex.join(command(job, conda))
    if job.nodes > 1:
        lines += [
            "# torchrun's rendezvous: the first node, a port from the job id",
            'if [ -z "${MASTER_ADDR:-}" ]; then',
            '  MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "  export MASTER_ADDR",
            "fi",
            'export MASTER_PORT="${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}"',
            "# each task: its node's rank, as torchrun reads it (PET_*: a plain torchrun works)",
            "# torchrun's processes per node, unless the job's environment says",
            f'export PET_NPROC_PER_NODE="${{PET_NPROC_PER_NODE:-{job.torchrun_procs}}}"',
            "exec srun --kill-on-bad-exit=1 /bin/sh -c " + shlex.quote(
                'export PET_NODE_RANK="$SLURM_NODEID" PET_NNODES="$SLURM_JOB_NUM_NODES" '
                'PET_MASTER_ADDR="$MASTER_ADDR" PET_MASTER_PORT="$MASTER_PORT"; exec "$@"')
            + f" rota-rank {cmd}",
        ]
    else:
        if job.procs_per_node:  # torchrun reads PET_* as its defaults (as on Kubernetes)
            lines.append(f'export PET_NPROC_PER_NODE="${{PET_NPROC_PER_NODE:-'
                         f'{job.procs_per_node}}}"')
        lines.append(f"exec {cmd}")
    return "\n".join(lines) + "\n"


def array_script(jobs: Sequence[EngineJob], key: str, conda: str | None = None) -> str:
    """The batch script of a job array: each task ``exec``s its own job's quoted command,
    picked by ``$SLURM_ARRAY_TASK_ID``, with Rota's own integers of that job exported."""
    lines = ["#!/bin/sh", f"# Rota jobs {', '.join(str(j.job_id) for j in jobs)}, attempt 1, "
             f"as one job array ({key})", 'case "$SLURM_ARRAY_TASK_ID" in']
    for index, job in enumerate(jobs):
        exports = " ".join(f"{var}={job.env[var]}" for var in TASK_VARIABLES
                           if job.env.get(var, "").isdigit())
        lines.append(f"{index}) " + (f"export {exports}; " if exports else "")
                     + f"exec {shlex.join(command(job, conda))} ;;")
    lines += ['*) echo "rota: no task $SLURM_ARRAY_TASK_ID in this array" >&2; exit 2 ;;',
              "esac"]
    return "\n".join(lines) + "\n"


def conda_path(job: EngineJob) -> str | None:
    """The conda that ``command`` runs: the one found where Rota submits."""
    return conda_exe() if job.conda else None
