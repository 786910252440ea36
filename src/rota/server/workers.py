"""The daemon's API workers (rota.server.api_worker): each started on a TCP listener the
daemon binds (one per worker, on the same port), started again on it when it exits, stopped
with the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import time

from rota.config import Settings

log = logging.getLogger("rota.workers")
RESTART_WAIT_S = (0.5, 30.0)  # first and longest wait before a worker that exited restarts
STABLE_S = 60.0  # a worker up this long has its restart wait reset
STOP_WAIT_S = 5.0


class ApiWorkers:
    def __init__(self, settings: Settings, listeners: list[socket.socket]) -> None:
        self.settings, self.listeners, self.count = settings, listeners, len(listeners)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * self.count
        self._started_at = [0.0] * self.count
        self._wait = [RESTART_WAIT_S[0]] * self.count
        self._stopping = False

    def _spawn(self, i: int) -> None:
        fd = self.listeners[i].fileno()  # a restarted worker takes up its connections
        proc = subprocess.Popen([sys.executable, "-m", "rota.server.api_worker", "--fd", str(fd),
                                 "--daemon-pid", str(os.getpid()), "--slot", str(i)],
                                stdin=subprocess.PIPE, pass_fds=(fd,), start_new_session=True)
        assert proc.stdin is not None
        with proc.stdin:  # the settings the daemon read at its start, not read again
            proc.stdin.write(self.settings.model_dump_json().encode())
        self.procs[i] = proc
        self._started_at[i] = time.monotonic()
        log.info("API worker %d started (pid %d)", i, proc.pid)

    def start(self) -> None:
        for i in range(self.count):
            self._spawn(i)

    async def supervise(self, every: float = 0.5) -> None:
        """Start again a worker that exited, waiting longer each time it does so soon."""
        while not self._stopping:
            await asyncio.sleep(every)
            for i, proc in enumerate(self.procs):
                if proc is None or proc.poll() is None or self._stopping:
                    continue
                up = time.monotonic() - self._started_at[i]
                if up > STABLE_S:
                    self._wait[i] = RESTART_WAIT_S[0]
                log.warning("API worker %d (pid %d) exited with code %s after %.0f s; "
                            "starting it again in %.1f s", i, proc.pid, proc.returncode, up,
                            self._wait[i])
                self.procs[i] = None
                await asyncio.sleep(self._wait[i])
                self._wait[i] = min(2 * self._wait[i], RESTART_WAIT_S[1])
                if not self._stopping:
                    self._spawn(i)

    def stop(self) -> None:
        self._stopping = True
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for p in live:
            p.terminate()
        deadline = time.monotonic() + STOP_WAIT_S
        for p in live:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(1.0)
        for listener in self.listeners:
            listener.close()
