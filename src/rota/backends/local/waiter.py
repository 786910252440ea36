"""The waiter: a process forked by the local runner that starts the jobs handed to it, waits
for each one and records its end, and lives exactly as long as the jobs it holds.

Why: only a process's parent learns its exit status. With the runner as every job's parent,
a SIGKILL of the runner *and* its keeper (as the OOM killer may) left the running jobs to
init, their ends unrecorded, and the daemon ran each of them again. The waiter is the jobs'
parent instead (as conmon is for Podman's containers, slurmstepd for a Slurm step): it is
in a session of its own and holds nothing of the runner's, so it outlives the runner and
the keeper and writes each end to the journal itself, then to the pipe the daemon watches
the job by (its write end held by the waiter alone: a runner's death does not close it).

Why one waiter for many bursts: forking the runner (a 15 MB Python process) costs about
0.75 ms of wall time on a 2-core machine, more than a trivial job itself, and jobs that
end one by one are launched in bursts of 1-3: a fork per burst made Rota slower than
task-spooler. So the runner keeps one waiter *taking* bursts over a socketpair, each job a
message with its log, journal segment and watch pipe as SCM_RIGHTS. It stops taking them
(it *retires*) when the runner closes its end: after handing it WAITER_JOBS jobs, after
WAITER_IDLE_S without a launch, or at the runner's death (EOF). A retired waiter exits
once its last job has ended, so it lives from its first burst to its last job's end (a
taking waiter with no job left waits at most WAITER_IDLE_S more for a burst).

Protocol with the runner, per burst: the runner tells the keeper (``keeper.intent``), then
sends the burst, one message per job (``last`` on the final one). A burst is taken whole or
not at all: a runner that dies before its last message leaves the waiter to start none of
it. Per job: enter the working directory (as the job's account, for a job that has one),
start the job, journal its start, tell the keeper (``keeper.started``), answer
``PID STARTED_AT`` to the runner; before the burst's last answer, ``keeper.done`` (so the
keeper hears it before the runner's next intent). At EOF, ``keeper.done`` again: a runner
killed between its intent and its burst leaves the keeper nothing to wait for. At each
end: the journal, the keeper (``keeper.ended``), the daemon's pipe, the runner's ends pipe
(``PID LINE``: for the daemons that asked the runner to watch the job), and only then is
the job reaped, so its pid is not reused before its end is recorded.
"""

from __future__ import annotations

import array
import contextlib
import errno
import json
import mmap
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
#: the jobs a waiter is handed before the runner retires it: the fork is paid once per
#: this many jobs, and a waiter's life (until its last job ends) stays bounded
WAITER_JOBS = 256
#: a waiter that has had no burst for this long is retired (so an idle runner holds none)
WAITER_IDLE_S = 10.0
#: the largest job message (argv, env); the socketpair's send buffer may allow less
MESSAGE_BYTES = 4 << 20
#: fds per job message: log, watch pipe, and the journal segment when new to the waiter
MAX_FDS = 3


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
    base: int = 0  # the daemon's environment under ``env`` (0: none, ``env`` is whole)


@dataclass
class Holder:
    """What the waiter's records name as holding the job: the keeper (pid and start)."""

    pid: int
    started: float


# --- the runner's side ---------------------------------------------------------------
def encode(s: Start) -> bytes:
    """A job's message to its waiter (``send`` adds whether it ends the burst)."""
    return json.dumps({"key": s.key, "segment": s.segment, "argv": s.argv, "env": s.env,
                       "base": s.base, "cwd": s.cwd, "account": s.account},
                      separators=(",", ":")).encode()


def encode_base(base: int, env: dict[str, str]) -> bytes:
    """A daemon's environment, sent to a waiter before the first job that needs it (jobs
    carry only their own variables: encoding every variable per job cost more than the
    job's start)."""
    return b"B" + json.dumps({"base": base, "env": env}, separators=(",", ":")).encode()


