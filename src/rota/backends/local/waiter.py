"""The waiter: a process forked by the local runner for a burst of launches, which starts
those jobs, waits for each one and records its end, and lives exactly as long as they do.

Why: only a process's parent learns its exit status. With the runner as every job's parent,
a SIGKILL of the runner *and* its keeper (as the OOM killer may) left the running jobs to
init, their ends unrecorded, and the daemon ran each of them again. The waiter is the jobs'
parent instead (as conmon is for Podman's containers, slurmstepd for a Slurm step): it is
in a session of its own and holds nothing of the runner's, so it outlives the runner and
the keeper and writes each end to the journal itself, then to the pipe the daemon watches
the job by (its write end held by the waiter alone: a runner's death does not close it).

Why a waiter per burst and not per job: forking the runner (a Python process) costs this
machine's kernel about 0.4 ms in the runner and 1.2 ms in the child (page tables, faults
of a 15 MB interpreter), more than the trivial job itself; the runner takes in every
launch already waiting in its socket and forks one waiter for them, so jobs started one at
a time get a waiter each, and a pass that starts tens of jobs pays for one fork.

Protocol with the runner (its fork: every value is in memory already): the waiter waits
for a go-ahead byte, sent once the keeper has been told of it (``keeper.intent``); without
one (its runner died first) it starts nothing. Then, per job: enter the working directory
(as the job's account, for a job that has one), start the job, journal its start, tell the
keeper (``keeper.started``), write ``PID STARTED_AT`` to the runner; then ``keeper.done``.
At each end: the journal, the keeper (``keeper.ended``), the daemon's pipe, the runner's
ends pipe (``PID LINE``: for the daemons that asked the runner to watch the job), and only
then is the job reaped, so its pid is not reused before its end is recorded.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import shutil
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

from rota.backends.local.keeper import done, ended, exit_status_of, started

_DEVNULL_IN = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
#: Python ignores SIGPIPE (and the runner HUP and INT); an ignored signal stays ignored
#: across exec, so the job gets the defaults back.
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGHUP, signal.SIGINT, signal.SIGXFSZ)


@dataclass
class Start:
    """One job of a burst, prepared by the runner."""

    key: str  # the attempt's status path: its name in the journal
    segment: str  # the journal segment its start and end go to
    journal: int  # that segment, opened O_APPEND
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    log: int
    account: dict[str, Any] | None  # the account it runs as (a root runner)
    watch: int  # the write end of the daemon's pipe
    pid: int = 0


@dataclass
class Holder:
    """What the waiter's records name as holding the job: the keeper (pid and start)."""

    pid: int
    started: float


def run(starts: list[Start], go: int, pids: int, keeper: socket.socket, ends: int,
        holder: Holder) -> NoReturn:
    """The waiter's whole life, in the runner's fresh fork."""
    code = 0
    try:
        _keep_only([go, pids, keeper.fileno(), ends, *[s.log for s in starts],
                    *[s.journal for s in starts], *[s.watch for s in starts]])
        if not os.read(go, 1):
            os._exit(0)  # the runner died before it could tell the keeper: start nothing
        os.close(go)
        os.setsid()  # a signal to the runner's group is not for the waiter
        for s in starts:
            _start(s, keeper, holder)
            _write(pids, f"{s.pid} {time.time()}\n".encode())
            os.close(s.log)
        _tell(keeper, done(os.getpid()))
        os.close(pids)
        _wait(starts, keeper, ends)
    except BaseException:  # a waiter never returns into the runner's code
        traceback.print_exc()
        code = 1
    os._exit(code)


def _keep_only(fds: list[int]) -> None:
    """Close every inherited descriptor but these (and stdio): a waiter holding the
    runner's sockets or other jobs' pipes would keep them open after the runner's death."""
    low = 3
    for fd in sorted(set(fds)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 1 << 20)


def _start(s: Start, keeper: socket.socket, holder: Holder) -> None:
    try:
        s.pid = _spawn(s)
    except OSError as e:
        # as a shell says it: in the log, and an exit status of 127 (not found) or 126
        # (cannot run), from a stand-in process, so the job ends as any other
        _write(s.log, f"rota: {e.strerror or e}\n".encode())
        code = 127 if e.errno == errno.ENOENT and "command not found" in str(e) else 126
        s.pid = os.posix_spawn("/bin/sh", ["sh", "-c", f"exit {code}"], s.env, setsid=True)
    _record(s, {"key": s.key, "shim_pid": s.pid, "pgid": s.pid, "runner": holder.pid,
                "runner_started": holder.started, "waiter": os.getpid()})
    _tell(keeper, started(s.pid, s.key, s.segment))


