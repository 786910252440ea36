"""The local runner: one long-lived process that starts the local backend's jobs and records
how each one ends.

    python -m rota.backends.runner SOCKET

Why: a job started through a per-job ``sh`` shim cost its machine about three times what a
trivial job itself costs (a shell, a fork and a second exec per job). The runner starts
each job with one ``posix_spawn`` of the job itself (in its own session, so the job's pid
is its process group and session id, as the shim's was) and, as its parent, collects its
exit status. It records each start and end in its journal (``rota.backends.local.journal``:
one append-only file per runner, not a file per job) and writes the end into the job's
watch pipe too, so the daemon learns it without reading a file. It runs detached from the
daemon, so a daemon that crashes, stops or is upgraded leaves it running: jobs that end
meanwhile still get their exit status in the journal, and the next daemon connects to it
again.

The runner's own death (SIGKILL, the OOM killer) is survived too. Why it once was not: the
jobs never died with it (each is in its own session, writes to a file, has no
parent-death signal), but only a parent learns an exit status; the orphans were reaped by
init and ended as "killed by signal 9", charged to the job. Now the process the daemon
starts is the keeper (``rota.backends.local.keeper``), a child subreaper that owns the
listening socket and forks the runner: a dead runner's jobs become the keeper's children,
it journals their ends, and forks the next runner at once, which takes them over
(``watch`` answers for them; their ends reach it from the keeper). The runner tells the
keeper that it is about to start a job, that it has (once the start is journaled: a daemon
that lost the answer finds it there) and of its end (once journaled too), and looks at a
child's end with ``WNOWAIT`` and reaps it only once the end is journaled, so a runner
killed at any point leaves each job's start and end recorded, and its end to exactly one
of them. ``hello``'s ``pid`` and ``started_at``, and the journal's ``runner``, are the
keeper's: it is what holds the jobs.

Protocol: ``SOCK_SEQPACKET`` on an owner-only socket in ROTA_HOME, one JSON object per
message. ``{"op": "hello"}`` -> ``{"protocol", "pid", "started_at", "runner"}`` (``runner``:
this runner's own pid); ``{"op": "env", "env"}``, once per connection: the daemon's
environment; ``{"op": "launch", "argv", "env",
"cwd", "log", "status", "header"}`` (``env``: the job's own variables, over the daemon's;
``status``: the attempt's key in the journal, in whose directory's ``journal/`` the
journal is) -> ``{"pid", "started_at"}`` and, as ancillary data, the read end of a pipe
that gets the job's end record (one JSON line) once the journal has it, and is then
closed (the daemon watches it like a pidfd, so it never sees an end before the record
exists); ``{"op": "watch", "pid"}`` -> the same pipe for a job started earlier
(``{"known": false}`` when it is not this runner's); any error -> ``{"error": TEXT}``.
The runner makes the log's and the journal's directories when they are missing, and
removes a stale status file of the attempt's name (read before the journal).
The runner exits when it has no jobs and no daemon has been connected for IDLE_EXIT_S,
and the keeper with it.

Standard library only (and the journal's names): it starts once per daemon lifetime,
and quickly.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import selectors
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from rota.backends.local.journal import SEGMENT_BYTES, journal_dir, segment_name
from rota.backends.local.keeper import (
    Jobs,
    Keeper,
    become_subreaper,
    ended,
    exit_status_of,
    started,
    starting,
)

#: 3: a journal per runner instead of a status file per job; ends in the pipe.
#: 4: a keeper holds the jobs; ``pid`` and ``started_at`` in ``hello`` are the keeper's.
PROTOCOL = 4
MAX_MESSAGE = 1 << 20
IDLE_EXIT_S = 30.0
_DEVNULL_IN = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
#: Python ignores SIGPIPE (and the runner HUP and INT); an ignored signal stays ignored
#: across exec, so the job gets the defaults back.
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGHUP, signal.SIGINT, signal.SIGXFSZ)


@dataclass
class _Job:
    pid: int
    pidfd: int  # -1: adopted from a dead runner (the keeper reaps it and says its end)
    key: str  # the attempt's status path: its name in the journal
    journal: _Journal
    watchers: list[int] = field(default_factory=list)  # write ends of the daemons' pipes


def _hung_up(conn: socket.socket) -> bool:
    """Whether the other end has closed (messages it sent may still be waiting)."""
    p = select.poll()
    p.register(conn, select.POLLRDHUP)
    return any(ev & (select.POLLRDHUP | select.POLLHUP) for _, ev in p.poll(0))


def _open(path: str, flags: int, mode: int) -> int:
    """open(2), making the file's directory first if it is missing (the daemon makes them
    at its start; this spares it a mkdir and a stat per job)."""
    try:
        return os.open(path, flags, mode)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        return os.open(path, flags, mode)


class _Journal:
    """This runner's journal in one status directory: one O_APPEND write per record, so a
    reader sees whole lines; a new segment past SEGMENT_BYTES (the daemon deletes a
    segment once every job it names has ended and been stored)."""

    def __init__(self, status_dir: str, runner_started: float) -> None:
        self.dir = journal_dir(status_dir)
        self.started = runner_started
        self.fd, self.seq, self.size, self.path = -1, 0, 0, ""

    def segment(self) -> str:
        """The segment the next record goes to."""
        if self.fd < 0 or self.size >= SEGMENT_BYTES:
            self._next()
        return self.path

    def write(self, record: dict[str, Any]) -> bytes:
        """Append the record; returns its line."""
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        self.segment()
        os.write(self.fd, line)
        self.size += len(line)
        return line

    def _next(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.seq += 1
        self.path = os.path.join(self.dir, segment_name(os.getpid(), self.started, self.seq))
        self.fd = _open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = os.fstat(self.fd).st_size


def listen(path: str) -> socket.socket:
    """The runner's socket, owner-only; held by the keeper, so it outlives a runner."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(64)
    return listener


