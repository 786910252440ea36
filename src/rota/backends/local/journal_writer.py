"""The local runner's journal, written: the segment each job's start and end records go to.

The journal's format, and how the daemon reads it back, are ``rota.backends.local.journal``'s.
The runner keeps one ``_Journal`` per status directory and reserves each job's room in a
segment before handing the job to its waiter; the waiter, a fork holding the segment open,
writes the records itself (so a runner's death loses none of them).

Standard library only (and the journal's names): the runner imports it at its top, before
any fork.
"""

from __future__ import annotations

import os

from rota.backends.local.journal import SEGMENT_BYTES, journal_dir, segment_name

#: what a job's two records take in its journal segment, about (the waiter writes them)
_RECORDS_BYTES = 300


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

    def reserve(self, key: str) -> tuple[str, int]:
        """The segment (path, fd) a job's records go to, written by its waiter."""
        self.segment()
        self.size += _RECORDS_BYTES + 2 * len(key)
        return self.path, self.fd

    def _next(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.seq += 1
        self.path = os.path.join(self.dir, segment_name(os.getpid(), self.started, self.seq))
        self.fd = _open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = os.fstat(self.fd).st_size
