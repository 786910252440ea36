"""The Slurm engine: sbatch, squeue, sacct, scancel and sinfo, run as argv lists.

Where an ended job is read (a job that ended must not read as LOST while its end is
recorded somewhere), first that answers wins and is remembered:

1. ``squeue -t all``: queued and running jobs, and ended ones for MinJobAge (default 300 s);
2. ``sacct``: Slurm's accounting (slurmdbd); without it, ``sacct -c``: the job completion
   log (``JobCompType=jobcomp/filetxt``, read where Rota runs, so its file must be visible
   there); without either,
3. ``scontrol show job ID`` while the controller still holds the job (MinJobAge).

A job none of them knows is LOST.

Secrets: values reach the job through sbatch's own process environment and
``--export=ALL``; never the command line, the script, or a file of ours. Slurm keeps the
job's environment in its state folder (root and SlurmUser only) and does not show it in
``scontrol show job``.

A job run as another account (``EngineJob.run_as``, a root daemon's): sbatch runs as that
account (``runuser -u USER --``), so Slurm runs the job as it, with an environment built
from a login's of that account, never the daemon's; its output goes to a folder of its own
(``script.user_log_dir``). The daemon, root, reads, finds and cancels it as any other.

Stop: the signal goes at once (``scancel --signal``); ``grace`` seconds later a timer thread
cancels the job (``scancel``: Slurm sends SIGTERM to what is left and SIGKILL after the
cluster's KillWait, 30 s by default; a SIGKILL through scancel takes that same path), so
``stop`` never blocks. A daemon restarted within the grace loses that timer: it calls
``stop`` again (idempotent).
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import pwd
import shlex
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping

from rota.backends.base import RunAs
from rota.backends.base import as_user as user_argv
from rota.backends.engine import (
    EngineCapabilities,
    EngineJob,
    EngineState,
    EngineStatus,
    PoolHealth,
)
from rota.backends.slurm import parse, script
from rota.errors import BackendError
from rota.pools import SlurmPool

log = logging.getLogger(__name__)

#: Variables that change what Slurm's commands do or print (SQUEUE_FORMAT, SBATCH_*...).
_SLURM_INPUT_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SACCT_",
                         "SINFO_", "SCANCEL_", "SCONTROL_")
_SQUEUE_FIELDS = ("engine_id", "state", "reason", "started", "ended", "node_list",
                  "dependency", "raw_id")
_SACCT_FIELDS = ("engine_id", "name", "state", "exit_code", "started", "ended", "node_list")
_SACCT_FORMAT = "JobID,JobName,State,ExitCode,Start,End,NodeList"
_SINFO_FORMAT = "NodeList:0|,StateLong:0|,Gres:0|,GresUsed:0|"
_UNKNOWN_JOB = "Invalid job id specified"
_NO_TASK = "not found"  # scontrol on an array's task that Slurm dropped: "Job 12_0 not found"
_CHUNK = 500  # ids per squeue/sacct call
_SRUN_TAIL = 64 << 10  # bytes at a job log's end where srun tells how each task exited
_RAW_IDS_KEPT = 100_000  # array tasks whose own job id is remembered
_LOG_READ_MAX = 8 * 1024 * 1024
_EPOCH = "2000-01-01"  # sacct --starttime for find: every record there is
#: sacct's sources of ended jobs, in order: accounting (slurmdbd), the completion log.
_RECORDS = {"accounting": [], "jobcomp": ["-c"]}


def _command_env(pool: SlurmPool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SLURM_INPUT_PREFIXES)}
    conf = pool.slurm_conf or os.environ.get("SLURM_CONF")
    if conf:
        env["SLURM_CONF"] = conf
    return env


class SlurmEngine:
    """The :class:`rota.backends.engine.Engine` for a Slurm cluster."""

    name = "slurm"

    def __init__(self, pool: SlurmPool, work_dir: str, *,
                 secrets: Callable[[str], str] | None = None, timeout: float = 30.0) -> None:
        """``work_dir``: the default folder for logs (the pool's ``work_dir`` wins); every
        node must see it. ``secrets``: a secret's value by its name (raises KeyError)."""
        self.pool = pool
        self.work_dir = os.path.abspath(pool.work_dir or work_dir)
        self.capabilities = EngineCapabilities(fractional_gpus=pool.shards, multi_node=True,
                                               conda=True, dependencies=True, arrays=True,
                                               run_as=True)
        self.timeout = timeout
        self._secrets = secrets
        self._env = _command_env(pool)
        self._user = pwd.getpwuid(os.getuid()).pw_name
        # whose jobs find looks among: a root daemon's run as their owners (keys are unique)
        self._whose = ([], ["--allusers"]) if os.geteuid() == 0 else \
            ([f"--user={self._user}"], [f"--user={self._user}"])
        self._records: str | None = None  # where ended jobs are read: a _RECORDS key, "none"
        self._shards: int | None = None
        self._raw_ids: dict[str, str] = {}  # an array task's id -> its own job id (squeue %A)

    # ------------------------------------------------------------------ translation

    def refusal(self, job: EngineJob) -> str | None:
        reason = script.refusal(job, self.pool)
        if reason is None and job.secret_env and self._secrets is None:
            reason = ("this Slurm pool was set up without access to Rota's secrets, so "
                      f"{', '.join(sorted(job.secret_env))} cannot be filled")
        return reason

    def render(self, job: EngineJob) -> str:
        argv = self._sbatch_argv(job)
        return ("# sbatch options (argv; environment values are not shown: sbatch's own "
                "environment carries them)\n"
                + " \\\n    ".join(["sbatch", *(shlex.quote(a) for a in argv)])
                + "\n# batch script (sbatch's stdin)\n"
                + script.batch_script(job, script.conda_path(job)))

    def _sbatch_argv(self, job: EngineJob) -> list[str]:
        shards = self._shards_per_gpu() if 0 < job.gpus < 1 else None
        return script.sbatch_argv(job, self.pool, self.work_dir, shards_per_gpu=shards,
                                  home=_account(job.run_as).home if job.run_as else None)

    # ------------------------------------------------------------------ submit and find

    def submit(self, job: EngineJob) -> str:
        self._check_submit(job)
        self._check_after(job)
        return self._sbatch(job, self._sbatch_argv(job),
                            script.batch_script(job, script.conda_path(job)))

    def submit_array(self, jobs: list[EngineJob], key: str) -> list[str]:
        """One ``sbatch --array``: task i runs ``jobs[i]`` (the adapter groups only jobs
        that differ in their command, name and TASK_VARIABLES, with no dependencies)."""
        first = jobs[0]
        for job in jobs:
            self._check_submit(job)
        argv = script.sbatch_argv(first, self.pool, self.work_dir, array=(key, len(jobs)),
                                  shards_per_gpu=self._shards_per_gpu()
                                  if 0 < first.gpus < 1 else None,
                                  home=_account(first.run_as).home if first.run_as else None)
        array_id = self._sbatch(first, argv,
                                script.array_script(jobs, key, script.conda_path(first)))
        return _tasks(array_id, len(jobs))

    def _check_submit(self, job: EngineJob) -> None:
        reason = self.refusal(job)
        if reason:
            raise BackendError(f"job {job.job_id}: {reason}")

    def _sbatch(self, job: EngineJob, argv: list[str], batch: str) -> str:
        """sbatch with ``job``'s environment; the id it answers."""
        os.makedirs(script.log_dir(self.work_dir), exist_ok=True)
        if job.run_as:
            self._user_log_dir(job.run_as)
        out = self._run("sbatch", argv, env=self._job_env(job), stdin=batch, as_user=job.run_as)
        engine_id = out.strip().split(";", 1)[0]  # --parsable: "id" or "id;cluster"
        if not engine_id.isdigit():
            raise BackendError(f"sbatch answered {out.strip()!r}, not a job id")
        return engine_id

    def _check_after(self, job: EngineJob) -> None:
        """Slurm takes a dependency on a job it no longer knows as met (22.05), so a job
        to wait for must still be known, and not have ended otherwise than completed."""
        if not job.after:
            return
        known = {r.engine_id: r for r in self._squeue(list(job.after))}
        for eid in job.after:
            row = known.get(eid)
            if row is None or (row.ended_here and row.base_state != "COMPLETED"):
                how = "is not known to Slurm" if row is None else f"ended {row.state}"
                raise BackendError(f"job {job.job_id}: Slurm job {eid} it must wait for "
                                   f"{how}; not submitted")

    def _user_log_dir(self, user: str) -> None:
        """The account's own output folder (0700), reached through folders it may pass
        through but not list."""
        account = _account(user)
        path = script.user_log_dir(self.work_dir, user)
        os.makedirs(path, mode=0o700, exist_ok=True)
        for parent in (self.work_dir, script.log_dir(self.work_dir)):
            os.chmod(parent, os.stat(parent).st_mode & 0o755 | 0o711)
        os.chown(path, account.uid, account.gid)
        os.chmod(path, 0o700)
        closed = _closed_to_others(os.path.dirname(path))
        if closed is not None:  # else Slurm fails the job with a bare "signal 53"
            raise BackendError(f"{user} cannot reach this pool's output folder {path}: "
                               f"{closed} is closed to other accounts (chmod o+x it, or set "
                               "the pool's work_dir where every account can pass)")

    def _job_env(self, job: EngineJob) -> dict[str, str]:
        base = self._env
        if job.run_as:  # a login's of the account (and where Slurm's config is)
            base = {**_account(job.run_as).login_env(),
                    **{k: v for k, v in self._env.items() if k == "SLURM_CONF"}}
        env = {**base, **job.env}
        for var, secret in job.secret_env.items():
            if self._secrets is None:
                raise BackendError(f"job {job.job_id}: no secrets to fill {var} from")
            try:
                env[var] = self._secrets(secret)
            except KeyError as exc:
                raise BackendError(f"job {job.job_id}: no secret named {secret!r}") from exc
        return env

    def find(self, key: str) -> str | None:
        out = self._run("squeue", ["-h", "-t", "all", *self._whose[0], f"--name={key}",
                                   "-o", "%i"])
        ids = [i for i in out.split() if i.isdigit()]
        if not ids:
            ids = [r.engine_id for r in self._records_by_name(key)]
        return min(ids, key=int) if ids else None

    def find_array(self, key: str, count: int) -> list[str] | None:
        """The tasks of the array named ``key``. Its id is the array's (%F); in sacct's
        records, the smallest id with that name (tasks get theirs after the array's)."""
        out = self._run("squeue", ["-h", "-t", "all", "-r", *self._whose[0],
                                   f"--name={key}", "-o", "%F"])
        ids = [i for i in out.split() if i.isdigit()]
        if not ids:
            ids = [r.engine_id.split("_", 1)[0] for r in self._records_by_name(key)]
        return _tasks(min(ids, key=int), count) if ids else None

    # ------------------------------------------------------------------ poll

    def poll(self, engine_ids: list[str]) -> dict[str, EngineStatus]:
        live = {r.engine_id: r for r in self._squeue(engine_ids)}
        need = [i for i in engine_ids if i not in live or live[i].ended_here]
        ended = self._ended(need) if need else {}
        out: dict[str, EngineStatus] = {}
        for eid in engine_ids:
            row = parse.merged(ended.get(eid), live.get(eid))
            if row is None or (row.ended_here and row.exit_code is None):
                row = self._scontrol(eid) or row  # its end, while the controller holds it
            out[eid] = (self._ranks_told(parse.status(row)) if row is not None
                        else EngineStatus(eid, EngineState.LOST,
                                          reason="Slurm no longer knows this job and kept "
                                                 "no record of its end"))
        return out

    def _ranks_told(self, st: EngineStatus) -> EngineStatus:
        """A multi-node job that failed ends with the code of its first failing task, as
        srun told it in the job's log: Slurm records the highest task's code, which is the
        healthy ranks' 143 once srun has killed them (--kill-on-bad-exit)."""
        if st.state is not EngineState.ENDED or len(st.nodes) < 2 or not st.exit_code:
            return st
        try:
            tail = self.read_log(st.engine_id, -_SRUN_TAIL)
        except BackendError:
            return st
        code = parse.first_failed_task(tail)
        return st if code is None else dataclasses.replace(st, exit_code=code)

    def _squeue(self, ids: list[str]) -> list[parse.JobRow]:
        """``-r``: an array's tasks one a line, by ``ARRAY_TASK`` ids; %A: a started task's
        own job id, remembered (the completion log knows the task by that id only)."""
        rows: list[parse.JobRow] = []
        for chunk in _chunks(ids):
            out = self._run("squeue", ["-h", "-t", "all", "-r", "-j", ",".join(chunk),
                                       "-o", "%i|%T|%r|%S|%e|%N|%E|%A"], ok=(_UNKNOWN_JOB,))
            rows += parse.rows(out, _SQUEUE_FIELDS)
        for row in rows:
            if "_" in row.engine_id and row.raw_id and parse.state_of(row) is not \
                    EngineState.QUEUED:  # a queued task shares the array's record
                self._raw_ids[row.engine_id] = row.raw_id
        while len(self._raw_ids) > _RAW_IDS_KEPT:  # the oldest tasks' ends are long read
            del self._raw_ids[next(iter(self._raw_ids))]
        return rows

    def _ended(self, ids: list[str]) -> dict[str, parse.JobRow]:
        """The records of ended jobs; an array's task asked for by its own job id where
        known (``sacct -c`` takes ``12_3`` for job 12), its row named as Rota follows it."""
        asked = {self._raw_ids.get(i, i): i for i in ids}
        out: dict[str, parse.JobRow] = {}
        for row in self._records_by_id(list(asked)):
            eid = asked.get(row.engine_id, row.engine_id)
            out[eid] = dataclasses.replace(row, engine_id=eid)
        return out

    def _scontrol(self, eid: str) -> parse.JobRow | None:
        out = self._run("scontrol", ["show", "job", "-o", eid], ok=(_UNKNOWN_JOB, _NO_TASK))
        return parse.scontrol_row(out)

    # ------------------------------------------------------------------ records of ended jobs

    def _records_by_id(self, ids: list[str]) -> list[parse.JobRow]:
        return [r for chunk in _chunks(ids) for r in self._sacct(["-j", ",".join(chunk)])]

    def _records_by_name(self, key: str) -> list[parse.JobRow]:
        rows = self._sacct([f"--name={key}", f"--starttime={_EPOCH}", *self._whose[1]])
        return [r for r in rows if r.name == key]  # sacct -c does not filter by name

    def _sacct(self, args: list[str]) -> list[parse.JobRow]:
        """sacct from accounting, else from the completion log; [] where neither is kept
        (then scontrol is the only source of an end). The first that answers is kept."""
        sources = [self._records] if self._records else list(_RECORDS)
        for source in sources:
            if source == "none":
                break
            try:
                out = self._run("sacct", [*_RECORDS[source], "-X", "-n", "-P",
                                          "-o", _SACCT_FORMAT, *args])
            except BackendError as exc:
                if "disabled" in str(exc):  # "accounting storage / job completion is disabled"
                    continue
                raise
            self._records = source
            return parse.rows(out, _SACCT_FIELDS)
        self._records = "none"
        return []

    # ------------------------------------------------------------------ stop and logs

    def stop(self, engine_id: str, signal: str, grace: float) -> None:
        sig = script.signal_name(signal)
        if sig is None:
            raise BackendError(f"unknown signal {signal!r}")
        out = self._run("squeue", ["-h", "-r", "-j", engine_id, "-o", "%T|%D"],
                        ok=(_UNKNOWN_JOB,))
        state, _, nodes = out.strip().partition("|")
        if not state or state in parse.ENDED_STATES:
            return
        if state in parse.QUEUED_STATES:  # nothing runs yet: nothing to hand over
            self._run("scancel", [engine_id])
            return
        # One node: the command is the batch shell (--full: it and its children). Several:
        # the steps only (every rank); srun itself would abort the step on the signal.
        full = ["--full"] if nodes.strip() in ("", "1") else []
        self._run("scancel", [f"--signal={sig}", *full, engine_id])
        timer = threading.Timer(max(0.0, grace), self._kill, args=(engine_id,))
        timer.daemon = True
        timer.start()

    def _kill(self, engine_id: str) -> None:
        try:  # Slurm's cancel: SIGTERM to every process, SIGKILL after the cluster's KillWait
            self._run("scancel", [engine_id])
        except BackendError as exc:  # it ended within the grace: nothing left to kill
            log.debug("slurm job %s: kill after grace: %s", engine_id, exc)

    def read_log(self, engine_id: str, offset: int) -> bytes:
        if not script.is_job_id(engine_id):
            raise BackendError(f"{engine_id!r} is not a Slurm job id")
        path = script.log_path(self.work_dir, engine_id)
        owner = None
        if not os.path.exists(path):  # a job run as another account: in that one's folder
            found = glob.glob(script.user_log_dir(glob.escape(self.work_dir), "*")
                              + f"/{engine_id}.log")
            if found:
                path, owner = found[0], os.stat(os.path.dirname(found[0])).st_uid
        try:
            # that account may put anything in its folder: no link, nothing of another's
            fd = os.open(path, os.O_RDONLY | (os.O_NOFOLLOW if owner is not None else 0))
        except FileNotFoundError:
            return b""  # not started yet (or the work folder is not visible here)
        except OSError as exc:
            raise BackendError(f"cannot read the log of Slurm job {engine_id}: {exc}") from exc
        with os.fdopen(fd, "rb") as fh:
            if owner is not None and os.fstat(fd).st_uid != owner:
                raise BackendError(f"the log of Slurm job {engine_id} ({path}) is not its "
                                   "owner's file; not read")
            if offset < 0:  # the last -offset bytes
                fh.seek(max(0, os.fstat(fd).st_size + offset))
            else:
                fh.seek(offset)
            return fh.read(_LOG_READ_MAX)

    # ------------------------------------------------------------------ health

    def health(self) -> PoolHealth:
        try:
            out = self._sinfo()
        except BackendError as exc:
            return PoolHealth(reachable=False, message=str(exc))
        return parse.health(out, self.pool.gpu_gres)

    def _sinfo(self) -> str:
        part = [f"--partition={self.pool.partition}"] if self.pool.partition else []
        return self._run("sinfo", ["-h", "-N", *part, "-O", _SINFO_FORMAT])

    def _shards_per_gpu(self) -> int:
        if self._shards is None:
            found = parse.shards_per_gpu(self._sinfo(), self.pool.gpu_gres)
            if found is None:
                raise BackendError("the pool declares shards, but no node of the cluster has "
                                   f"both {self.pool.gpu_gres} and shard GRES (sinfo)")
            self._shards = found
        return self._shards

    # ------------------------------------------------------------------ commands

    def _run(self, prog: str, args: list[str], *, stdin: str | None = None,
             env: Mapping[str, str] | None = None, ok: Iterable[str] = (),
             as_user: str | None = None) -> str:
        """Run a Slurm command (as ``as_user``, through runuser); its stdout. Slurm's own
        words become a BackendError; an error that says one of ``ok`` is an empty answer."""
        exe = os.path.join(self.pool.bin_dir, prog) if self.pool.bin_dir else prog
        if as_user and not os.path.isabs(exe):  # runuser looks it up on the job's PATH
            exe = shutil.which(exe, path=self._env.get("PATH")) or exe
        argv = user_argv(as_user or None, [exe, *args])
        try:
            proc = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                                  env=dict(env or self._env), timeout=self.timeout,
                                  stdin=subprocess.DEVNULL if stdin is None else None,
                                  check=False)
        except FileNotFoundError as exc:
            where = f"in {self.pool.bin_dir}" if self.pool.bin_dir else "on PATH"
            raise BackendError(f"{prog} not found {where}: is the Slurm client "
                               "installed here?") from exc
        except subprocess.TimeoutExpired as exc:
            raise BackendError(f"{prog} did not answer within {self.timeout:g}s") from exc
        except (OSError, ValueError) as exc:
            raise BackendError(f"{prog}: {exc}") from exc
        if proc.returncode != 0:
            msg = (proc.stderr.strip() or proc.stdout.strip() or "no message")[-2000:]
            if any(o in msg for o in ok):
                return ""
            raise BackendError(f"{prog} failed (exit {proc.returncode}): {msg}")
        return proc.stdout


def _closed_to_others(path: str) -> str | None:
    """The first folder from the root down to ``path`` that other accounts may not pass."""
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        folder = os.sep.join(parts[:i])
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None


def _account(user: str) -> RunAs:
    return RunAs.of(user)  # BackendError: no such account


def _tasks(array_id: str, count: int) -> list[str]:
    """The ids of an array's tasks (``ARRAY_ID_INDEX``), as squeue, sacct and scancel take."""
    return [f"{array_id}_{index}" for index in range(count)]


def _chunks(ids: list[str]) -> list[list[str]]:
    return [ids[i:i + _CHUNK] for i in range(0, len(ids), _CHUNK)]
