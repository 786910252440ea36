"""The shim: a tiny process between the daemon and a job, so jobs outlive the daemon.

Run as ``python -m rota.backends.shim --status FILE [--tee LOG] -- ARGV...``, or with
``--job-file F`` in place of ``-- ARGV`` (see ``_read_job_file``).

The backend starts the shim as the leader of a new process group (``start_new_session``,
or a tmux/screen pane, which is a session leader too). The shim starts ARGV as a child in
that same group, so one ``killpg(shim_pid, sig)`` reaches the shim, the job and the job's
own children. The shim records the pids at start and the real exit status at the end in
a JSON status file, written atomically, which a restarted daemon reads to adopt the job or
to learn how it ended while the daemon was down.

Standard library only, and nothing heavy imported: it starts once per job, and the
daemon's throughput of short jobs depends on how fast it starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

#: Signals the shim survives: the job, a member of the same group, gets them too and
#: decides itself whether to stop; the shim stays to record how it ended.
_SURVIVE = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

#: Variables that belong to the terminal a session backend gives the job; kept from the
#: shim's own environment when ``--env-file`` replaces the rest.
TERMINAL_VARS = ("TERM", "TMUX", "TMUX_PANE", "STY", "WINDOW", "COLUMNS", "LINES")


def _survive(_signum: int, _frame: object) -> None:
    """Do nothing: the child decides whether to stop; the shim stays to record how it did.

    A handler rather than SIG_IGN, because an ignored disposition would be inherited by the
    job across exec, while a handled one is reset to the default there.
    """


def write_status(path: str, record: dict[str, Any], append: bool = False) -> None:
    """Write the record so a reader sees the old file or the new one, never half of one;
    or, with ``append``, as one more JSON line in one write (``common.read_status`` merges
    the lines), for a shim that may write the file but not its folder."""
    if append:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            _write_all(fd, (json.dumps(record) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked (pipes, ptys); loop until all is out."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _Tee:
    """Copies the child's output byte for byte to the shim's stdout and to the log file.

    A dead terminal (the tmux/screen session closed) must not lose the log, so errors on
    stdout are swallowed after the first and the log keeps being written.
    """

    def __init__(self, log_path: str) -> None:
        self.log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.out_ok = True

    def write(self, data: bytes) -> None:
        if self.out_ok:
            try:
                _write_all(1, data)
            except OSError:
                self.out_ok = False
        with contextlib.suppress(OSError):
            _write_all(self.log_fd, data)

    def pump(self, fd: int, proc: subprocess.Popen[bytes]) -> None:
        """Copy until EOF, or until the child is gone and the pipe is drained.

        Waiting for EOF alone would hang when the job left a background process holding
        the pipe open, so once the child has exited only what is already buffered is read.
        """
        while True:
            try:
                ready, _, _ = select.select([fd], [], [], 0.2)
            except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for safety
                continue
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    return
                self.write(data)
            elif proc.poll() is not None:
                os.set_blocking(fd, False)
                while True:
                    try:
                        data = os.read(fd, 65536)
                    except BlockingIOError:
                        return
                    if not data:
                        return
                    self.write(data)

    def close(self) -> None:
        os.close(self.log_fd)


def _read_job_file(path: str) -> dict[str, Any]:
    """Read the job's argv, environment and cwd from the backend's file, then delete it.

    Session backends pass the job this way instead of on the tmux/screen command line:
    tmux re-parses its arguments (an argument ending in ';' splits the command, and what
    follows runs as a tmux command, ``run-shell`` included), and a file keeps secret
    environment values off every process's command line.
    """
    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    with contextlib.suppress(OSError):
        os.unlink(path)
    if not isinstance(job, dict) or not isinstance(job.get("argv"), list) or not job["argv"]:
        raise ValueError("it has no argv list")
    env = job.get("env")
    if env is not None:
        env = dict(env)
        for k in TERMINAL_VARS:  # the pane's terminal, not the daemon's
            if k in os.environ and k not in env:
                env[k] = os.environ[k]
        job["env"] = env
    return job


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rota.backends.shim",
                                description="Run a job and record its pid and exit status.")
    p.add_argument("--status", required=True, help="JSON status file to write")
    p.add_argument("--tee", default=None, help="copy output to stdout and append it here")
    p.add_argument("--append", action="store_true",
                   help="append records to the status file (it exists) instead of replacing it")
    p.add_argument("--job-file", default=None,
                   help='JSON {"argv": [...], "env": {...}, "cwd": "..."} instead of ARGV')
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    ns = p.parse_args(argv)
    if ns.argv and ns.argv[0] == "--":
        ns.argv = ns.argv[1:]
    if bool(ns.argv) == bool(ns.job_file):
        p.error("give the program either after -- or in --job-file, not both or neither")
    return ns


def _exit_code(record: dict[str, Any]) -> int:
    if record["exit_code"] is not None:
        return int(record["exit_code"])
    return 128 + int(record["signal"])


class _CannotStart(Exception):
    """The job could not be started: the shim's exit code, and why."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code, self.why = code, why


