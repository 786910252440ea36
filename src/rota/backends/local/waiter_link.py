"""The runner's end of its waiters (``rota.backends.local.waiter``): the one taking bursts.

The runner keeps one waiter taking burst after burst of jobs over a socketpair (a fork per
burst cost more than a trivial job). ``Waiters`` holds that link: it forks a waiter when
there is none (or the last one died idle), hands each burst over whole with the keeper told
first, and retires the waiter (closes the runner's end) when the runner says so: once it
has been handed ``WAITER_JOBS`` jobs, been idle ``WAITER_IDLE_S``, or died in a burst (the
keeper is then told to look for jobs it started without saying so).

Standard library only (and the waiter's and keeper's names): the runner imports it at its
top, and a waiter, a fork of the runner, imports nothing after the fork.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import select
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rota.backends.local import waiter
from rota.backends.local.keeper import intent
from rota.backends.local.keeper import lost as lost_starts


@dataclass
class _WaiterLink:
    """The runner's end of the waiter taking bursts."""

    pid: int
    sock: socket.socket
    jobs: int = 0  # handed to it so far
    used: float = 0.0  # its last burst (monotonic)
    segments: set[str] = field(default_factory=set)  # journal segments it holds
    bases: set[int] = field(default_factory=set)  # the daemons' environments it holds


def _hung_up(conn: socket.socket) -> bool:
    """Whether the other end has closed (messages it sent may still be waiting)."""
    p = select.poll()
    p.register(conn, select.POLLRDHUP)
    return any(ev & (select.POLLRDHUP | select.POLLHUP) for _, ev in p.poll(0))


def _message_limit() -> int:
    """The largest job message a waiter's socketpair carries (the kernel caps its send
    buffer at net.core.wmem_max, and a message at that buffer less a little)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, waiter.MESSAGE_BYTES)
        got = a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    return min(waiter.MESSAGE_BYTES, got - 256) - 1  # the burst marker's byte


class Waiters:
    """The waiter taking bursts now (``current``), if any, and how a burst reaches one."""

    def __init__(self, keeper: socket.socket, ends_w: int, holder: waiter.Holder,
                 tell_keeper: Callable[[bytes], None]) -> None:
        self.keeper, self.ends_w, self.holder = keeper, ends_w, holder  # each waiter's
        self.tell_keeper = tell_keeper  # the runner's: it waits for room in the socket
        self.current: _WaiterLink | None = None

    def hand_over_burst(self, starts: list[tuple[waiter.Start, bytes, bytes]]
                        ) -> _WaiterLink | None:
        """The burst sent whole to a waiter (the keeper told first): that waiter, or None
        when none took it."""
        try:
            for _ in range(2):  # a waiter that died idle took nothing: the next one
                link = self._waiter()
                if link is None:
                    return None
                since = time.clock_gettime(time.CLOCK_BOOTTIME)
                # the keeper first: a runner killed from here on leaves it to wait for the
                # waiter to take this burst whole and start it, or to drop it at EOF
                self.tell_keeper(intent(link.pid, since,
                                        [(s.key, s.segment) for s, _, _ in starts]))
                try:
                    for i, (s, data, base) in enumerate(starts):
                        if s.base and s.base not in link.bases:
                            link.sock.send(base)
                            link.bases.add(s.base)
                        waiter.send(link.sock, s, data, s.segment not in link.segments,
                                    i == len(starts) - 1)
                        link.segments.add(s.segment)
                except OSError as e:
                    # not taken whole, so none of it starts (closed here: EOF to it, if
                    # it lives, and it tells the keeper it is done)
                    print(f"rota runner: waiter {link.pid}: {e}", file=sys.stderr)
                    self.retire(dead=e.errno in (errno.EPIPE, errno.ECONNRESET))
                    continue
                return link
            return None
        finally:
            for s, _, _ in starts:
                os.close(s.log)
                os.close(s.watch)

    def _waiter(self) -> _WaiterLink | None:
        """The waiter taking bursts: the current one while it lives, else a new fork."""
        link = self.current
        if link is not None and _hung_up(link.sock):
            self.retire()  # it died idle (killed): it held no burst
            link = None
        if link is None:
            link = self.current = self._fork_waiter()
        return link

    def _fork_waiter(self) -> _WaiterLink | None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError as e:
            mine.close()
            theirs.close()
            print(f"rota runner: cannot fork a waiter: {e}", file=sys.stderr)
            return None
        if pid == 0:
            gc.disable()  # a collection would touch (and copy) every page of the runner
            waiter.serve(theirs, self.keeper, self.ends_w, self.holder)
        theirs.close()
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, waiter.MESSAGE_BYTES)
        return _WaiterLink(pid, mine, used=time.monotonic())

    def retire_if_idle(self) -> None:
        """Retire the current waiter once it has had no burst for ``WAITER_IDLE_S``."""
        if self.current and time.monotonic() - self.current.used > waiter.WAITER_IDLE_S:
            self.retire()

    def retire(self, dead: bool = False) -> None:
        """Close the current waiter's socket: it takes no more bursts, and exits once its
        jobs have ended. ``dead``: it died in a burst; once it is reaped (its jobs are the
        keeper's children then), the keeper finds a job it started without saying so."""
        link, self.current = self.current, None
        if link is None:
            return
        link.sock.close()
        if dead:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(link.pid, 0)
            self.tell_keeper(lost_starts(link.pid))
