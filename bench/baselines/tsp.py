"""A private task-spooler (Debian 12 package ``task-spooler``, binary ``tsp``) baseline.

The server listens on its own socket (``TS_SOCKET``) in a temporary folder with 32 slots; N
``true`` jobs are queued with ``tsp -n`` (one short-lived client per job, whose forked child
waits for its turn and runs the job). Task-spooler has no GPU notion: 8 GPUs x 0.25 is modelled
as 32 slots (``gpu_model: "slots"``). Near 1,000 queued jobs new clients block (``-B``: exit 2),
so at most ``max_outstanding`` (default 900) jobs are queued or running at once and the rest are
fed in as earlier ones finish.

Usage::

    with PrivateTsp() as ts:
        result = ts.run_workload(2000)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from bench.baselines._common import (
    BaselineError,
    BaselineResult,
    apt_install,
    clean_env,
    pid_alive,
    run_cmd,
    wait_for,
)

APT_PACKAGE = "task-spooler"
#: Debian renames task-spooler's ``ts`` to ``tsp`` (``ts`` is moreutils' timestamp tool).
BINARY_NAMES = ("tsp",)
#: The client exits with this status under ``-B`` when the server's queue is full.
QUEUE_FULL_STATUS = 2


def find_tsp() -> str | None:
    for name in BINARY_NAMES:
        for path in (shutil.which(name), f"/usr/bin/{name}"):
            if path and os.access(path, os.X_OK):
                return path
    return None


def ensure_tsp_installed() -> float:
    """apt-get install task-spooler if ``tsp`` is missing; returns the seconds spent."""
    if find_tsp() is not None:
        return 0.0
    started = time.monotonic()
    apt_install([APT_PACKAGE])
    if find_tsp() is None:
        raise BaselineError(f"installed {APT_PACKAGE} but no `tsp` binary was found")
    return time.monotonic() - started


def _pids_with_env(key: str, value: str, exe: str | None = None) -> list[int]:
    """Pids of processes whose environment has ``key=value`` exactly (running ``exe`` if given).

    Our ``TS_SOCKET`` is a fresh mkdtemp path, so it marks exactly the server, the clients and
    the jobs (which inherit the client's environment) that this instance started.
    """
    wanted = f"{key}={value}".encode()
    real_exe = os.path.realpath(exe) if exe else None
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            if real_exe and os.path.realpath(os.readlink(f"/proc/{pid}/exe")) != real_exe:
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if wanted in fh.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


class PrivateTsp:
    """Context manager: a task-spooler server on a private socket, stopped with ``tsp -K``."""

    def __init__(
        self,
        *,
        slots: int = 32,
        install: bool = True,
        base_dir: str | None = None,
        max_finished: int = 1000,
        start_timeout: float = 30.0,
        keep_folder: bool = False,
    ) -> None:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.slots = slots
        self.install = install
        self.base_dir = base_dir
        self.max_finished = max_finished
        self.start_timeout = start_timeout
        self.keep_folder = keep_folder
        self.folder: str | None = None
        self.socket_path: str | None = None
        self.server_pid: int | None = None
        self.install_seconds = 0.0
        self.start_seconds = 0.0
        self.notes: list[str] = []
        self._tsp = ""
        self._env: dict[str, str] = {}
        self._next_id = 0

    @property
    def env(self) -> dict[str, str]:
        """Environment for ``tsp`` commands aimed at this private server."""
        return dict(self._env)

    def __enter__(self) -> PrivateTsp:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        if self.install:
            self.install_seconds = ensure_tsp_installed()
        tsp = find_tsp()
        if tsp is None:
            raise BaselineError("task-spooler (`tsp`) is not installed")
        self._tsp = tsp
        started = time.monotonic()
        self.folder = tempfile.mkdtemp(prefix="rota-tsp-", dir=self.base_dir)
        self.socket_path = os.path.join(self.folder, "socket")
        self._env = clean_env(
            {
                "TS_SOCKET": self.socket_path,
                "TS_SLOTS": str(self.slots),
                "TS_MAXFINISHED": str(self.max_finished),
                "TMPDIR": self.folder,
            },
            drop_prefixes=("TS_",),
        )
        # The first client starts the server (it forks into the background); -S sets slots.
        self._tsp_cmd(["-S", str(self.slots)], what="tsp -S (start server)")
        got = self._tsp_cmd(["-S"], what="tsp -S").stdout.strip()
        if got != str(self.slots):
            raise BaselineError(f"tsp server reports {got!r} slots, wanted {self.slots}")
        # Right now the only tsp process on our socket is the server: record its pid.
        pids = wait_for(
            lambda: _pids_with_env("TS_SOCKET", self.socket_path or "", self._tsp) or None,
            timeout=self.start_timeout,
            what="the tsp server process",
            interval=0.1,
        )
        if len(pids) != 1:
            self.notes.append(f"expected one tsp server process, found {pids}")
        self.server_pid = min(pids)
        self.start_seconds = time.monotonic() - started

    def close(self) -> None:
        """Stop our server (``tsp -K`` on our socket), then any of our clients; remove folder."""
        if self.socket_path and self._tsp:
            if os.path.exists(self.socket_path):
                res = self._tsp_cmd(["-K"], check=False, timeout=15)
                if res.returncode != 0:
                    self.notes.append(f"tsp -K: exit {res.returncode}: {res.stderr.strip()}")
            server = self.server_pid
            if server is not None:
                try:
                    wait_for(
                        lambda: not pid_alive(server),
                        timeout=10,
                        what=f"tsp server pid {server} to exit",
                        interval=0.1,
                    )
                except BaselineError:
                    self.notes.append(f"tsp server pid {server} survived tsp -K")
                    self._kill(server, "server")
            # After an aborted run, clients still wait and jobs still run; all carry our socket.
            # Jobs first (they are not tsp), then the clients that started them.
            left = _pids_with_env("TS_SOCKET", self.socket_path)
            clients = set(_pids_with_env("TS_SOCKET", self.socket_path, self._tsp))
            for pid in sorted(left, key=lambda p: p in clients):
                self._kill(pid, "client" if pid in clients else "job")
            if left:
                self.notes.append(f"stopped {len(left)} leftover tsp clients/jobs by pid")
        if self.folder and not self.keep_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def _kill(self, pid: int, what: str) -> None:
        """SIGTERM one of our processes by pid, SIGKILL it if it is still there after 5 s."""
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                self.notes.append(f"tsp {what} pid {pid} needed SIGKILL")
        except ProcessLookupError:
            pass

    def _tsp_cmd(
        self,
        args: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 30.0,
        what: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return run_cmd(
            [self._tsp, *args],
            env=self._env,
            cwd=self.folder,
            timeout=timeout,
            check=check,
            what=what or f"tsp {' '.join(args)}",
        )

    def list_jobs(self) -> list[tuple[int, str, int | None]]:
        """``tsp -l`` parsed into (id, state, exit level or None while not finished)."""
        out = self._tsp_cmd(["-l"], timeout=30).stdout
        jobs = []
        for line in out.splitlines()[1:]:
            parts = line.split()
            if len(parts) < 2 or not parts[0].isdigit():
                continue
            level: int | None = None
            if parts[1] == "finished" and len(parts) >= 4:
                try:
                    level = int(parts[3])
                except ValueError:
                    level = -1
            jobs.append((int(parts[0]), parts[1], level))
        return jobs

    def _submit(self, command: Sequence[str], keep_output: bool) -> bool:
        """Queue one job; False when the server's queue is full (``-B`` exit 2)."""
        argv = [self._tsp, "-B"] + ([] if keep_output else ["-n"]) + list(command)
        # Never capture stdout: with -n the forked client keeps it open until the job ends.
        try:
            proc = subprocess.run(
                argv,
                env=self._env,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BaselineError("tsp submit: timed out after 30s") from exc
        if proc.returncode == QUEUE_FULL_STATUS:
            return False
        if proc.returncode != 0:
            raise BaselineError(f"tsp submit: exit status {proc.returncode}")
        return True

    def run_workload(
        self,
        n_jobs: int,
        *,
        command: Sequence[str] = ("true",),
        timeout: float | None = None,
        poll_interval: float = 0.05,
        max_outstanding: int = 900,
        keep_output: bool = False,
        submit_workers: int = 1,
    ) -> BaselineResult:
        """Queue ``n_jobs`` copies of ``command`` (at most ``max_outstanding`` unfinished at
        once) and wait for all. Time runs from the first submit until ``tsp -l`` shows the last
        job finished (polled every ``poll_interval`` s). Raises BaselineError on timeout or when
        any job exits non-zero."""
        if self.folder is None:
            raise BaselineError("PrivateTsp is not started (use it as a context manager)")
        if n_jobs < 1:
            raise ValueError("n_jobs must be >= 1")
        if not 1 <= max_outstanding < 1000:
            raise ValueError("max_outstanding must be in 1..999 (tsp blocks near 1000)")
        if self.list_jobs():
            self._tsp_cmd(["-C"], what="tsp -C")  # clear finished jobs of an earlier run
            if any(state != "finished" for _, state, _ in self.list_jobs()):
                raise BaselineError("the tsp queue is not empty before the run")
        if timeout is None:
            timeout = 120.0 + 0.5 * n_jobs
        first_id = self._next_id
        finished: set[int] = set()
        failed: set[int] = set()
        submitted = 0
        full_waits = 0
        submit_done_at: float | None = None
        pool = ThreadPoolExecutor(max_workers=submit_workers) if submit_workers > 1 else None

        def poll() -> None:
            for job_id, state, level in self.list_jobs():
                if state == "finished" and job_id >= first_id and job_id not in finished:
                    finished.add(job_id)
                    if level != 0:
                        failed.add(job_id)

        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout
        try:
            while True:
                slice_end = time.monotonic() + poll_interval
                while submitted < n_jobs and time.monotonic() < slice_end:
                    room = min(max_outstanding - (submitted - len(finished)), n_jobs - submitted)
                    if room <= 0:
                        break
                    batch = min(room, submit_workers * 4 if pool else 1)
                    if pool is None:
                        oks = [self._submit(command, keep_output)]
                    else:
                        oks = list(
                            pool.map(lambda _: self._submit(command, keep_output), range(batch))
                        )
                    submitted += sum(oks)
                    if not all(oks):
                        full_waits += 1
                        break
                    if submitted == n_jobs:
                        submit_done_at = time.perf_counter()
                poll()
                if len(finished) >= n_jobs:
                    break
                if time.monotonic() > deadline:
                    raise BaselineError(
                        f"tsp workload: only {len(finished)}/{n_jobs} jobs finished after "
                        f"{timeout:.0f}s ({submitted} submitted)"
                    )
                if submitted >= n_jobs or submitted - len(finished) >= max_outstanding:
                    time.sleep(poll_interval)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        seconds = time.perf_counter() - t0
        self._next_id = first_id + n_jobs
        if failed:
            raise BaselineError(f"tsp workload: {len(failed)} jobs exited non-zero")
        notes = list(self.notes)
        if full_waits:
            notes.append(f"server queue was full {full_waits} times (tsp -B exit 2)")
        result: BaselineResult = {
            "system": "tsp",
            "jobs": n_jobs,
            "seconds": round(seconds, 3),
            "jobs_per_s": round(n_jobs / seconds, 2),
            "mode": "individual",
            "gpu_model": "slots",
            "tuned": False,
            "slots": self.slots,
            "submit_seconds": round((submit_done_at or time.perf_counter()) - t0, 3),
            "completion_probe": "tsp -l",
            "failed": len(failed),
            "notes": notes,
        }
        return result


def run_tsp_baseline(
    n_jobs: int = 2000,
    *,
    slots: int = 32,
    keep_output: bool = False,
    submit_workers: int = 1,
    timeout: float | None = None,
    keep_files: bool = False,
) -> BaselineResult:
    """Install/start a private tsp server, run the workload once, stop it; adds timings.

    ``keep_files`` leaves the run's folder (its outputs) in place for the caller to remove.
    """
    t0 = time.monotonic()
    with PrivateTsp(slots=slots, keep_folder=keep_files) as ts:
        result = ts.run_workload(
            n_jobs, keep_output=keep_output, submit_workers=submit_workers, timeout=timeout
        )
        install_s, start_s = ts.install_seconds, ts.start_seconds
        server = ts.server_pid
    if server is not None and pid_alive(server):
        result.setdefault("notes", []).append(f"tsp server pid {server} still running")
    result["install_seconds"] = round(install_s, 2)
    result["start_seconds"] = round(start_s, 2)
    result["total_seconds"] = round(time.monotonic() - t0, 2)
    return result