def _spawn(s: Start) -> int:
    """The job, in its working directory, entered with its account's rights."""
    if s.cwd is not None:
        _enter(s.cwd, s.account)
    prog = s.argv[0]
    if "/" not in prog:
        found = shutil.which(prog, path=s.env.get("PATH", os.defpath))
    else:
        found = prog if os.path.exists(prog) else None
    if found is None:
        raise OSError(errno.ENOENT, f"cannot run '{prog}': command not found")
    if s.account is not None:
        return _spawn_as(s.account, s.argv, found, s.env, s.log)
    try:
        return os.posix_spawn(found, s.argv, s.env, setsid=True, setsigmask=(),
                              setsigdef=DEFAULT_SIGNALS, file_actions=[
                                  _DEVNULL_IN, (os.POSIX_SPAWN_DUP2, s.log, 1),
                                  (os.POSIX_SPAWN_DUP2, s.log, 2)])
    except OSError as e:
        raise OSError(e.errno, f"cannot run '{prog}': {e.strerror}") from None


def _enter(cwd: str, account: dict[str, Any] | None) -> None:
    """chdir, checked as the account would be (the job inherits the waiter's directory):
    a folder the account may not enter is refused, even to a root runner."""
    try:
        if account is None:
            os.chdir(cwd)
        else:
            from rota.storage.owner_files import Owner, OwnerFiles  # imported by the runner

            owner = Owner(account["user"], account["uid"], account["gid"],
                          tuple(account["groups"]))
            OwnerFiles(owner).run(os.chdir, cwd)
    except OSError as e:
        who = f" (as {account['user']})" if account is not None else ""
        raise OSError(e.errno, f"cannot enter the working directory '{cwd}': "
                               f"{e.strerror}{who}") from None


def _spawn_as(account: dict[str, Any], argv: list[str], prog: str, env: dict[str, str],
              log: int) -> int:
    """fork + exec as the account: groups, gid, uid set before exec, umask 077, in a session
    of its own, output to the log (posix_spawn cannot switch users). The waiter reaps it by
    pid: the Popen object is told it is done so that subprocess never does."""
    import subprocess  # imported by the runner before the fork

    try:
        proc = subprocess.Popen(argv, executable=prog, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True,
                                user=account["uid"], group=account["gid"],
                                extra_groups=account["groups"], umask=0o077, close_fds=True,
                                restore_signals=True, preexec_fn=_default_signals)
    except OSError as e:
        raise OSError(e.errno, f"cannot run '{argv[0]}' as {account['user']}: "
                               f"{e.strerror}") from None
    proc.returncode = 0  # never polled: the waiter's waitid sees its end
    return proc.pid


def _default_signals() -> None:
    for sig in DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def _wait(starts: list[Start], keeper: socket.socket, ends: int) -> None:
    """Each job's end, recorded before it is reaped; returns once every one has ended.
    The jobs are this process's only children (their own orphans go to the keeper)."""
    left = {s.pid: s for s in starts}
    while left:
        try:
            res = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            return
        if res is None:
            continue
        s = left.pop(res.si_pid, None)
        if s is not None:
            line = _record(s, {"key": s.key, "shim_pid": s.pid,
                               "exit_status": exit_status_of(res), "ended_at": time.time()})
            _tell(keeper, ended(s.pid))
            _write(s.watch, line)
            os.close(s.watch)
            _write(ends, f"{s.pid} ".encode() + line)
        os.waitpid(res.si_pid, 0)


def _record(s: Start, record: dict[str, Any]) -> bytes:
    """Into the job's journal segment; returns the line."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    try:
        os.write(s.journal, line)
    except OSError as e:  # a restarted daemon will not find it: the job is requeued
        print(f"rota waiter: job {s.pid}: cannot record it: {e}", file=sys.stderr)
    return line


def _write(fd: int, data: bytes) -> None:
    """One write; a reader gone (a daemon, a runner) or a full disk loses this copy only."""
    with contextlib.suppress(OSError):
        os.write(fd, data)


def _tell(keeper: socket.socket, msg: bytes) -> None:
    """To the keeper (its socket is non-blocking: wait for room); a keeper gone hears
    nothing."""
    while True:
        try:
            keeper.send(msg)
            return
        except BlockingIOError:
            select.select([], [keeper], [], 1.0)
        except OSError:
            return
