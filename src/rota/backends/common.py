"""Helpers shared by the process backends (local, tmux, screen): status files, pids, argv.

They all run a job the same way, through a shim, and differ only in what holds the shim
(nothing, a tmux pane, a screen window); the helpers they share live here, and what they
do alike as backends in ``rota.backends.process``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from rota.backends.base import ExitInfo, LaunchOutcome, LaunchRequest
from rota.backends.shell_shim import MARK, status_from_exit_status
from rota.backends.shim import TERMINAL_VARS
from rota.errors import BackendError

#: A process whose start time is later than this after the shim's recorded start is
#: another process that got the recycled pid, not our shim.
_PID_REUSE_SLACK_S = 2.0
#: a status file holds a few JSON lines; past this it is not the shim's (its account can
#: write it) and is not read further
MAX_STATUS_BYTES = 1 << 16


def read_status(path: str | Path) -> dict[str, Any] | None:
    """The attempt's status file, or None while there is none (not written yet, or gone).

    The Python shim replaces one JSON object atomically; the shell shim (and a runner of
    protocol 2 or older) appends JSON lines (start, then end), merged in order. A line that
    does not parse (a disk that filled up mid-write) is skipped.
    """
    try:  # never through a link: a tmux shim run as another account writes it (root reads)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None  # a fifo or a device its account put there: nothing to believe
            text = f.read(MAX_STATUS_BYTES).decode("utf-8", errors="replace")
            mtime = st.st_mtime
    except OSError:
        return None
    record: dict[str, Any] = {}
    for line in text.splitlines():
        try:
            part = json.loads(line)
        except ValueError:
            continue
        if isinstance(part, dict):
            record.update(part)
    return status_record(record, mtime)


def status_record(record: dict[str, Any] | None,
                  mtime: float | None = None) -> dict[str, Any] | None:
    """A record in the Python shim's terms: an ``exit_status`` (the shell shim's, the
    runner's) becomes ``exit_code``/``signal``; with no ``ended_at`` of its own, its end
    time is the file's modification time, since the end line is the file's last write."""
    if not record:
        return None
    if "exit_status" in record and "exit_code" not in record:
        code, sig = status_from_exit_status(int(record["exit_status"]))
        record.update(exit_code=code, signal=sig)
        if record.get("ended_at") is None:
            record["ended_at"] = mtime
    return record


def has_ended(status: dict[str, Any] | None) -> bool:
    """Whether the shim wrote its end record (it always sets ``ended_at`` then)."""
    return status is not None and status.get("ended_at") is not None


def exit_info_from_status(status: dict[str, Any] | None) -> ExitInfo | None:
    """ExitInfo from an end record; None when the record says the job has not ended."""
    if status is None or status.get("ended_at") is None:
        return None
    code, sig = status.get("exit_code"), status.get("signal")
    return ExitInfo(exit_code=None if code is None else int(code),
                    signal=None if sig is None else int(sig),
                    ended_at=float(status["ended_at"]))


#: How a job ended when its shim died without writing an end record: SIGKILL (OOM killer,
#: ``kill -9`` of the group, a reboot) is the only way that happens.
KILLED = ExitInfo(exit_code=None, signal=int(signal.SIGKILL), ended_at=None)


def pid_alive(pid: int, started_at: float | None = None) -> bool:
    """Whether ``pid`` is a live process (zombies count as dead: they have finished).

    With ``started_at`` (the shim's recorded start), a process created clearly later is a
    stranger that reused the pid after the shim died (likely after a long daemon outage).
    """
    if pid <= 0:
        return False
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        if started_at is not None and p.create_time() > started_at + _PID_REUSE_SLACK_S:
            return False
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True
    return True


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by the shim; a group already gone is fine.

    SIGKILL also reaches the shim's descendants that left the group: launchers such as
    torchrun start each worker in a session of its own and pass signals on themselves,
    so killing the group alone would orphan the workers, still holding their GPUs. (The
    stop signal goes to the group only: passing it on is the launcher's business.)
    """
    if pid <= 0:  # killpg(0) would signal the daemon's own group
        raise BackendError(f"refusing to signal process group {pid}")
    strays = _left_the_group(pid) if sig == signal.SIGKILL else []
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError as e:
        raise BackendError(f"not allowed to signal process group {pid}: {e}") from e
    for p in strays:
        with contextlib.suppress(psutil.Error):
            p.kill()  # psutil checks the pid still names the same process


def _left_the_group(pid: int) -> list[psutil.Process]:
    """Descendants of ``pid`` in another process group (found before anything is killed:
    once their parent is gone they are the init process's and cannot be told apart)."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in kids:
        with contextlib.suppress(OSError):
            if os.getpgid(p.pid) != pid:
                out.append(p)
    return out


def reap(pid: int) -> int | None:
    """Collect a finished child of this process (the local backend's shims) if there is one.

    Returns its exit code as ``subprocess`` reports it (negative: killed by that signal),
    or None when it still runs or is not our child (tmux, screen, an adopted job).
    """
    if pid <= 0:  # no process of its own (a container that ended before its pid was read):
        return None  # waitpid(0) would reap any child of the daemon's process group
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if got == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def conda_exe() -> str | None:
    """The conda executable: $CONDA_EXE (set by ``conda activate``), else conda on PATH."""
    exe = os.environ.get("CONDA_EXE")
    if exe and os.access(exe, os.X_OK):
        return exe
    return shutil.which("conda")


def build_job_argv(req: LaunchRequest) -> list[str]:
    """The argv the shim runs: the job's own, wrapped in ``/bin/sh -c`` and conda if asked.

    A shell appears only for ``shell=True`` jobs, whose script is the user's own shell
    text; extra argv items after the script become its positional parameters ($1...).
    """
    if not req.argv:
        raise BackendError(f"job {req.job_id}: empty command")
    if req.shell:
        argv = ["/bin/sh", "-c", req.argv[0]]
        if len(req.argv) > 1:
            argv += ["sh", *req.argv[1:]]
    else:
        argv = list(req.argv)
    if req.conda:
        exe = conda_exe()
        if exe is None:
            raise BackendError(f"conda environment {req.conda!r} requested but conda is not "
                               "installed on this machine")
        argv = [exe, "run", "-n", req.conda, "--no-capture-output", *argv]
    return argv


def shim_argv(req: LaunchRequest, tee: bool, job_file: Path | None = None) -> list[str]:
    """The full argv a backend starts: the shim, its options, then the job's argv.

    With ``job_file`` (see ``write_job_file``) the job's argv stays out of this argv, which
    then holds only Rota's own values: the interpreter, the module and three paths. A shim
    run as another account appends to a status file made its own (``hand_over``): it may not
    create files in the daemon's status folder.
    """
    argv = [sys.executable, "-m", "rota.backends.shim", "--status", str(req.status_path)]
    if req.run_as is not None:
        argv.append("--append")
    if tee:
        argv += ["--tee", str(req.log_path)]
    if job_file is not None:
        return [*argv, "--job-file", str(job_file)]
    return [*argv, "--", *build_job_argv(req)]


def job_env(req: LaunchRequest) -> dict[str, str]:
    """The job's environment: the daemon's, with the job's variables on top; for a job run
    as another account, a login's of that account instead of the daemon's."""
    base = os.environ if req.run_as is None else req.run_as.login_env()
    return {**base, **req.env}


def job_file_path(req: LaunchRequest) -> Path:
    return req.status_path.with_name(req.status_path.name + ".job.json")


def write_job_file(req: LaunchRequest) -> Path:
    """Write the job's argv, environment and cwd for the shim to read (and delete) at start.

    Mode 0600 from creation: the environment may hold secrets. The terminal's variables
    (TERM, TMUX, STY...) are left out unless the job sets them, so a job in a tmux/screen
    pane sees that pane's terminal, not the one the daemon was started from.
    """
    env = job_env(req)
    for k in TERMINAL_VARS:
        if k not in req.env:
            env.pop(k, None)
    path = job_file_path(req)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    if req.run_as is not None:  # its shim reads it as that account
        os.fchown(fd, req.run_as.uid, req.run_as.gid)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"argv": build_job_argv(req), "env": env,
                   "cwd": _cwd(req)}, f)
    return path


#: variables naming files next to the status file that the job itself writes
JOB_WRITES = ("ROTA_EVENTS_FILE",)


def hand_over(req: LaunchRequest, *also: Path) -> None:
    """Make a run-as job's own files its account's (0600) before it starts: its log, the
    files it writes (``JOB_WRITES``) and ``also`` (what holds it writes: a status file). Their
    folders become 0711, so the job reaches them by name without listing anyone's."""
    ra = req.run_as
    if ra is None:
        return
    paths = [req.log_path, *also, *(Path(req.env[v]) for v in JOB_WRITES if req.env.get(v))]
    for path in paths:
        os.chmod(path.parent, 0o711)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            os.fchown(fd, ra.uid, ra.gid)
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)


def _cwd(req: LaunchRequest) -> str:
    """The job's working directory: its own, else the daemon's, or its account's home when
    it runs as another (the daemon's may be closed to it)."""
    if req.cwd:
        return os.path.abspath(req.cwd)
    return os.getcwd() if req.run_as is None else req.run_as.home


def check_request(req: LaunchRequest) -> None:
    """Checks every process backend makes before launching: cwd and conda."""
    if req.cwd is not None and not os.path.isdir(req.cwd):
        what = "does not exist" if not os.path.exists(req.cwd) else "is not a directory"
        raise BackendError(f"job {req.job_id}: working directory {req.cwd!r} {what}")
    build_job_argv(req)  # raises when conda is asked for and missing


def append_log_header(req: LaunchRequest) -> None:
    """Write the request's header line to the log (backends whose shim does not)."""
    if req.log_header:
        with open(req.log_path, "ab") as f:
            f.write(f"{req.log_header}\n".encode())


def prepare_paths(req: LaunchRequest) -> None:
    """Create the log and status directories, and drop a stale status file of this attempt.

    A leftover status file would make a fresh launch look finished (or give the session
    backends a wrong pid) before the new shim overwrites it.
    """
    req.log_path.parent.mkdir(parents=True, exist_ok=True)
    req.status_path.parent.mkdir(parents=True, exist_ok=True)
    req.status_path.unlink(missing_ok=True)


def is_shim_of(cmdline: list[str], status_path: str) -> bool:
    """Whether a process's argv is one of Rota's shims writing ``status_path``."""
    return status_path in cmdline and ("rota.backends.shim" in cmdline or MARK in cmdline)


def launch_in_order(reqs: list[LaunchRequest], launch_one: Callable[[LaunchRequest],
                    LaunchOutcome], done: Callable[[int, LaunchOutcome], None]) -> None:
    """``launch_later`` for a backend whose launch waits: one worker thread launches the
    requests in order, each outcome posted to the running event loop as soon as it is
    known."""
    loop = asyncio.get_running_loop()

    def work() -> None:
        for i, req in enumerate(reqs):
            loop.call_soon_threadsafe(done, i, launch_one(req))

    loop.run_in_executor(None, work)

