"""The daemon's side of the local runner (``rota.backends.local.runner``): reach it, start
it when there is none (or only one that speaks another protocol), and ask it things."""

from __future__ import annotations

import array
import asyncio
import contextlib
import functools
import json
import logging
import os
import select
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rota.backends.common import pid_alive
from rota.backends.local.runner import MAX_MESSAGE, PROTOCOL
from rota.errors import BackendError

log = logging.getLogger("rota.backends.local")

START_TIMEOUT_S = 15.0
_SUN_PATH_MAX = 108  # Linux's sun_path, with its terminating NUL


class RunnerLost(BackendError):
    """The runner went away in the middle of a request."""


def _receive(sock: socket.socket, flags: int = 0) -> tuple[bytes, list[int]]:
    """One message and the fds sent with it (``socket.recv_fds`` drops its ``flags``)."""
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(1 << 16, socket.CMSG_LEN(4 * fds.itemsize),
                                                flags)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


Answer = tuple[dict[str, Any], list[int]]


def _wait(sock: socket.socket, events: int) -> int:
    """Until the socket is ready for ``events`` (poll: a daemon holding many jobs' pipes
    has descriptors past select's 1024); the events it is ready for (a hang-up included)."""
    p = select.poll()
    p.register(sock, events)
    return sum(ev for _, ev in p.poll())