def send(sock: socket.socket, s: Start, data: bytes, new_segment: bool, last: bool) -> None:
    """One job to the waiter: its message and fds (the segment's only when new to it)."""
    fds = [s.log, s.watch, s.journal] if new_segment else [s.log, s.watch]
    socket.send_fds(sock, [b"L" if last else b"M", data], fds)


# --- the waiter ------------------------------------------------------------------------
def serve(sock: socket.socket, keeper: socket.socket, ends: int, holder: Holder) -> NoReturn:
    """The waiter's whole life, in the runner's fresh fork."""
    code = 0
    try:
        _keep_only([sock.fileno(), keeper.fileno(), ends])
        os.setsid()  # a signal to the runner's group is not for the waiter
        _Waiter(sock, keeper, ends, holder).serve()
    except BaseException:  # a waiter never returns into the runner's code
        traceback.print_exc()
        code = 1
    os._exit(code)


def _keep_only(fds: list[int]) -> None:
    """Close every inherited descriptor but these (and stdio): a waiter holding the
    runner's sockets, other waiters' sockets or other jobs' pipes would keep them open
    after the runner's death."""
    low = 3
    for fd in sorted(set(fds)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 1 << 20)


class _Waiter:
    def __init__(self, sock: socket.socket, keeper: socket.socket, ends: int,
                 holder: Holder) -> None:
        self.sock, self.keeper, self.ends, self.holder = sock, keeper, ends, holder
        self.jobs: dict[int, Start] = {}  # pid -> the running job
        self.burst: list[Start] = []  # taken, not started yet (its last message to come)
        self.segments: dict[str, int] = {}  # journal segment -> its fd, kept to the end
        self.bases: dict[int, dict[str, str]] = {}  # the daemons' environments
        self.programs: dict[tuple[str, str], str] = {}  # (name, PATH) -> where it was found
        self.taking = True
        self.buf = mmap.mmap(-1, MESSAGE_BYTES)  # pages are made only as written
        self.anc = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        # SIGCHLD wakes the select through this pipe (a child may end at any time)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(sock.fileno(), False)
        signal.set_wakeup_fd(wake_w)

    def serve(self) -> None:
        while self.taking or self.jobs:
            readable = [self.wake_r, self.sock.fileno()] if self.taking else [self.wake_r]
            with contextlib.suppress(InterruptedError):
                select.select(readable, [], [])
            with contextlib.suppress(BlockingIOError):
                while os.read(self.wake_r, 512):
                    pass
            if self.taking:
                self._take()
            self._reap()

    # --- bursts ------------------------------------------------------------------------
    def _take(self) -> None:
        """The runner's messages waiting now; a burst's jobs start at its last one."""
        while self.taking:
            try:
                n, anc, _flags, _addr = self.sock.recvmsg_into(
                    [self.buf], self.anc, socket.MSG_CMSG_CLOEXEC)
            except BlockingIOError:
                return
            except OSError:
                n, anc = 0, []
            fds = array.array("i")
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
            if n == 0:
                self._retire()
                return
            msg = json.loads(self.buf[1:n])
            if self.buf[0] == ord("B"):
                self.bases[msg["base"]] = msg["env"]
                continue
            env = msg["env"]
            if msg["base"]:
                env = {**self.bases[msg["base"]], **env}
            s = Start(key=msg["key"], segment=msg["segment"], journal=-1, argv=msg["argv"],
                      env=env, cwd=msg["cwd"], log=fds[0], account=msg["account"],
                      watch=fds[1])
            if len(fds) > 2:
                old = self.segments.get(s.segment)
                if old is not None:
                    os.close(old)
                self.segments[s.segment] = fds[2]
            s.journal = self.segments[s.segment]
            self.burst.append(s)
            if self.buf[0] == ord("L"):
                self._start_burst()

    def _start_burst(self) -> None:
        burst, self.burst = self.burst, []
        for i, s in enumerate(burst):
            _start(s, self.keeper, self.holder, self.programs)
            self.jobs[s.pid] = s
            os.close(s.log)
            if i == len(burst) - 1:  # the keeper hears it before the runner's next intent
                _tell(self.keeper, done(os.getpid()))
            _tell(self.sock, f"{s.pid} {time.time()}".encode())  # a runner gone: the journal
            self._reap()  # short jobs end while the rest start: their ends go out now

    def _retire(self) -> None:
        """The runner has closed its end: no more bursts. A burst not taken whole is not
        started (the runner died sending it); the keeper stops waiting for one."""
        self.taking = False
        for s in self.burst:
            os.close(s.log)
            os.close(s.watch)
        self.burst = []
        _tell(self.keeper, done(os.getpid()))
        self.sock.close()

    # --- ends ----------------------------------------------------------------------------
    def _reap(self) -> None:
        """Each ended job's end, recorded before it is reaped. The jobs are this process's
        only children (their own orphans go to the keeper)."""
        while True:
            try:
                res = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if res is None:
                return
            s = self.jobs.pop(res.si_pid, None)
            if s is not None:
                line = _record(s, {"key": s.key, "shim_pid": s.pid,
                                   "exit_status": exit_status_of(res),
                                   "ended_at": time.time()})
                _tell(self.keeper, ended(s.pid))
                _write(s.watch, line)
                os.close(s.watch)
                _write(self.ends, f"{s.pid} ".encode() + line)
            os.waitpid(res.si_pid, 0)