def _open_tee(path: str) -> _Tee | None:
    try:
        return _Tee(path)
    except OSError as e:  # still run the job; its output goes to the terminal only
        _write_all(2, f"rota: cannot open the log {path!r}: {e.strerror}\n".encode())
        return None


def _job(ns: argparse.Namespace) -> tuple[list[str], dict[str, str] | None]:
    """The job's argv and environment (None: the shim's own), in its working directory."""
    job_argv, env, cwd = ns.argv, None, None
    if ns.job_file:
        try:
            job = _read_job_file(ns.job_file)
        except (OSError, ValueError, TypeError) as e:
            raise _CannotStart(126, f"cannot read the job file {ns.job_file!r}: {e}") from e
        job_argv, env, cwd = [str(a) for a in job["argv"]], job.get("env"), job.get("cwd")
    if cwd is not None:
        try:
            os.chdir(cwd)
        except OSError as e:
            raise _CannotStart(
                126, f"cannot enter the working directory {cwd!r}: {e.strerror}") from e
    return job_argv, env


def _spawn(job_argv: list[str], env: dict[str, str] | None,
           tee: _Tee | None) -> subprocess.Popen[bytes]:
    out: int | None = subprocess.PIPE if tee else None
    err: int | None = subprocess.STDOUT if tee else None
    try:
        # stdin is inherited: a person attached to a tmux/screen session may type into it
        return subprocess.Popen(job_argv, stdout=out, stderr=err, env=env, close_fds=True)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in an argument
        code = 127 if isinstance(e, FileNotFoundError) else 126
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise _CannotStart(code, f"cannot run {job_argv[0]!r}: {why}") from e


def _failed(status: str, record: dict[str, Any], tee: _Tee | None, e: _CannotStart,
            append: bool) -> int:
    """Say why in the log (or on stderr) and record it as the job's end."""
    data = f"rota: {e.why}\n".encode(errors="replace")
    if tee:
        tee.write(data)
    else:
        with contextlib.suppress(OSError):
            _write_all(2, data)
    record.update(exit_code=e.code, signal=None, ended_at=time.time())
    write_status(status, record, append)
    return e.code


def _wait(proc: subprocess.Popen[bytes], tee: _Tee | None) -> int:
    if tee and proc.stdout is not None:
        tee.pump(proc.stdout.fileno(), proc)
        proc.stdout.close()
    return proc.wait()  # signals interrupt it, PEP 475 resumes it


def run(argv: list[str]) -> int:
    """Run the job described by the shim's command line; return the shim's exit code."""
    for sig in _SURVIVE:
        signal.signal(sig, _survive)
    ns = _parse(argv)
    record: dict[str, Any] = {"shim_pid": os.getpid(), "pgid": os.getpgrp(),
                              "child_pid": None, "started_at": time.time()}
    tee = _open_tee(ns.tee) if ns.tee else None
    try:
        try:
            proc = _spawn(*_job(ns), tee)
        except _CannotStart as e:
            return _failed(ns.status, record, tee, e, ns.append)
        record["child_pid"] = proc.pid
        write_status(ns.status, record, ns.append)
        rc = _wait(proc, tee)
    finally:
        if tee:
            tee.close()
    if rc < 0:
        record.update(exit_code=None, signal=-rc)
    else:
        record.update(exit_code=rc, signal=None)
    record["ended_at"] = time.time()
    write_status(ns.status, record, ns.append)
    return _exit_code(record)


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
