"""A private Slurm (Debian 12: 22.05) for throughput baselines and the Slurm engine's tests.

Everything lives under one temporary folder: a munged with its own key and socket (run as the
``munge`` user), ``slurmctld -D`` and ``slurmd -D`` as root, slurm.conf, gres.conf and 8 fake GPU
device nodes (``mknod`` char devices, major 195). Nothing outside the folder is touched except the
Debian packages, which are installed with apt-get when missing. Ports are picked free at start,
so a system Slurm or another private instance on the same host does not get in the way.

Usage::

    with PrivateSlurm(tuned=True) as slurm:
        result = slurm.run_workload(2000, mode="array")

``nodes=N`` runs N slurmd processes on this host (``slurmd -N NAME``, each its own port,
spool folder, pid and log file): a multi-node cluster for ``srun`` across nodes. The default is
one node, as the throughput baselines use.

0.25 GPU per job is modelled with gres ``shard`` (4 shards per fake GPU, 32 in all, each job
``--gres=shard:1``); if shards do not work, it falls back to 32 CPU slots (node CPUs=32, each
job ``-c1``, no gres). ``gpu_model`` in the result says which one ran.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Literal

from bench.baselines._common import (
    BaselineError,
    BaselineResult,
    apt_install,
    clean_env,
    free_tcp_port,
    pid_alive,
    run_cmd,
    stop_process,
    tail_file,
    wait_for,
)

GpuModel = Literal["shard", "cpu-slots"]
SubmitMode = Literal["array", "individual"]

APT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
NODE_NAME = "rotabench"
PARTITION = "bench"

#: The "tuned" scheduler settings from /work/shared/notes/local-slurm.md.
TUNED_SETTINGS: dict[str, str] = {
    "SchedulerParameters": (
        "sched_min_interval=0,batch_sched_delay=0,sched_interval=1,"
        "default_queue_depth=10000,bf_interval=1,max_rpc_cnt=0"
    ),
    "MinJobAge": "2",
    "MessageTimeout": "5",
}

_NVIDIA_MAJOR = 195


def _find_binary(name: str) -> str | None:
    for path in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if path and os.access(path, os.X_OK):
            return path
    return None


def slurm_missing() -> list[str]:
    """Binaries (or the munge user) that are not there yet."""
    missing = [
        b
        for b in ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "munged", "munge")
        if _find_binary(b) is None
    ]
    try:
        pwd.getpwnam("munge")
    except KeyError:
        missing.append("user:munge")
    return missing


def ensure_slurm_installed() -> float:
    """apt-get install Slurm and munge if anything is missing; returns the seconds spent."""
    if not slurm_missing():
        return 0.0
    started = time.monotonic()
    apt_install(APT_PACKAGES)
    still = slurm_missing()
    if still:
        raise BaselineError(f"installed {' '.join(APT_PACKAGES)} but still missing: {still}")
    return time.monotonic() - started


def _jobcomp_plugin_available() -> bool:
    patterns = (
        "/usr/lib/*/slurm-wlm/jobcomp_filetxt.so",
        "/usr/lib/slurm-wlm/jobcomp_filetxt.so",
        "/usr/lib/*/slurm/jobcomp_filetxt.so",
        "/usr/lib64/slurm/jobcomp_filetxt.so",
    )
    return any(glob.glob(p) for p in patterns)


class PrivateSlurm:
    """Context manager running a private one-node Slurm cluster under a temporary folder."""

    def __init__(
        self,
        *,
        tuned: bool = False,
        gpu_model: Literal["auto", "shard", "cpu-slots"] = "auto",
        gpus: int = 8,
        jobs_per_gpu: int = 4,
        install: bool = True,
        base_dir: str | None = None,
        max_array_size: int = 100_001,
        max_job_count: int = 200_000,
        start_timeout: float = 90.0,
        keep_dir: bool = False,
        nodes: int = 1,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        if gpus < 1 or jobs_per_gpu < 1:
            raise ValueError("gpus and jobs_per_gpu must be >= 1")
        if not 1 <= nodes <= 16:
            raise ValueError("nodes must be in 1..16 (each is a slurmd process on this host)")
        if not 2 <= max_array_size <= 4_000_001:
            raise ValueError("max_array_size must be in 2..4000001 (Slurm's limit)")
        self.tuned = tuned
        self.requested_gpu_model = gpu_model
        self.gpus = gpus
        self.jobs_per_gpu = jobs_per_gpu
        self.slots = gpus * jobs_per_gpu
        self.install = install
        self.base_dir = base_dir
        self.max_array_size = max_array_size
        self.max_job_count = max(max_job_count, max_array_size)
        self.start_timeout = start_timeout
        self.keep_dir = keep_dir
        #: slurm.conf settings on top of the rest (e.g. ``{"KillWait": "2"}`` for tests).
        self.extra_settings = dict(settings or {})
        #: Node names: one slurmd process each (``slurmd -N NAME``, its own port), all on
        #: this host; every node has ``gpus`` fake GPUs. The first keeps the old name.
        self.node_names = [NODE_NAME] + [f"{NODE_NAME}{i}" for i in range(2, nodes + 1)]
        self.partition = PARTITION

        self.gpu_model: GpuModel | None = None
        self.folder: str | None = None
        self.install_seconds = 0.0
        self.start_seconds = 0.0
        self.stop_seconds = 0.0
        self.notes: list[str] = []
        self._munged: subprocess.Popen[bytes] | None = None
        self._slurmctld: subprocess.Popen[bytes] | None = None
        self._slurmds: list[subprocess.Popen[bytes]] = []
        self._env: dict[str, str] = {}
        self._jobcomp: str | None = None
        self._logs: list[IO[bytes]] = []
        self._run_counter = 0

    # ------------------------------------------------------------------ paths and env

    def _path(self, *parts: str) -> str:
        if self.folder is None:
            raise BaselineError("PrivateSlurm is not started (use it as a context manager)")
        return os.path.join(self.folder, *parts)

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands aimed at this private cluster."""
        return dict(self._env)

    @property
    def pids(self) -> dict[str, int]:
        """Pids of the daemons this instance started and that are still running."""
        out: dict[str, int] = {}
        for name, proc in (
            ("munged", self._munged),
            ("slurmctld", self._slurmctld),
            *self._slurmd_procs(),
        ):
            if proc is not None and proc.poll() is None:
                out[name] = proc.pid
        return out

    def _slurmd_procs(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        """(label, process) of each slurmd: "slurmd" alone, "slurmd-NAME" when several."""
        if len(self._slurmds) == 1:
            return [("slurmd", self._slurmds[0])]
        return [(f"slurmd-{n}", p) for n, p in zip(self.node_names, self._slurmds, strict=False)]

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> PrivateSlurm:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        if os.geteuid() != 0:
            raise BaselineError("PrivateSlurm runs slurmd/slurmctld as root: run it as root")
        if self.install:
            self.install_seconds = ensure_slurm_installed()
        elif slurm_missing():
            raise BaselineError(f"Slurm/munge not installed (missing {slurm_missing()})")
        started = time.monotonic()
        self.folder = tempfile.mkdtemp(prefix="rota-slurm-", dir=self.base_dir)
        os.chmod(self.folder, 0o755)  # munged (as user munge) must traverse it
        self._start_munge()
        self._jobcomp = self._path("jobcomp.log") if _jobcomp_plugin_available() else None
        if self._jobcomp is None:
            self.notes.append("jobcomp/filetxt plugin missing: completions counted with squeue")
        order: list[GpuModel]
        if self.requested_gpu_model == "auto":
            order = ["shard", "cpu-slots"]
        else:
            order = [self.requested_gpu_model]
        errors: list[str] = []
        for model in order:
            try:
                self._start_slurm(model)
                self._check_gpu_model(model)
            except BaselineError as exc:
                errors.append(f"{model}: {exc}")
                self._stop_slurm()
                continue
            self.gpu_model = model
            break
        if self.gpu_model is None:
            raise BaselineError("could not start Slurm:\n" + "\n".join(errors))
        if errors:
            self.notes.append("fell back: " + " | ".join(e.splitlines()[0] for e in errors))
        self.start_seconds = time.monotonic() - started

    def close(self) -> None:
        """Cancel our jobs, stop the daemons we started (by pid), remove the folder."""
        started = time.monotonic()
        problems: list[str] = []
        try:
            self._stop_slurm(problems)
        finally:
            if self._munged is not None:
                msg = stop_process(self._munged, name="munged")
                if msg:
                    problems.append(msg)
                self._munged = None
            for fh in self._logs:
                with contextlib.suppress(Exception):
                    fh.close()
            self._logs.clear()
            if self.folder and not self.keep_dir:
                began = time.monotonic()
                shutil.rmtree(self.folder, ignore_errors=True)
                if time.monotonic() - began > 3:
                    problems.append(f"removing {self.folder} took {time.monotonic() - began:.1f}s")
        if problems:
            self.notes.extend(problems)
        self.stop_seconds = time.monotonic() - started

    # ------------------------------------------------------------------ munge

    def _start_munge(self) -> None:
        munged = _find_binary("munged")
        munge = _find_binary("munge")
        unmunge = _find_binary("unmunge")
        setpriv = _find_binary("setpriv")
        if not (munged and munge and unmunge and setpriv):
            raise BaselineError("munged/munge/unmunge/setpriv not found")
        user = pwd.getpwnam("munge")
        mdir = self._path("munge")
        os.mkdir(mdir)
        os.chmod(mdir, 0o755)  # munged refuses a socket folder that is not 0755
        os.chown(mdir, user.pw_uid, user.pw_gid)
        key = os.path.join(mdir, "munge.key")
        with open(key, "wb") as fh:
            fh.write(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chown(key, user.pw_uid, user.pw_gid)
        self.munge_socket = os.path.join(mdir, "munge.socket")
        if len(self.munge_socket) > 100:
            raise BaselineError(f"munge socket path too long for AF_UNIX: {self.munge_socket}")
        log = os.path.join(mdir, "munged.out")
        out = open(log, "ab")  # noqa: SIM115 - closed in close()
        self._logs.append(out)
        self._munged = subprocess.Popen(
            [
                setpriv,
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--clear-groups",
                munged,
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={os.path.join(mdir, 'munged.pid')}",
                f"--log-file={os.path.join(mdir, 'munged.log')}",
                f"--seed-file={os.path.join(mdir, 'munged.seed')}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        munged_proc = self._munged

        def ready() -> bool:
            if munged_proc.poll() is not None:
                raise BaselineError(
                    f"munged exited with {munged_proc.returncode}:\n"
                    + tail_file(log)
                    + tail_file(os.path.join(mdir, "munged.log"))
                )
            if not os.path.exists(self.munge_socket):
                return False
            cred = run_cmd([munge, "-n", f"--socket={self.munge_socket}"], check=False)
            if cred.returncode != 0:
                return False
            back = run_cmd(
                [unmunge, f"--socket={self.munge_socket}"], check=False, input_text=cred.stdout
            )
            return back.returncode == 0

        wait_for(
            ready,
            timeout=30,
            what="munged to answer on its socket",
            on_timeout=lambda: tail_file(os.path.join(mdir, "munged.log")),
        )

    # ------------------------------------------------------------------ slurm

    def _make_fake_gpus(self) -> list[str]:
        devdir = self._path("dev")
        os.makedirs(devdir, exist_ok=True)
        paths = []
        for minor in range(self.gpus):
            path = os.path.join(devdir, f"nvidia{minor}")
            if not os.path.exists(path):
                try:
                    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(_NVIDIA_MAJOR, minor))
                except PermissionError as exc:
                    raise BaselineError(f"mknod {path} failed (need CAP_MKNOD): {exc}") from exc
            paths.append(path)
        return paths

    def _write_config(self, model: GpuModel) -> str:
        host = socket.gethostname().split(".")[0]
        ports: set[int] = set()
        while len(ports) < 1 + len(self.node_names):
            ports.add(free_tcp_port())
        ctld_port, *node_ports = sorted(ports)
        slurmd_port = node_ports[0]
        for sub in ("state", "spool", "work"):
            os.makedirs(self._path(sub), exist_ok=True)
        several = len(self.node_names) > 1
        if several:  # each slurmd its own spool folder, pid and log file (%n: node name)
            for name in self.node_names:
                os.makedirs(self._path("spool", name), exist_ok=True)
        devs = self._make_fake_gpus()
        dev_range = self._path("dev", f"nvidia[0-{self.gpus - 1}]")
        if model == "shard":
            # CPUs are not the limit: shards are (2 CPUs per shard job slot).
            cpus = 2 * self.slots
            gres_node = f"Gres=gpu:{self.gpus},shard:{self.slots}"
            gres_lines = [f"Name=gpu File={dev_range}"] + [
                f"Name=shard Count={self.jobs_per_gpu} File={dev}" for dev in devs
            ]
            gres_types = "gpu,shard"
        else:
            cpus = self.slots
            gres_node = f"Gres=gpu:{self.gpus}"
            gres_lines = [f"Name=gpu File={dev_range}"]
            gres_types = "gpu"
        settings: dict[str, str] = {
            "ClusterName": "rotabench",
            "SlurmctldHost": f"{host}(127.0.0.1)",
            "SlurmctldPort": str(ctld_port),
            "SlurmdPort": str(slurmd_port),
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "AuthType": "auth/munge",
            "CredType": "cred/munge",
            "AuthInfo": f"socket={self.munge_socket}",
            "StateSaveLocation": self._path("state"),
            "SlurmdSpoolDir": self._path("spool", "%n") if several else self._path("spool"),
            "SlurmctldPidFile": self._path("slurmctld.pid"),
            "SlurmdPidFile": self._path("slurmd-%n.pid" if several else "slurmd.pid"),
            "SlurmctldLogFile": self._path("slurmctld.log"),
            "SlurmdLogFile": self._path("slurmd-%n.log" if several else "slurmd.log"),
            "SlurmctldDebug": "info",
            "SlurmdDebug": "info",
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "MpiDefault": "none",
            "SwitchType": "switch/none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core",
            "GresTypes": gres_types,
            "SlurmdParameters": "config_overrides",
            "ReturnToService": "2",
            "MaxArraySize": str(self.max_array_size),
            "MaxJobCount": str(self.max_job_count),
        }
        if self._jobcomp is not None:
            settings["JobCompType"] = "jobcomp/filetxt"
            settings["JobCompLoc"] = self._jobcomp
        if self.tuned:
            settings.update(TUNED_SETTINGS)
        settings.update(self.extra_settings)
        lines = [f"{k}={v}" for k, v in settings.items()]
        for name, port in zip(self.node_names, node_ports, strict=True):
            lines.append(
                f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} "
                f"CPUs={cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={cpus} ThreadsPerCore=1 "
                f"RealMemory=1024 {gres_node} State=UNKNOWN"
            )
        lines.append(
            f"PartitionName={PARTITION} Nodes={','.join(self.node_names)} Default=YES "
            "MaxTime=INFINITE State=UP"
        )
        conf = self._path("slurm.conf")
        with open(conf, "w", encoding="ascii") as fh:
            fh.write("\n".join(lines) + "\n")
        with open(self._path("gres.conf"), "w", encoding="ascii") as fh:
            fh.write("\n".join(["AutoDetect=off", *gres_lines]) + "\n")
        return conf

    def _start_slurm(self, model: GpuModel) -> None:
        slurmctld = _find_binary("slurmctld")
        slurmd = _find_binary("slurmd")
        if not (slurmctld and slurmd):
            raise BaselineError("slurmctld/slurmd not found")
        # A fresh state folder each attempt (the fallback restarts with another config).
        for sub in ("state", "spool"):
            shutil.rmtree(self._path(sub), ignore_errors=True)
        if self._jobcomp and os.path.exists(self._jobcomp):
            os.unlink(self._jobcomp)
        conf = self._write_config(model)
        self._env = clean_env({"SLURM_CONF": conf}, drop_prefixes=("SLURM_", "SBATCH_", "SQUEUE_"))
        self._env["SLURM_CONF"] = conf
        self._slurmctld = self._spawn("slurmctld", [slurmctld, "-D", "-i", "-f", conf])
        several = len(self.node_names) > 1
        self._slurmds = [
            self._spawn(f"slurmd-{name}" if several else "slurmd",
                        [slurmd, "-D", "-N", name, "-f", conf])
            for name in self.node_names
        ]
        self._wait_node_idle()

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        out = open(self._path(f"{name}.out"), "ab")  # noqa: SIM115 - closed in close()
        self._logs.append(out)
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=self._path("work"),
            start_new_session=True,
        )

    def _diagnostics(self) -> str:
        parts = []
        names = ["slurmctld"] + [label for label, _ in self._slurmd_procs()]
        for name in names:
            parts.append(f"--- {name}.log (tail)\n" + tail_file(self._path(f"{name}.log"), 2000))
            parts.append(f"--- {name}.out (tail)\n" + tail_file(self._path(f"{name}.out"), 800))
        return "\n".join(parts)

    def _check_daemons(self) -> None:
        for name, proc in (("slurmctld", self._slurmctld), *self._slurmd_procs()):
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise BaselineError(f"{name} exited (status {code})\n{self._diagnostics()}")

    def _wait_node_idle(self) -> None:
        names = ",".join(self.node_names)

        def probe() -> bool:
            self._check_daemons()
            res = run_cmd(
                ["sinfo", "-h", "-N", "-n", names, "-o", "%N|%T|%E"],
                env=self._env,
                check=False,
                timeout=15,
            )
            if res.returncode != 0:
                return False
            idle = set()
            for line in res.stdout.splitlines():
                node, state, reason = [*line.strip().split("|", 2), "", ""][:3]
                state = state.rstrip("*~#!%$@^-")
                if state.startswith(("drain", "inval", "fail")):
                    raise BaselineError(f"node {node} is {state}: {reason}\n{self._diagnostics()}")
                if state == "idle":
                    idle.add(node)
            return idle >= set(self.node_names)

        wait_for(
            probe,
            timeout=self.start_timeout,
            what=f"nodes {names} to be idle (sinfo)",
            interval=0.3,
            on_timeout=self._diagnostics,
        )

    def _check_gpu_model(self, model: GpuModel) -> None:
        node = run_cmd(["scontrol", "show", "node", NODE_NAME], env=self._env, timeout=15)
        gres = re.search(r"\bGres=(\S+)", node.stdout)
        if gres is None or f"gpu:{self.gpus}" not in gres.group(1):
            raise BaselineError(f"node does not show gpu:{self.gpus}: {node.stdout.strip()}")
        if model == "shard" and f"shard:{self.slots}" not in gres.group(1):
            raise BaselineError(f"node does not show shard:{self.slots}: {gres.group(1)}")
        run_cmd(
            ["sbatch", "--test-only", *self.job_resource_args(model), "--wrap", "true"],
            env=self._env,
            cwd=self._path("work"),
            timeout=30,
            what=f"sbatch --test-only ({model})",
        )

    def _stop_slurm(self, problems: list[str] | None = None) -> None:
        sink = problems if problems is not None else []
        ctld = self._slurmctld
        began = time.monotonic()
        if ctld is not None and ctld.poll() is None and self._env:
            # Only our private controller hears these: cancel what is left, let steps end.
            def queued() -> list[str] | None:
                res = run_cmd(["squeue", "-h", "-o", "%i"], env=self._env, check=False)
                return None if res.returncode != 0 else res.stdout.split()

            left = queued()
            if left:
                run_cmd(["scancel", "--quiet", *left], env=self._env, check=False, timeout=30)
                try:
                    wait_for(
                        lambda: not queued(),
                        timeout=15,
                        what="cancelled jobs to leave the queue",
                        interval=0.3,
                    )
                except BaselineError as exc:
                    sink.append(str(exc))
            if time.monotonic() - began > 3:
                sink.append(
                    f"cancelling {len(left or [])} leftover jobs took "
                    f"{time.monotonic() - began:.1f}s"
                )
        daemons = [*self._slurmd_procs(), ("slurmctld", self._slurmctld)]
        self._slurmds, self._slurmctld = [], None
        for name, proc in daemons:
            if proc is not None:
                began = time.monotonic()
                msg = stop_process(proc, name=name, grace=15)
                if msg:
                    sink.append(msg)
                elif time.monotonic() - began > 3:
                    sink.append(f"{name} took {time.monotonic() - began:.1f}s to stop")

    # ------------------------------------------------------------------ workload

    def job_resource_args(self, model: GpuModel | None = None) -> list[str]:
        """sbatch arguments for one job's share: a quarter GPU (shard) or one CPU slot."""
        model = model or self.gpu_model
        if model == "shard":
            return ["--ntasks=1", "--cpus-per-task=1", "--gres=shard:1"]
        return ["--ntasks=1", "--cpus-per-task=1"]

    def _queue_count(self) -> int:
        res = run_cmd(["squeue", "-h", "-r", "-o", "%i"], env=self._env, timeout=30)
        return len([ln for ln in res.stdout.splitlines() if ln.strip()])

    def run_workload(
        self,
        n_jobs: int,
        *,
        mode: SubmitMode = "array",
        command: Sequence[str] = ("true",),
        timeout: float | None = None,
        poll_interval: float = 0.02,
        keep_output: bool = False,
        submit_workers: int = 1,
    ) -> BaselineResult:
        """Submit ``n_jobs`` copies of ``command`` and wait until all have completed.

        Time runs from just before the first ``sbatch`` to the moment the last completion is
        seen (jobcomp/filetxt lines, polled every ``poll_interval`` s; squeue if that plugin is
        missing). Raises BaselineError on timeout or when any job did not end COMPLETED.
        """
        if self.folder is None or self.gpu_model is None:
            raise BaselineError("PrivateSlurm is not started (use it as a context manager)")
        if n_jobs < 1:
            raise ValueError("n_jobs must be >= 1")
        if mode == "array" and n_jobs > self.max_array_size - 1:
            raise ValueError(f"n_jobs > MaxArraySize-1 ({self.max_array_size - 1})")
        if n_jobs > self.max_job_count:
            raise ValueError(f"n_jobs > MaxJobCount ({self.max_job_count})")
        if mode not in ("array", "individual"):
            raise ValueError(f"unknown mode {mode!r}")
        self._check_daemons()
        wait_for(
            lambda: self._queue_count() == 0,
            timeout=60,
            what="the queue to be empty before the run",
            interval=0.5,
        )
        if timeout is None:
            timeout = 120.0 + 1.0 * n_jobs
        self._run_counter += 1
        workdir = self._path("work", f"run{self._run_counter}")
        os.makedirs(workdir)
        output = os.path.join(workdir, "%A_%a.out" if mode == "array" else "%j.out")
        base = [
            "sbatch",
            "--parsable",
            "--quiet",
            f"--job-name=rb{self._run_counter}",
            f"--chdir={workdir}",
            f"--output={output if keep_output else '/dev/null'}",
            *self.job_resource_args(),
        ]
        wrap = " ".join(command)
        offset = (
            os.path.getsize(self._jobcomp) if self._jobcomp and os.path.exists(self._jobcomp) else 0
        )
        states: dict[str, int] = {}
        done = 0
        buf = b""

        def read_jobcomp() -> None:
            nonlocal offset, done, buf
            assert self._jobcomp is not None
            try:
                with open(self._jobcomp, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
            except FileNotFoundError:
                return
            offset += len(chunk)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                m = re.search(rb"\bJobState=(\S+)", line)
                if m is None:
                    continue
                state = m.group(1).decode()
                states[state] = states.get(state, 0) + 1
                done += 1

        t0 = time.perf_counter()
        if mode == "array":
            run_cmd(
                [*base, f"--array=0-{n_jobs - 1}", "--wrap", wrap],
                env=self._env,
                cwd=workdir,
                timeout=120,
                what="sbatch --array",
            )
        else:
            argv = [*base, "--wrap", wrap]

            def submit(_: int) -> None:
                run_cmd(argv, env=self._env, cwd=workdir, timeout=120, what="sbatch")

            if submit_workers <= 1:
                for i in range(n_jobs):
                    submit(i)
            else:
                with ThreadPoolExecutor(max_workers=submit_workers) as pool:
                    list(pool.map(submit, range(n_jobs)))
        submit_seconds = time.perf_counter() - t0

        deadline = time.monotonic() + timeout
        last_squeue = 0.0
        while True:
            if self._jobcomp is not None:
                read_jobcomp()
                if done >= n_jobs:
                    break
            else:
                now = time.monotonic()
                if now - last_squeue >= max(poll_interval, 0.2):
                    last_squeue = now
                    if self._queue_count() == 0:
                        done = n_jobs
                        break
            if time.monotonic() > deadline:
                raise BaselineError(
                    f"slurm workload: only {done}/{n_jobs} jobs completed after {timeout:.0f}s "
                    f"(queue still holds {self._queue_count()})\n{self._diagnostics()}"
                )
            if self._slurmctld is None or self._slurmctld.poll() is not None:
                self._check_daemons()
            time.sleep(poll_interval)
        seconds = time.perf_counter() - t0
        failed = sum(v for k, v in states.items() if k != "COMPLETED")
        if failed:
            raise BaselineError(f"slurm workload: {failed} jobs did not complete: {states}")
        result: BaselineResult = {
            "system": "slurm",
            "jobs": n_jobs,
            "seconds": round(seconds, 3),
            "jobs_per_s": round(n_jobs / seconds, 2),
            "mode": mode,
            "gpu_model": self.gpu_model,
            "tuned": self.tuned,
            "slots": self.slots,
            "submit_seconds": round(submit_seconds, 3),
            "completion_probe": "jobcomp" if self._jobcomp else "squeue",
            "failed": failed,
            "notes": list(self.notes),
        }
        return result


def run_slurm_baseline(
    n_jobs: int = 2000,
    *,
    tuned: bool = False,
    mode: SubmitMode = "array",
    gpu_model: Literal["auto", "shard", "cpu-slots"] = "auto",
    keep_output: bool = False,
    submit_workers: int = 1,
    timeout: float | None = None,
) -> BaselineResult:
    """Install/start a private Slurm, run the workload once, stop it; adds setup timings."""
    t0 = time.monotonic()
    with PrivateSlurm(tuned=tuned, gpu_model=gpu_model) as slurm:
        result = slurm.run_workload(
            n_jobs,
            mode=mode,
            keep_output=keep_output,
            submit_workers=submit_workers,
            timeout=timeout,
        )
        pids = slurm.pids
    leftover = [f"{name}:{pid}" for name, pid in pids.items() if pid_alive(pid)]
    result["notes"] = list(slurm.notes)  # includes anything close() had to say
    if leftover:
        result["notes"].append(f"still running after stop: {leftover}")
    result["install_seconds"] = round(slurm.install_seconds, 2)
    result["start_seconds"] = round(slurm.start_seconds, 2)
    result["stop_seconds"] = round(slurm.stop_seconds, 2)
    result["total_seconds"] = round(time.monotonic() - t0, 2)
    return result
