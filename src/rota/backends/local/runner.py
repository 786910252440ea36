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

Its death is survived, and its keeper's too. Each job's parent is not the runner but a
waiter (``rota.backends.local.waiter``): a fork of the runner that takes the bursts of
launches (the launches waiting in its socket together) as messages over a socketpair,
starts those jobs, journals each start and end itself, writes each end into the pipe the
daemon watches (whose write end it alone holds) and lives exactly as long as its jobs. One
waiter takes burst after burst until it has been handed ``WAITER_JOBS`` jobs or has been
idle ``WAITER_IDLE_S``; then the runner closes its end and forks the next one when needed
(a fork per burst cost more than a trivial job). So a SIGKILL of the runner, or of the
runner and its keeper at once (the OOM killer), leaves every running job's end recorded,
and the daemon runs none of them again. The process the daemon starts is the keeper
(``rota.backends.local.keeper``), a child subreaper that owns the listening socket and
forks the runner again at once when it dies; the waiters tell it of each start and end,
so the next runner knows the running jobs ("adopted": it answers ``watch`` for them) and
their ends reach it through a pipe the keeper holds. The runner tells the keeper of each
burst before sending it, and a waiter starts a burst only once it has it whole, so a
runner killed at any point leaves each job started and journaled once, or not at all. A
waiter killed with the job still running leaves the job to the keeper, which reaps it and
journals its end. ``hello``'s ``pid``
and ``started_at``, and the journal's ``runner``, are the keeper's: it is what holds the
jobs.

