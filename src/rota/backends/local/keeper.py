"""The runner's keeper: the small process that holds the local runner's jobs when the runner
itself dies.

Why: only a process's parent learns its exit status. When the runner (the jobs' parent) was
SIGKILLed, by hand or by the OOM killer, its running jobs went on, were reparented to init,
which reaped them, and their exit status was lost: each ended as "killed by signal 9", a
failure charged to the job. The keeper is a child subreaper (``PR_SET_CHILD_SUBREAPER``)
and the runner's parent, so the orphans of a dead runner become its children: it waits for
them and journals their ends, as the runner would have. It owns the listening socket and
forks a new runner at once, which takes the dead one's running jobs over ("adopted":
it answers ``watch`` for them and hands their ends to the daemons watching).

It does little, to be small and to stay alive: it keeps a table of the running jobs (pid ->
attempt key and journal segment), told by the runner over a socketpair as each is about to
start (``I``), has started (``L``) and has ended (``E``); it reaps the runner and orphans,
and restarts the runner. A socketpair whose both ends it keeps open holds what a runner
had not read yet for the next one. A job's own processes that outlive it are reaped here
too, silently.

A runner killed between ``I`` and ``L`` (in the middle of the spawn, often, under a burst
of launches) leaves a job the keeper was not told of: it finds it among its children (the
one it does not know that started after ``I``) and journals its start (again, if the
runner had: ``L`` follows the runner's own record) before the next runner answers; the
daemon, which lost that launch's answer, reaches the next runner before it reads the
journal, so it adopts the job instead of starting it again.
Only the keeper's own death loses ends: the daemon then requeues such an attempt, once its
process has gone, as no failure of the job's (``LocalBackend.collect``).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable

PR_SET_CHILD_SUBREAPER = 36
F_SETPIPE_SZ = 1031
RESTART_PAUSE_S = 0.2  # doubled per quick death, to 5 s: a runner that dies at its start
QUICK_DEATH_S = 2.0
#: the pause after reading the runner's messages: they wait in the socket meanwhile (a
#: few hundred fit), so a burst costs the keeper a wakeup per batch, not per message
BATCH_S = 0.05

#: pid -> (attempt key, journal segment its start went to)
Jobs = dict[int, tuple[str, str]]
#: what serves the runner's socket in each fork: ``rota.backends.local.runner.Runner``,
#: given by the runner's ``main`` (the keeper does not import the runner: it is below it)
ServeRunner = Callable[[str, socket.socket, socket.socket, tuple[int, float], Jobs,
                        tuple[int, int]], None]


def become_subreaper() -> None:
    """Orphaned descendants are reparented to this process, not to init (Linux >= 3.4)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def exit_status_of(res: os.waitid_result) -> int:
    """The shell's convention (the runner's journal's): the code, or 128+N for signal N."""
    if res.si_code == os.CLD_EXITED:
        return res.si_status
    return 128 + res.si_status


def intent(waiter: int, since: float, jobs: list[tuple[str, str]]) -> bytes:
    """The runner's message to the keeper, before it sends a waiter a burst: this waiter
    is to start these jobs (attempt key, journal segment). ``since``: when (CLOCK_BOOTTIME);
    a waiter that dies in its starts may leave a job it had not said it started, found by
    that."""
    where = b"".join(f"\0{segment}\0{key}".encode() for key, segment in jobs)
    return f"I {waiter} {since}".encode() + where


def started(pid: int, key: str, segment: str) -> bytes:
    """A waiter's message to the keeper: a job started (and its start is journaled)."""
    return f"L {pid} {segment}\0{key}".encode()


def done(waiter: int) -> bytes:
    """A waiter's message to the keeper: it has started every job of the burst it was
    given (or, its runner's end closed, it will start none it was not given whole)."""
    return f"F {waiter}".encode()


def lost(waiter: int) -> bytes:
    """The runner's message to the keeper: the waiter died before it was done."""
    return f"X {waiter}".encode()