class Runner:
    def __init__(self, path: str, listener: socket.socket, keeper: socket.socket,
                 holder: tuple[int, float], adopted: Jobs) -> None:
        self.path, self.listener, self.keeper = path, listener, keeper
        self.holder_pid, self.holder_started = holder  # the keeper: who holds the jobs
        self.started_at = time.time()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, self._accept)
        self.keeper.setblocking(False)
        self.sel.register(self.keeper, selectors.EVENT_READ, self._from_keeper)
        self.clients: set[socket.socket] = set()
        self.jobs: dict[int, _Job] = {}
        self.last_client = time.monotonic()
        self.buf = bytearray(MAX_MESSAGE)
        self.base_env: dict[socket.socket, dict[str, str]] = {}  # per connection
        self.cwd = os.getcwd()
        self.programs: dict[tuple[str, str], str] = {}  # (name, PATH) -> the file found
        self.journals: dict[str, _Journal] = {}  # status directory -> its journal
        for pid, (key, _segment) in adopted.items():
            self.jobs[pid] = _Job(pid=pid, pidfd=-1, key=key, journal=self._journal(key))

    # --- the loop ---------------------------------------------------------------------
    def serve(self) -> None:
        while True:
            for key, _ in self.sel.select(timeout=5.0):
                key.data(key.fileobj)
            if self.clients:
                self.last_client = time.monotonic()
            elif not self.jobs and time.monotonic() - self.last_client > IDLE_EXIT_S:
                self._close()
                return

    def _close(self) -> None:
        # only our own socket: a newer runner may have taken the path over
        try:
            if os.stat(self.path).st_ino == os.fstat(self.listener.fileno()).st_ino:
                os.unlink(self.path)
        except OSError:
            pass
        self.listener.close()

    def _accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        self.clients.add(conn)
        self.sel.register(conn, selectors.EVENT_READ, self._message)

    def _drop(self, conn: socket.socket) -> None:
        self.sel.unregister(conn)
        self.clients.discard(conn)
        self.base_env.pop(conn, None)
        conn.close()

    def _message(self, conn: socket.socket) -> None:
        try:
            n = conn.recv_into(self.buf)
        except OSError:
            n = 0
        if n == 0:
            self._drop(conn)
            return
        if _hung_up(conn):
            # its daemon is gone (killed with requests still queued): what it asked is
            # not done, since the next daemon starts those jobs again
            self._drop(conn)
            return
        fds: list[int] = []
        try:
            msg = json.loads(self.buf[:n])
            reply = self._handle(conn, msg, fds)
        except Exception as e:  # a bad request gets an answer, the runner goes on
            reply = {"error": f"{type(e).__name__}: {e}"}
        try:
            socket.send_fds(conn, [json.dumps(reply).encode()], fds)
        except OSError:
            self._drop(conn)
        finally:
            for fd in fds:
                os.close(fd)

    def _handle(self, conn: socket.socket, msg: dict[str, Any],
                fds: list[int]) -> dict[str, Any]:
        op = msg.get("op")
        if op == "hello":
            return {"protocol": PROTOCOL, "pid": self.holder_pid,
                    "started_at": self.holder_started, "runner": os.getpid()}
        if op == "env":  # the daemon's environment, once: launches carry only their own
            self.base_env[conn] = msg["env"]
            return {}
        if op == "launch":
            return self._launch({**self.base_env.get(conn, {}), **msg["env"]}, msg, fds)
        if op == "watch":
            job = self.jobs.get(int(msg["pid"]))
            if job is None:
                return {"known": False}
            fds.append(self._watcher(job))
            return {"known": True}
        return {"error": f"unknown op {op!r}"}

    # --- starting a job ---------------------------------------------------------------
    def _launch(self, env: dict[str, str], msg: dict[str, Any],
                fds: list[int]) -> dict[str, Any]:
        argv: list[str] = msg["argv"]
        account: dict[str, Any] | None = msg.get("as")
        log = _open(msg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                    0o600 if account else 0o644)
        try:
            if account is not None:
                _hand_over(account, log, msg["status"], msg["env"].get("ROTA_EVENTS_FILE"))
            if msg.get("header"):
                os.write(log, (msg["header"] + "\n").encode())
            with contextlib.suppress(OSError):  # a stale status file would shadow the journal
                os.unlink(msg["status"])
            journal = self._journal(msg["status"])
            self._tell_keeper(starting(msg["status"], journal.segment()))
            try:
                pid = self._spawn(argv, env, msg.get("cwd") or None, log) if account is None \
                    else _spawn_as(account, argv, {**account_env(account), **msg["env"]},
                                   msg.get("cwd") or None, log)
            except OSError as e:
                # as a shell says it: in the log, and an exit status of 127 (not found) or
                # 126 (cannot run), from a stand-in process, so the job ends as any other
                os.write(log, f"rota: {e.strerror or e}\n".encode())
                code = 127 if e.errno == errno.ENOENT and "command not found" in str(e) \
                    else 126
                pid = os.posix_spawn("/bin/sh", ["sh", "-c", f"exit {code}"], env,
                                     setsid=True)
        finally:
            os.close(log)
        started_at = time.time()
        key: str = msg["status"]
        job = _Job(pid=pid, pidfd=os.pidfd_open(pid), key=key, journal=journal)
        try:
            # the journal first: a daemon that loses this answer reads it there. Should this
            # runner die before the keeper hears ``started``, the keeper finds the job as
            # the child it was not told of (and journals the start again, the same record)
            job.journal.write({"key": key, "shim_pid": pid, "pgid": pid,
                               "runner": self.holder_pid,
                               "runner_started": self.holder_started})
        except OSError as e:  # the job runs and is watched; only a restart cannot find it
            print(f"rota runner: job {pid}: cannot record its start: {e}", file=sys.stderr)
        self._tell_keeper(started(pid, key, journal.segment()))
        self.jobs[pid] = job
        self.sel.register(job.pidfd, selectors.EVENT_READ, lambda _fd, j=job: self._ended(j))
        fds.append(self._watcher(job))
        return {"pid": pid, "started_at": started_at}

    def _journal(self, key: str) -> _Journal:
        status_dir = os.path.dirname(key)
        journal = self.journals.get(status_dir)
        if journal is None:
            journal = self.journals[status_dir] = _Journal(status_dir, self.started_at)
        return journal

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str | None, log: int) -> int:
        """posix_spawn in ``cwd`` (the runner is single-threaded and uses absolute paths
        only, so it simply moves there), the program looked up on the job's own PATH,
        output to the log."""
        if cwd is not None and cwd != self.cwd:
            try:
                os.chdir(cwd)
            except OSError as e:
                raise OSError(e.errno, f"cannot enter the working directory '{cwd}': "
                                       f"{e.strerror}") from None
            self.cwd = cwd
        prog = argv[0]
        key = (prog, env.get("PATH", os.defpath)) if "/" not in prog else None
        found = self.programs.get(key) if key else None
        if found is None:
            found = shutil.which(prog, path=key[1]) if key else \
                (prog if os.path.exists(prog) else None)
            if found is None:
                raise OSError(errno.ENOENT, f"cannot run '{prog}': command not found")
            if key and len(self.programs) < 10_000:
                self.programs[key] = found
        try:
            return os.posix_spawn(found, argv, env, setsid=True, setsigmask=(),
                                  setsigdef=_DEFAULT_SIGNALS, file_actions=[
                                      _DEVNULL_IN, (os.POSIX_SPAWN_DUP2, log, 1),
                                      (os.POSIX_SPAWN_DUP2, log, 2)])
        except OSError as e:
            if key:  # moved or removed since it was found: look again next time
                self.programs.pop(key, None)
            raise OSError(e.errno, f"cannot run '{prog}': {e.strerror}") from None

    def _watcher(self, job: _Job) -> int:
        """A pipe for a daemon: it reads EOF once the job's end is recorded."""
        r, w = os.pipe()
        job.watchers.append(w)
        return r

    # --- a job's end ------------------------------------------------------------------
    def _ended(self, job: _Job) -> None:
        # looked at, not reaped, until its end is journaled and the keeper told: should
        # this runner die in between, the keeper reaps the zombie and records it
        try:
            res = os.waitid(os.P_PID, job.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            res = None
            status = 128 + signal.SIGKILL  # not ours to reap: unknown
        else:
            if res is None:
                return
            status = exit_status_of(res)
        record = {"key": job.key, "shim_pid": job.pid, "exit_status": status,
                  "ended_at": time.time()}
        try:
            line = job.journal.write(record)
        except OSError as e:  # a restarted daemon will find no end: the job is requeued
            print(f"rota runner: job {job.pid}: cannot record its end: {e}", file=sys.stderr)
            line = (json.dumps(record) + "\n").encode()
        self.sel.unregister(job.pidfd)
        os.close(job.pidfd)
        self._tell_keeper(ended(job.pid))
        if res is not None:
            os.waitpid(job.pid, 0)
        self._done(job, line)

    def _done(self, job: _Job, line: bytes) -> None:
        """The job's end is journaled: to the daemons watching it."""
        for w in job.watchers:
            with contextlib.suppress(OSError):  # that daemon is gone: its pipe with it
                os.write(w, line)
            os.close(w)
        del self.jobs[job.pid]

    # --- the keeper -------------------------------------------------------------------
    def _tell_keeper(self, msg: bytes) -> None:
        while True:
            try:
                self.keeper.send(msg)
                return
            except BlockingIOError:  # it is behind: wait for room
                select.select([], [self.keeper], [], 1.0)

    def _from_keeper(self, sock: socket.socket) -> None:
        """Ends of adopted jobs, journaled by the keeper: ``D PID LINE``."""
        while True:
            try:
                msg = sock.recv(1 << 16)
            except BlockingIOError:
                return
            kind, _, rest = msg.partition(b" ")
            pid, _, line = rest.partition(b" ")
            job = self.jobs.get(int(pid)) if kind == b"D" else None
            if job is not None and job.pidfd < 0:
                self._done(job, line)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m rota.backends.runner SOCKET", file=sys.stderr)
        return 2
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    try:
        listener = listen(argv[1])
    except OSError as e:  # another runner took the path meanwhile: that one serves
        print(f"rota runner: cannot listen on {argv[1]}: {e}", file=sys.stderr)
        return 1
    become_subreaper()
    return Keeper(argv[1], listener).keep()


if __name__ == "__main__":
    sys.exit(main(sys.argv))


# --- a job as another account (a root runner: docs/security.md) --------------------------
def account_env(account: dict[str, Any]) -> dict[str, str]:
    """A login's environment for the account; the runner's (root's) never reaches the job."""
    from rota.backends.base import login_env

    return login_env(account["user"], account["home"], account["shell"])


def _hand_over(account: dict[str, Any], log: int, status: str, events: str | None) -> None:
    """The job's own files become its account's: its log, and the file rota.job writes its
    metrics to (made here, in a status folder it may pass through but not list)."""
    uid, gid = account["uid"], account["gid"]
    os.fchown(log, uid, gid)
    os.fchmod(log, 0o600)
    status_dir = os.path.dirname(status)
    os.chmod(status_dir, 0o711)
    if events:
        fd = os.open(events, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            os.fchown(fd, uid, gid)
        finally:
            os.close(fd)


def _spawn_as(account: dict[str, Any], argv: list[str], env: dict[str, str],
              cwd: str | None, log: int) -> int:
    """fork + exec as the account: groups, gid, uid set before exec, umask 077, in a session
    of its own, output to the log (posix_spawn cannot switch users). The runner (and its
    keeper) reap it by pid, as any job: the Popen object is told it is done so that
    subprocess never reaps it behind their back."""
    import subprocess

    prog = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
    if prog is None:
        raise OSError(errno.ENOENT, f"cannot run '{argv[0]}': command not found")
    try:
        proc = subprocess.Popen(argv, executable=prog, env=env, cwd=cwd,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, user=account["uid"],
                                group=account["gid"], extra_groups=account["groups"],
                                umask=0o077, close_fds=True, restore_signals=True,
                                preexec_fn=_default_signals)
    except OSError as e:
        raise OSError(e.errno, f"cannot run '{argv[0]}' as {account['user']}: "
                               f"{e.strerror}") from None
    proc.returncode = 0  # never polled: the runner's selector and waitpid see its end
    return proc.pid


def _default_signals() -> None:
    for sig in _DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