class RunnerClient:
    """Requests are answered in the order they were sent. ``request_many`` waits for its
    answers; ``request_many_later`` returns at once and its callback gets each answer on the
    event loop, so the daemon works on while the runner starts processes (the two then use
    both cores instead of taking turns). A waiting request meets the answers of earlier
    unanswered ones first and hands them to their callbacks."""

    def __init__(self, path: Path, env: dict[str, str]) -> None:
        self.path, self.env = path, env
        self.sock: socket.socket | None = None
        self.pid = 0
        self._spawned: int | None = None  # a runner this process started (to be reaped)
        self._waiting: deque[Callable[[Answer | RunnerLost], None]] = deque()
        self._unclaimed: deque[Answer] = deque()  # answers to ``request_many``, read early
        self._loop: asyncio.AbstractEventLoop | None = None  # reading answers, if any

    def request_many_later(self, msgs: list[dict[str, Any]],
                           done: Callable[[int, Answer | RunnerLost], None]) -> None:
        """Send the requests; ``done(i, answer)`` follows on the running event loop for each
        one as its answer arrives (in order), so the first answers are used while the runner
        still works through the rest."""
        loop = asyncio.get_running_loop()
        datas = self._encoded(msgs)
        sent = 0
        for attempt in (1, 2):
            sock = self._connected()
            if self._loop is None:
                self._loop = loop
                loop.add_reader(sock.fileno(), self._on_readable)
            try:
                for i in range(sent, len(datas)):
                    self._send(sock, datas[i])
                    self._waiting.append(functools.partial(done, i))
                    sent += 1
                return
            except OSError as e:
                lost = RunnerLost(f"the local runner went away: {e}")
                self._reset(f"sending a launch: {e}")
                if sent or attempt == 2:
                    for i in range(sent, len(datas)):
                        loop.call_soon(done, i, lost)
                    return

    def _on_readable(self) -> None:
        """Answers that have arrived, to their callbacks (the loop calls this)."""
        sock = self.sock
        # a callback may have dropped this connection (and made another): stop then, so
        # that a read of the old one's closed descriptor does not drop the new one
        while sock is not None and self.sock is sock:
            try:
                data, fds = _receive(sock, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError as e:
                data, fds, why = b"", [], f"reading its answers: {e}"
            else:
                why = "it closed the connection"
            if not data:
                self._reset(why)  # the runner went away: waiting callbacks learn it
                return
            if not self._waiting:
                for fd in fds:  # nobody asked: nothing to hand over
                    os.close(fd)
                continue
            self._waiting.popleft()((json.loads(data), fds))

    def request_many(self, msgs: list[dict[str, Any]]
                     ) -> list[tuple[dict[str, Any], list[int]] | RunnerLost]:
        """Send every request, then read every answer (the runner works through them while
        the rest are sent). A runner found gone at the first send is started again; one
        lost later leaves the unanswered requests as RunnerLost: they may have been done."""
        datas = self._encoded(msgs)
        sent = 0
        for attempt in (1, 2):
            sock = self._connected()
            try:
                for d in datas[sent:]:
                    self._send(sock, d)
                    sent += 1
                break
            except OSError as e:
                self._reset(f"sending a launch: {e}")
                if sent or attempt == 2:
                    lost = RunnerLost(f"the local runner went away: {e}")
                    return [lost] * len(datas)
        out: list[tuple[dict[str, Any], list[int]] | RunnerLost] = []
        for _ in datas:
            try:
                out.append(self._answer(sock))
            except RunnerLost as e:
                out += [e] * (len(datas) - len(out))
                break
        return out

    def watch(self, pid: int, runner_pid: int) -> int | None:
        """The runner's pipe for a job it started, or None when it is not this runner's
        (the one that started it is gone: then nobody will record the job's end)."""
        for _ in (1, 2):  # a connection found broken is made again, once
            try:
                sock = self._connected()
            except BackendError:
                return None
            if self.pid != runner_pid:
                return None
            try:
                self._send(sock, json.dumps({"op": "watch", "pid": pid}).encode())
                reply, fds = self._answer(sock)
            except (OSError, RunnerLost) as e:
                self._reset(f"asking it to watch job process {pid}: {e}")
                continue
            return fds[0] if reply.get("known") and fds else None
        return None

    # --- the connection ---------------------------------------------------------------
    @staticmethod
    def _encoded(msgs: list[dict[str, Any]]) -> list[bytes]:
        datas = [json.dumps(m).encode() for m in msgs]
        for d in datas:
            if len(d) > MAX_MESSAGE:
                raise BackendError(f"the job's argv and environment take {len(d)} bytes; "
                                   f"the local runner takes at most {MAX_MESSAGE}")
        return datas

    # The socket is non-blocking (uvloop makes every descriptor it watches so, and
    # _connect does the same for any loop): a burst of launches larger than its buffer
    # waits for room instead of failing as if the runner had gone.
    def _send(self, sock: socket.socket, data: bytes) -> None:
        """One request, sent once there is room; the answers that arrive meanwhile are
        taken in (a runner waiting for room for its answers would wait for us in turn)."""
        while True:
            try:
                sock.send(data)
                return
            except BlockingIOError:
                if _wait(sock, select.POLLIN | select.POLLOUT) & select.POLLIN:
                    self._take_answers(sock)

    def _take_answers(self, sock: socket.socket) -> None:
        """The answers that have arrived, each to its callback (on the loop: never from
        inside this call) or, past those, kept for ``_answer``."""
        while True:
            try:
                data, fds = _receive(sock, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            if not data:
                raise ConnectionResetError("the runner closed the connection")
            answer = (json.loads(data), fds)
            if self._waiting:
                assert self._loop is not None
                self._loop.call_soon(self._waiting.popleft(), answer)
            else:
                self._unclaimed.append(answer)

    def _answer(self, sock: socket.socket) -> Answer:
        """The answer to the oldest request sent through ``request_many`` or ``watch``;
        earlier ones' answers, met on the way, go to their callbacks."""
        while not self._unclaimed:
            try:
                self._take_answers(sock)
                if not self._unclaimed:
                    _wait(sock, select.POLLIN)
            except OSError as e:
                self._reset(f"reading an answer: {e}")
                raise RunnerLost(f"the local runner went away: {e}") from None
        return self._unclaimed.popleft()

    def connect(self) -> None:
        """Reach the runner, starting one if there is none: BackendError when that fails."""
        try:
            self._connected()
        except OSError as e:  # its log or socket file, say: the daemon's loop must not see it
            raise BackendError(f"cannot start the local runner: {e}") from e

    def _connected(self) -> socket.socket:
        if self.sock is not None:
            return self.sock
        sock = self._connect()
        if sock is None:
            self._start()
            deadline = time.monotonic() + START_TIMEOUT_S
            while sock is None:
                if self._spawned is None or not pid_alive(self._spawned) \
                        or time.monotonic() > deadline:
                    raise BackendError(f"the local runner did not start listening on "
                                       f"{self.path}; see {self._log_path()}")
                time.sleep(0.005)
                sock = self._connect()
        self.sock = sock
        return sock

    def _connect(self) -> socket.socket | None:
        """A connection to a runner of our protocol; None when there is none (nothing
        listens, or a runner of another protocol, whose path then goes to a new one).

        A connection that gets no answer is not "none": a runner killed after it took the
        connection leaves its keeper (which holds the socket, and the jobs) to start the
        next one, which is asked again. Starting a second keeper instead would read the
        journal before the first had recorded a job the dead runner had started, and start
        that job again."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sock.connect(str(self.path))  # waits while its backlog is full
            except TimeoutError:
                pass
            except OSError:  # no such socket, or nothing listens on it
                sock.close()
                return None
            try:
                sock.send(json.dumps({"op": "hello"}).encode())
                data = sock.recv(1 << 16)
                hello = json.loads(data) if data else None
            except (OSError, ValueError):
                hello = None
            if isinstance(hello, dict):
                break
            sock.close()
            if time.monotonic() > deadline:
                raise BackendError(f"the local runner on {self.path} did not answer in "
                                   f"{START_TIMEOUT_S:g} s; see {self._log_path()}")
            time.sleep(0.01)
        if hello.get("protocol") != PROTOCOL:
            # an older runner: it keeps its jobs (and this socket) until they end; the path
            # goes to a new one
            sock.close()
            with contextlib.suppress(OSError):
                self.path.unlink()
            return None
        self.pid = int(hello["pid"])
        try:  # a timeout of its own: the hello may have used up most of the first one
            sock.settimeout(START_TIMEOUT_S)
            sock.send(json.dumps({"op": "env", "env": self.env}).encode())
            sock.recv(1 << 16)
        except OSError as e:
            sock.close()
            raise BackendError(f"the local runner on {self.path} did not take the daemon's "
                               f"environment: {e}; see {self._log_path()}") from None
        sock.setblocking(False)
        return sock

    def _start(self) -> None:
        if len(os.fsencode(self.path)) >= _SUN_PATH_MAX:
            raise BackendError(f"cannot start the local runner: its socket path {self.path} "
                               f"is longer than a Unix socket's limit ({_SUN_PATH_MAX - 1})")
        self._reap()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a dead runner's socket
        log = os.open(self._log_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self._spawned = os.posix_spawn(
                sys.executable, [sys.executable, "-m", "rota.backends.runner", str(self.path)],
                self.env, setsid=True,
                file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                              (os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2)])
        except OSError as e:
            raise BackendError(f"cannot start the local runner: {e}") from e
        finally:
            os.close(log)

    def _log_path(self) -> Path:
        return self.path.with_suffix(".log")

    def _reset(self, why: str) -> None:
        """Drop the connection (the next request makes a new one); the requests waiting
        for an answer learn the runner went away, and the daemon's log says why."""
        if self.sock is not None:
            log.warning("the connection to the local runner (pid %s) is lost: %s%s", self.pid,
                        why, f"; {len(self._waiting)} launches unanswered" if self._waiting
                        else "")
            if self._loop is not None:
                self._loop.remove_reader(self.sock.fileno())
            self.sock.close()
        self.sock, self.pid = None, 0
        for _, fds in self._unclaimed:
            for fd in fds:
                os.close(fd)
        self._unclaimed.clear()
        if self._waiting:
            assert self._loop is not None
            lost = RunnerLost("the local runner went away")
            for cb in self._waiting:
                self._loop.call_soon(cb, lost)
            self._waiting.clear()
        self._loop = None
        self._reap()

    def _reap(self) -> None:
        """Collect a runner this process started that has exited (no zombie is left)."""
        if self._spawned is not None and not pid_alive(self._spawned):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._spawned, os.WNOHANG)
            self._spawned = None