def ended(pid: int) -> bytes:
    """A waiter's message to the keeper: a job's end is journaled."""
    return f"E {pid}".encode()


def end_record(key: str, pid: int, status: int) -> bytes:
    return (json.dumps({"key": key, "shim_pid": pid, "exit_status": status,
                        "ended_at": time.time()}, separators=(",", ":")) + "\n").encode()


class Keeper:
    def __init__(self, path: str, listener: socket.socket, serve_runner: ServeRunner) -> None:
        self.path, self.listener, self.serve_runner = path, listener, serve_runner
        self.started_at = time.time()
        self.jobs: Jobs = {}
        #: waiters told to start a burst and not done yet: pid -> (burst sent at, jobs
        #: not started)
        self.intents: dict[int, tuple[float, list[tuple[str, str]]]] = {}
        self.idle = False
        # own end: read here; the runner's end: kept open so messages outlive a runner
        self.own, self.runners_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.own.setblocking(False)
        # the waiters' ends to the runner: held here too, so none is lost between runners
        self.ends = os.pipe()
        with contextlib.suppress(OSError):  # room for the ends of a burst while no runner
            fcntl.fcntl(self.ends[1], F_SETPIPE_SZ, 1 << 20)
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.runner = 0
        self.runner_since = 0.0
        self.pause = RESTART_PAUSE_S

    def keep(self) -> int:
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        self._start_runner()
        while True:
            with contextlib.suppress(InterruptedError):
                select.select([self.own.fileno(), self.wake_r], [], [], 5.0)
            with contextlib.suppress(BlockingIOError):
                while os.read(self.wake_r, 512):
                    pass
            told = self._read_runner()
            if not self._reap():
                self.listener.close()
                return 0
            if told:  # a burst of launches: read them in batches, not a wakeup each
                time.sleep(BATCH_S)

    def _read_runner(self) -> int:
        """Take in what the runner and the waiters said; returns how many messages."""
        n = 0
        while True:
            try:
                msg = self.own.recv(1 << 20)
            except BlockingIOError:
                return n
            n += 1
            kind, _, rest = msg.partition(b" ")
            if kind == b"L":
                first, _, where = rest.partition(b" ")
                segment, _, key = where.partition(b"\0")
                job = (key.decode(), segment.decode())
                self.jobs[int(first)] = job
                for _, pending in self.intents.values():
                    if job in pending:
                        pending.remove(job)
            elif kind == b"I":
                head, *parts = rest.split(b"\0")
                waiter, since = head.split()
                self.intents[int(waiter)] = (float(since), [
                    (parts[i + 1].decode(), parts[i].decode())
                    for i in range(0, len(parts) - 1, 2)])
            elif kind == b"F":
                self.intents.pop(int(rest), None)
            elif kind == b"X":
                self._lost_starts(int(rest))
            elif kind == b"E":
                self.jobs.pop(int(rest), None)

    def _reap(self) -> bool:
        """Every child that has ended; False once the runner has exited of itself (idle)."""
        self._runner_gone()
        while True:
            try:
                res = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                res = None
            if res is None:
                break
            pid = res.si_pid
            if pid == self.runner:
                self._runner_gone()
                continue
            if pid not in self.jobs:  # a job or a waiter of a runner that died just now?
                self._read_runner()
                self._runner_gone()
            if pid in self.intents:  # a waiter that died in its starts
                self._lost_starts(pid)
            job = self.jobs.pop(pid, None)
            if job is not None:  # its waiter died: the job was this keeper's orphan
                self._journal_end(pid, job, exit_status_of(res))
            os.waitpid(pid, 0)  # after the record: a keeper killed before it leaves no gap
        if self.idle:
            return False
        if not self.runner:
            self._start_runner()
        return True

    def _runner_gone(self) -> None:
        """If the runner has died: take in all it said, wait for each waiter it had told to
        start jobs to be done with them (or to die), reap it. Before any orphan is reaped,
        and before the next runner starts (a daemon that lost a launch asks the next runner
        first, then reads the journal)."""
        if not self.runner:
            return
        try:
            res = os.waitid(os.P_PID, self.runner, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            res = None
        if res is None:
            return
        self._read_runner()
        for waiter in list(self.intents):
            self._settle(waiter)
        os.waitpid(self.runner, 0)
        self.runner = 0
        # exited of itself: idle, no jobs and no daemon (its socket is gone)
        self.idle = res.si_code == os.CLD_EXITED and res.si_status == 0

    def _settle(self, waiter: int) -> None:
        """Wait until a dead runner's waiter (now this keeper's child) has said it started
        all it was told to, or has died; a waiter that had no go-ahead exits at once."""
        while waiter in self.intents:
            try:
                gone = os.waitid(os.P_PID, waiter, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # not this keeper's child (never was: gone)
                gone = None
                self._read_runner()
                self._lost_starts(waiter)
                return
            if gone is not None:
                self._read_runner()
                self._lost_starts(waiter)
                return
            with contextlib.suppress(InterruptedError):
                select.select([self.own], [], [], 0.02)
            self._read_runner()

    def _lost_starts(self, waiter: int) -> None:
        """A waiter died before it had said it started every job it was given: the job it
        was starting may run (its orphan is this keeper's child): found, journaled."""
        intent = self.intents.pop(waiter, None)
        if intent is None or not intent[1]:
            return
        since, pending = intent
        self._find_unannounced(since, *pending[0], not_these={waiter, *self.intents})

    def _find_unannounced(self, since: float, key: str, segment: str,
                          not_these: set[int]) -> None:
        """The job a waiter started without saying so: the child (now this keeper's) not
        known here that started since the waiter was forked (not yet in its own session,
        maybe). Its start goes to the journal, as the waiter would have put it."""
        found: list[tuple[float, int]] = []
        for pid in _children() - set(self.jobs) - {self.runner} - not_these:
            began = _started_since_boot(pid)
            if began is not None and began >= since - 2 / _TICKS:  # ticks: coarse
                found.append((began, pid))
        if not found:
            return  # it was not started
        pid = min(found)[1]
        self.jobs[pid] = (key, segment)
        record = {"key": key, "shim_pid": pid, "pgid": pid, "runner": os.getpid(),
                  "runner_started": self.started_at}
        _append(segment, (json.dumps(record, separators=(",", ":")) + "\n").encode(), pid)

    def _journal_end(self, pid: int, job: tuple[str, str], status: int) -> None:
        key, segment = job
        line = end_record(key, pid, status)
        _append(segment, line, pid)
        with contextlib.suppress(OSError):  # the next runner tells the daemons watching
            self.own.send(f"D {pid} ".encode() + line)

    def _start_runner(self) -> None:
        if self.runner_since and time.monotonic() - self.runner_since < QUICK_DEATH_S:
            time.sleep(self.pause)
            self.pause = min(self.pause * 2, 5.0)
        else:
            self.pause = RESTART_PAUSE_S
        self.runner_since = time.monotonic()
        pid = os.fork()
        if pid:
            self.runner = pid
            return
        code = 1
        try:  # the runner: the keeper's jobs are its adopted ones
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(self.wake_r)
            os.close(self.wake_w)
            self.own.close()
            self.serve_runner(self.path, self.listener, self.runners_end,
                              (os.getppid(), self.started_at), self.jobs, self.ends)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)


_TICKS = os.sysconf("SC_CLK_TCK")


def _append(segment: str, line: bytes, pid: int) -> None:
    try:
        fd = os.open(segment, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as e:
        print(f"rota runner keeper: job {pid}: cannot record it: {e}", file=sys.stderr)


def _children() -> set[int]:
    """This process's children (the keeper is single-threaded: its one task's)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


def _started_since_boot(pid: int) -> float | None:
    """When ``pid`` started, in seconds since boot (CLOCK_BOOTTIME's)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after the command's name
    return int(fields[19]) / _TICKS  # fields[0] is field 3: this is field 22, starttime