Protocol: ``SOCK_SEQPACKET`` on an owner-only socket in ROTA_HOME, one JSON object per
message. ``{"op": "hello"}`` -> ``{"protocol", "pid", "started_at", "runner"}`` (``runner``:
this runner's own pid); ``{"op": "env", "env"}``, once per connection: the daemon's
environment; ``{"op": "launch", "argv", "env",
"cwd", "log", "status", "header"}`` (``env``: the job's own variables, over the daemon's;
``status``: the attempt's key in the journal, in whose directory's ``journal/`` the
journal is) -> ``{"pid", "started_at"}`` and, as ancillary data, the read end of a pipe
that gets the job's end record (one JSON line) once the journal has it, and is then
closed (the daemon watches it like a pidfd, so it never sees an end before the record
exists; its write end is the waiter's alone, so the runner's death does not close it);
``{"op": "watch", "pid"}`` -> such a pipe for a job started earlier
(``{"known": false}`` when it is not this runner's); any error -> ``{"error": TEXT}``.
The runner makes the log's and the journal's directories when they are missing, and
removes a stale status file of the attempt's name (read before the journal).
The runner exits when it has no jobs and no daemon has been connected for IDLE_EXIT_S,
and the keeper with it.

Its parts beside it: its journal's segments (``journal_writer``), its end of the waiters
(``waiter_link``), a job as another account (``as_account``); all imported at its top,
before any fork.

Standard library only (beside those, and the journal's, waiter's and keeper's names): it
starts once per daemon lifetime, and quickly.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rota.backends.local import waiter
from rota.backends.local.as_account import _hand_over, account_env
from rota.backends.local.journal_writer import _Journal, _open
from rota.backends.local.keeper import Jobs, Keeper, become_subreaper
from rota.backends.local.waiter_link import Waiters, _hung_up, _message_limit

#: 3: a journal per runner instead of a status file per job; ends in the pipe.
#: 4: a keeper holds the jobs; ``pid`` and ``started_at`` in ``hello`` are the keeper's.
#: 5: waiters hold the jobs; the daemon's first watch pipe is a waiter's.
PROTOCOL = 5
MAX_MESSAGE = 1 << 20
IDLE_EXIT_S = 30.0
#: the most launches taken from a daemon's connection together
MAX_BURST = 64
#: the most jobs handed to the waiter at once: it starts none of a burst before it has all
#: of it, and the runner answers the daemon as each starts, so smaller bursts start the
#: first jobs (and tell the daemon) sooner; each costs the keeper two messages
BURST = 8


@dataclass
class _Job:
    pid: int
    key: str  # the attempt's status path: its name in the journal
    watchers: list[int] = field(default_factory=list)  # write ends of later daemons' pipes


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
                 holder: tuple[int, float], adopted: Jobs, ends: tuple[int, int]) -> None:
        self.path, self.listener, self.keeper = path, listener, keeper
        self.holder = waiter.Holder(*holder)  # the keeper: who holds the jobs
        self.started_at = time.time()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, self._accept)
        self.keeper.setblocking(False)
        self.sel.register(self.keeper, selectors.EVENT_READ, self._from_keeper)
        self.ends_r, self.ends_w = ends  # the waiters' ends (the keeper holds them too)
        os.set_blocking(self.ends_r, False)
        self.sel.register(self.ends_r, selectors.EVENT_READ, self._from_waiters)
        self.ends_buf = b""
        self.clients: set[socket.socket] = set()
        self.jobs: dict[int, _Job] = {}
        self.last_client = time.monotonic()
        self.buf = bytearray(MAX_MESSAGE)
        #: per connection: the daemon's environment as a waiter gets it (an id, and the
        #: message that tells it), sent to each waiter once rather than with every job
        self.base_env: dict[socket.socket, tuple[int, bytes]] = {}
        self.base_ids = 0
        self.journals: dict[str, _Journal] = {}  # status directory -> its journal
        self.as_accounts = False  # what starting a job as an account needs is imported
        self.waiters = Waiters(self.keeper, self.ends_w, self.holder, self._tell_keeper)
        self.message_limit = _message_limit()
        for pid, (key, _segment) in adopted.items():
            self.jobs[pid] = _Job(pid=pid, key=key)

    # --- the loop ---------------------------------------------------------------------
    def serve(self) -> None:
        while True:
            for key, _ in self.sel.select(timeout=5.0):
                key.data(key.fileobj)
            self._reap_waiters()
            self.waiters.retire_if_idle()
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
        """The messages waiting on this connection (launches in a row: one waiter)."""
        msgs: list[bytes] = []
        while len(msgs) < MAX_BURST:
            try:
                n = conn.recv_into(self.buf, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                n = 0
            if n == 0:
                self._drop(conn)
                return
            msgs.append(bytes(self.buf[:n]))
        if not msgs:
            return
        if _hung_up(conn):
            # its daemon is gone (killed with requests still queued): what it asked is
            # not done, since the next daemon starts those jobs again
            self._drop(conn)
            return
        launches: list[dict[str, Any]] = []
        for data in msgs:
            fds: list[int] = []
            try:
                msg = json.loads(data)
                if msg.get("op") == "launch":
                    launches.append(msg)
                    continue
                if not self._launch(conn, launches):
                    return
                launches = []
                reply = self._handle(conn, msg, fds)
            except Exception as e:  # a bad request gets an answer, the runner goes on
                reply = {"error": f"{type(e).__name__}: {e}"}
            if not self._answer(conn, reply, fds):
                return
        self._launch(conn, launches)

    def _answer(self, conn: socket.socket, reply: dict[str, Any], fds: list[int]) -> bool:
        """One answer, with its fds (closed here, sent or not); False once the daemon is
        gone (its connection dropped)."""
        try:
            if conn in self.clients:
                socket.send_fds(conn, [json.dumps(reply).encode()], fds)
                return True
        except OSError:
            self._drop(conn)
        finally:
            for fd in fds:
                os.close(fd)
        return False

    def _handle(self, conn: socket.socket, msg: dict[str, Any],
                fds: list[int]) -> dict[str, Any]:
        op = msg.get("op")
        if op == "hello":
            return {"protocol": PROTOCOL, "pid": self.holder.pid,
                    "started_at": self.holder.started, "runner": os.getpid()}
        if op == "env":  # the daemon's environment, once: launches carry only their own
            self.base_ids += 1
            self.base_env[conn] = (self.base_ids, waiter.encode_base(self.base_ids, msg["env"]))
            return {}
        if op == "watch":
            job = self.jobs.get(int(msg["pid"]))
            if job is None:
                return {"known": False}
            r, w = os.pipe()
            job.watchers.append(w)
            fds.append(r)
            return {"known": True}
        return {"error": f"unknown op {op!r}"}

    # --- starting jobs ----------------------------------------------------------------
    def _launch(self, conn: socket.socket, msgs: list[dict[str, Any]]) -> bool:
        """Start these jobs through one waiter, in bursts of at most ``BURST``, each job
        answered, in order, as soon as its waiter has started it (the daemon learns of the
        first starts while the waiter starts the rest, and jobs that end meanwhile are
        reaped between starts): a pipeline, not one step per burst. False once the daemon
        is gone; the jobs handed to the waiter start anyway (the next daemon adopts them)."""
        #: per launch, in order: its answer, and what it starts (None: refused already)
        order: list[tuple[dict[str, Any], tuple[waiter.Start, bytes, bytes, int] | None]] = []
        sent = 0

        def answer_ready() -> None:  # the answers due, up to the first one not started
            nonlocal sent
            while sent < len(order) and order[sent][0]:
                reply, prepared = order[sent]
                sent += 1
                self._answer(conn, reply, [prepared[3]] if prepared and "pid" in reply else [])

        def started(k: int, at: float | None) -> None:
            reply, prepared = order[k]
            assert prepared is not None
            if at is None:
                os.close(prepared[3])
                reply["error"] = "the job's waiter died while starting it"
            else:
                self.jobs[prepared[0].pid] = _Job(pid=prepared[0].pid, key=prepared[0].key)
                reply.update(pid=prepared[0].pid, started_at=at)
            answer_ready()

        for first in range(0, len(msgs), BURST):  # prepared a burst at a time, too
            burst: list[tuple[int, waiter.Start, bytes, bytes]] = []
            for msg in msgs[first:first + BURST]:
                try:
                    prepared = self._prepare(conn, msg)
                except Exception as e:  # its log cannot be made, say: this job only
                    order.append(({"error": f"{type(e).__name__}: {e}"}, None))
                    continue
                burst.append((len(order), *prepared[:3]))
                order.append(({}, prepared))
            answer_ready()
            if burst:
                self._start_in_waiter(burst, started)
        return conn in self.clients

    def _prepare(self, conn: socket.socket, msg: dict[str, Any]
                 ) -> tuple[waiter.Start, bytes, bytes, int]:
        account: dict[str, Any] | None = msg.get("as")
        log = _open(msg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                    0o600 if account else 0o644)
        try:
            if account is not None:
                self._can_start_as_accounts()
                _hand_over(account, log, msg["status"], msg["env"].get("ROTA_EVENTS_FILE"))
                env = {**account_env(account), **msg["env"]}
                base = (0, b"")
            else:  # the job's own variables over the daemon's (merged by the waiter)
                env, base = msg["env"], self.base_env.get(conn, (0, b""))
            start = waiter.Start(key=msg["status"], segment="", journal=-1, argv=msg["argv"],
                                 env=env, cwd=msg.get("cwd") or None, log=log,
                                 account=account, watch=-1, base=base[0])
            data = waiter.encode(start)
            if len(base[1]) > self.message_limit:
                raise ValueError(f"the daemon's environment takes {len(base[1])} bytes; "
                                 f"the local runner takes at most {self.message_limit}")
            if len(data) > self.message_limit:
                raise ValueError(f"its command and environment take {len(data)} bytes; "
                                 f"the local runner takes at most {self.message_limit}")
            if msg.get("header"):
                os.write(log, (msg["header"] + "\n").encode())
            with contextlib.suppress(OSError):  # a stale status file would shadow the journal
                os.unlink(msg["status"])
            start.segment, start.journal = self._journal(msg["status"]).reserve(msg["status"])
        except BaseException:
            os.close(log)
            raise
        r, start.watch = os.pipe()
        return start, data, base[1], r

    def _can_start_as_accounts(self) -> None:
        """Imported here, before any fork: a waiter imports nothing (and finding libc
        runs a program)."""
        if not self.as_accounts:
            import subprocess  # noqa: F401

            from rota.storage.owner_files import _credentials

            _credentials()
            self.as_accounts = True

    def _start_in_waiter(self, starts: list[tuple[int, waiter.Start, bytes, bytes]],
                         started: Callable[[int, float | None], None]) -> None:
        """Hand these jobs (each with a number, its message and its daemon's environment's
        message) to the current waiter (forked if there is none), the keeper told first;
        ``started(number, at)`` as the waiter starts each (its pid set in its ``Start``),
        ``at`` None for those it did not get to. The jobs' logs and watch pipes are the
        waiter's once sent (closed here)."""
        link = self.waiters.hand_over_burst([(s, data, base) for _, s, data, base in starts])
        if link is None:
            for k, *_ in starts:
                started(k, None)
            return
        got = 0
        while got < len(starts):
            try:
                answer = link.sock.recv(64)
            except OSError:
                answer = b""
            if not answer:
                break  # it died
            jpid, at = answer.split()
            k, start, _, _ = starts[got]
            start.pid = int(jpid)
            got += 1
            started(k, float(at))
        link.jobs += got
        link.used = time.monotonic()
        if got < len(starts):
            self.waiters.retire(dead=True)
            for k, *_ in starts[got:]:
                started(k, None)
        elif link.jobs >= waiter.WAITER_JOBS:
            self.waiters.retire()

    def _journal(self, key: str) -> _Journal:
        status_dir = os.path.dirname(key)
        journal = self.journals.get(status_dir)
        if journal is None:
            journal = self.journals[status_dir] = _Journal(status_dir, self.started_at)
        return journal

    # --- a job's end ------------------------------------------------------------------
    def _from_waiters(self, fd: int) -> None:
        """Ends journaled by the waiters (this runner's or a dead one's): ``PID LINE``."""
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            if not data:
                break
            self.ends_buf += data
        *lines, self.ends_buf = self.ends_buf.split(b"\n")
        for line in lines:
            pid, _, record = line.partition(b" ")
            job = self.jobs.get(int(pid))
            if job is not None:
                self._done(job, record + b"\n")
        self._reap_waiters()

    def _reap_waiters(self) -> None:
        """The waiters that have exited (the runner's only children)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            if self.waiters.current is not None and pid == self.waiters.current.pid:
                self.waiters.retire()  # it died between bursts (killed): it held none

    def _done(self, job: _Job, line: bytes) -> None:
        """The job's end is journaled: to the daemons that asked this runner to watch it."""
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
            except OSError:  # it is gone: the waiters record the jobs' ends
                return

    def _from_keeper(self, sock: socket.socket) -> None:
        """Ends of jobs whose waiter died, journaled by the keeper: ``D PID LINE``."""
        while True:
            try:
                msg = sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:
                msg = b""
            if not msg:  # the keeper is gone: nothing more comes from it
                self.sel.unregister(sock)
                return
            kind, _, rest = msg.partition(b" ")
            pid, _, line = rest.partition(b" ")
            job = self.jobs.get(int(pid)) if kind == b"D" else None
            if job is not None:
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
    return Keeper(argv[1], listener, _serve).keep()


def _serve(path: str, listener: socket.socket, keeper: socket.socket,
           holder: tuple[int, float], adopted: Jobs, ends: tuple[int, int]) -> None:
    """The runner's life in the keeper's fork."""
    Runner(path, listener, keeper, holder, adopted, ends).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