def _start(s: Start, keeper: socket.socket, holder: Holder,
           programs: dict[tuple[str, str], str]) -> None:
    try:
        s.pid = _spawn(s, programs)
    except OSError as e:
        # as a shell says it: in the log, and an exit status of 127 (not found) or 126
        # (cannot run), from a stand-in process, so the job ends as any other
        _write(s.log, f"rota: {e.strerror or e}\n".encode())
        code = 127 if e.errno == errno.ENOENT and "command not found" in str(e) else 126
        s.pid = os.posix_spawn("/bin/sh", ["sh", "-c", f"exit {code}"], s.env, setsid=True)
    _record(s, {"key": s.key, "shim_pid": s.pid, "pgid": s.pid, "runner": holder.pid,
                "runner_started": holder.started, "waiter": os.getpid()})
    _tell(keeper, started(s.pid, s.key, s.segment))


def _spawn(s: Start, programs: dict[tuple[str, str], str]) -> int:
    """The job, in its working directory, entered with its account's rights; its program
    looked up on its own PATH (remembered: a lookup cost a trivial job's start a tenth)."""
    if s.cwd is not None:
        _enter(s.cwd, s.account)
    prog = s.argv[0]
    key = (prog, s.env.get("PATH", os.defpath))
    found = programs.get(key) if "/" not in prog else (prog if os.path.exists(prog) else None)
    if found is None and "/" not in prog:
        found = shutil.which(prog, path=key[1])
        if found is not None and len(programs) < 10_000:
            programs[key] = found
    if found is None:
        raise OSError(errno.ENOENT, f"cannot run '{prog}': command not found")
    try:
        if s.account is not None:
            return _spawn_as(s.account, s.argv, found, s.env, s.log)
        return os.posix_spawn(found, s.argv, s.env, setsid=True, setsigmask=(),
                              setsigdef=DEFAULT_SIGNALS, file_actions=[
                                  _DEVNULL_IN, (os.POSIX_SPAWN_DUP2, s.log, 1),
                                  (os.POSIX_SPAWN_DUP2, s.log, 2)])
    except OSError as e:
        programs.pop(key, None)  # moved or removed since it was found: look again next time
        if s.account is not None:
            raise
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


def _tell(sock: socket.socket, msg: bytes) -> None:
    """To the keeper or the runner (a non-blocking socket: wait for room); one gone hears
    nothing."""
    while True:
        try:
            sock.send(msg)
            return
        except BlockingIOError:
            select.select([], [sock], [], 1.0)
        except OSError:
            return
