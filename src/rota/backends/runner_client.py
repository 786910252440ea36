"""The daemon's side of the local runner (``rota.backends.runner``): reach it, start it when
there is none (or only one that speaks another protocol), and ask it things."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from rota.backends.common import pid_alive
from rota.backends.runner import MAX_MESSAGE, PROTOCOL
from rota.errors import BackendError

START_TIMEOUT_S = 15.0


class RunnerLost(BackendError):
    """The runner went away in the middle of a request."""


class RunnerClient:
    def __init__(self, path: Path, env: dict[str, str]) -> None:
        self.path, self.env = path, env
        self.sock: socket.socket | None = None
        self.pid = 0
        self._spawned: int | None = None  # a runner this process started (to be reaped)

    def request_many(self, msgs: list[dict[str, Any]]
                     ) -> list[tuple[dict[str, Any], list[int]] | RunnerLost]:
        """Send every request, then read every answer (the runner works through them while
        the rest are sent). A runner found gone at the first send is started again; one
        lost later leaves the unanswered requests as RunnerLost: they may have been done."""
        datas = [json.dumps(m).encode() for m in msgs]
        for d in datas:
            if len(d) > MAX_MESSAGE:
                raise BackendError(f"the job's argv and environment take {len(d)} bytes; "
                                   f"the local runner takes at most {MAX_MESSAGE}")
        sent = 0
        for attempt in (1, 2):
            sock = self._connected()
            try:
                for d in datas[sent:]:
                    sock.send(d)
                    sent += 1
                break
            except OSError as e:
                self._reset()
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
                sock.send(json.dumps({"op": "watch", "pid": pid}).encode())
                reply, fds = self._answer(sock)
            except (OSError, RunnerLost):
                self._reset()
                continue
            return fds[0] if reply.get("known") and fds else None
        return None

    # --- the connection ---------------------------------------------------------------
    def _answer(self, sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 4)
        except OSError as e:
            self._reset()
            raise RunnerLost(f"the local runner went away: {e}") from None
        if not data:
            self._reset()
            raise RunnerLost("the local runner went away")
        reply: dict[str, Any] = json.loads(data)
        return reply, fds

    def _connected(self) -> socket.socket:
        if self.sock is not None:
            return self.sock
        sock = self._connect()
        if sock is None:
            self._start()
            deadline = time.monotonic() + START_TIMEOUT_S
            while sock is None:
                if time.monotonic() > deadline:
                    raise BackendError(f"the local runner did not start listening on "
                                       f"{self.path}; see {self._log_path()}")
                time.sleep(0.005)
                sock = self._connect()
        self.sock = sock
        return sock

    def _connect(self) -> socket.socket | None:
        """A connection to a runner of our protocol; None when there is none."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(str(self.path))
            sock.send(json.dumps({"op": "hello"}).encode())
            data = sock.recv(1 << 16)
            hello = json.loads(data) if data else {}
        except (OSError, ValueError):
            sock.close()
            return None
        if hello.get("protocol") != PROTOCOL:
            # an older runner: it keeps its jobs (and this socket) until they end; the path
            # goes to a new one
            sock.close()
            with contextlib.suppress(OSError):
                self.path.unlink()
            return None
        self.pid = int(hello["pid"])
        sock.send(json.dumps({"op": "env", "env": self.env}).encode())
        sock.recv(1 << 16)
        return sock

    def _start(self) -> None:
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

    def _reset(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.pid = None, 0
        self._reap()

    def _reap(self) -> None:
        """Collect a runner this process started that has exited (no zombie is left)."""
        if self._spawned is not None and not pid_alive(self._spawned):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._spawned, os.WNOHANG)
            self._spawned = None
