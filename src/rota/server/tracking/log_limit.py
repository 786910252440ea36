"""A job's log kept under ``max_log_bytes``: its head, a marker line, its newest tail.

The job writes its log itself (the runner hands it the file, a session's shim or an
engine's poller appends to it), so the bound is kept where the daemon already looks at
every running job's log: each read of their output (``job_output.read_outputs``). A log
past the limit is compacted in place: the first half of the limit stays as it is (up to
a line's end), one line says how much was left out, and the newest output follows it::

    head (<= limit/2) | === rota: 1.2G of output left out here (...) === | tail

Offsets. Readers outside the daemon's loop (``rota logs``, a follower reconnecting with
``Last-Event-ID``, the time index of ``--since/--until``) count *logical* offsets: bytes
as the job wrote them, which a compaction never moves. The head is at the same place in
both; past it, a file offset is the logical one less ``shift``, and the marker stands in
for the last bytes left out. An offset that fell into the part left out reads on from
the marker. ``(head, shift)`` is kept beside the log in ``<log>.cut``. The output reader
of the loop (metrics) counts file offsets and is moved here, after it has read what the
tick gave it.

A compaction runs on the daemon's loop, between its reads, so no reader in the daemon
sees a log half compacted. Its cost is one in-kernel copy of the tail (about 0.2 s per
300 MiB here), once per half a limit of output.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rota.storage.owner_files import open_own_path
from rota.units import format_memory

if TYPE_CHECKING:
    from rota.server.jobs.running import Running
    from rota.server.tracking.outputs import OutputReader

log = logging.getLogger("rota.daemon")

#: The default ``max_log_bytes`` (docs/configuration.md says why this size).
DEFAULT_MAX_LOG_BYTES = 1 << 30
#: The smallest limit taken: a head, a marker and a tail need room.
MIN_MAX_LOG_BYTES = 64 << 10
#: The most a marker line takes (its text is far shorter).
MARKER_ROOM = 256
#: How far back from the head's end (and on from the tail's start) a line break is looked
#: for, so that both parts hold whole lines when the log has any.
_SCAN = 64 << 10
#: Bytes moved per copy: source and destination never overlap within one.
_COPY = 64 << 20
_CUT = struct.Struct("<8sQQ")
_CUT_MAGIC = b"rotacut1"


@dataclass(frozen=True)
class Cut:
    """Where a compacted log's head ends and how far its tail moved down."""

    head: int  # file offset == logical offset of the marker's start
    shift: int  # logical offset of a byte past the head, less its file offset

    def physical(self, offset: int) -> tuple[int, int]:
        """The file offset of logical ``offset``, and the logical offset it reads from
        (later than ``offset`` when that fell into the part left out: the marker's)."""
        if offset < self.head:
            return offset, offset
        marker = self.head + self.shift  # the marker's logical start
        if offset < marker:
            return self.head, marker
        return offset - self.shift, offset

    def logical(self, offset: int) -> int:
        """The logical offset of file offset ``offset``."""
        return offset if offset < self.head else offset + self.shift


def cut_path(log_path: Path) -> Path:
    return Path(f"{log_path}.cut")


def cut_of(log_path: Path) -> Cut | None:
    """The log's cut; None: never compacted (its offsets are the file's)."""
    try:  # (the daemon's own file, in its own folder)
        fd = os.open(f"{log_path}.cut", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        raw = os.pread(fd, _CUT.size, 0)
    finally:
        os.close(fd)
    if len(raw) != _CUT.size:
        return None
    magic, head, shift = _CUT.unpack(raw)
    return Cut(head, shift) if magic == _CUT_MAGIC else None


def logical_size(log_path: Path, size: int) -> int:
    """How many bytes the job has written to a log whose file holds ``size``."""
    cut = cut_of(log_path)
    return size if cut is None else cut.logical(size)


def _write_cut(log_path: Path, cut: Cut) -> None:
    """Replaced whole (a reader sees the old cut or the new one)."""
    tmp = cut_path(log_path).with_suffix(".cut.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        os.write(fd, _CUT.pack(_CUT_MAGIC, cut.head, cut.shift))
    finally:
        os.close(fd)
    os.replace(tmp, cut_path(log_path))


@dataclass(frozen=True)
class Moved:
    """A compaction, in file offsets: ``[head, start)`` was left out, a marker put at
    ``head`` and the bytes from ``start`` on moved down to ``dest``."""

    head: int
    start: int
    dest: int

    def map(self, offset: int) -> int:
        if offset < self.head:
            return offset
        return self.head if offset < self.start else offset - (self.start - self.dest)


class LogLimit:
    """The daemon's bound on its jobs' logs (one per daemon process, as the loop)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_LOG_BYTES) -> None:
        self.max_bytes = max_bytes

    def bound(self, runs: Iterable[Running]) -> None:
        """Compact each log past the limit; its output reader moves with it."""
        for run in runs:
            try:
                size = os.stat(run.log_path).st_size
            except OSError:
                continue
            if size <= self.max_bytes:
                continue
            try:
                moved = compact(run.log_path, self.max_bytes, uid=run.files.uid)
            except OSError as e:  # a log that is no plain file of a job's: left alone
                log.warning("job %s: its log was not bounded: %s", run.job_id, e)
                continue
            if moved is not None and run.output is not None:
                move_reader(run.output, moved)


#: the daemon's (``configure`` sets it from the settings at start-up)
LOG_LIMIT = LogLimit()


def configure(max_bytes: int) -> None:
    LOG_LIMIT.max_bytes = max_bytes


def compact(log_path: Path, limit: int, *, uid: int | None = None) -> Moved | None:
    """Cut the log down to its head, a marker and its newest tail, under ``limit`` bytes.

    The job goes on appending (its descriptor is O_APPEND) while this runs: what it writes
    during the copy is copied too (the size is read again until it holds still), and what
    it writes after the truncation lands at the new end. Only a write between the last
    look at the size and the truncation (microseconds) is lost. ``uid``: the job's
    account (None: the log's owner, as the runner made it in the daemon's folder)."""
    # opened as a file of the daemon's folder: no link followed, a plain file only, and one
    # with no other name (truncating a hard link would cut the file it names elsewhere)
    owner = os.lstat(log_path).st_uid if uid is None else uid
    fd = open_own_path(str(log_path), uid=owner, flags=os.O_RDWR)
    try:
        st = os.fstat(fd)
        if st.st_nlink != 1:
            raise PermissionError(f"{log_path} has {st.st_nlink} names")
        size = st.st_size
        if size <= limit:
            return None
        cut = cut_of(log_path)
        head = cut.head if cut is not None else _head_end(fd, max(1, limit // 2))
        start = _line_start(fd, size - max(0, limit - head - MARKER_ROOM), size)
        if start <= head + MARKER_ROOM:  # a head as large as a limit lowered since
            return None
        logical_start = start if cut is None else cut.logical(start)
        marker = _marker(logical_start - head, limit,
                         after_line=head == 0 or os.pread(fd, 1, head - 1) == b"\n")
        dest = head + len(marker)
        os.pwrite(fd, marker, head)  # over bytes left out: start > head + MARKER_ROOM
        end = _move_down(fd, start, dest, size)
        os.ftruncate(fd, dest + (end - start))
        _write_cut(log_path, Cut(head, logical_start - dest))
        return Moved(head, start, dest)
    finally:
        os.close(fd)


def _move_down(fd: int, start: int, dest: int, size: int) -> int:
    """Copy ``[start, ...)`` to ``dest``, again while the job appends; the end copied."""
    src, dst, end = start, dest, size
    while True:
        while src < end:  # forward: each piece's destination lies below its source
            n = os.copy_file_range(fd, fd, min(_COPY, start - dest, end - src), src, dst)
            if n <= 0:
                raise OSError(f"copying the log's tail stopped at {src}")
            src, dst = src + n, dst + n
        now = os.fstat(fd).st_size
        if now <= end:
            return end
        end = now


def _head_end(fd: int, want: int) -> int:
    """Just after the last line break before ``want`` (``want`` when none is near)."""
    lo = max(0, want - _SCAN)
    nl = os.pread(fd, want - lo, lo).rfind(b"\n")
    return lo + nl + 1 if nl >= 0 else want


def _line_start(fd: int, at: int, size: int) -> int:
    """The first line's start at or after ``at`` (``at`` when no line break is near)."""
    nl = os.pread(fd, min(_SCAN, size - at), at - 1).find(b"\n") if at > 0 else 0
    return at + nl if nl >= 0 else at


def _marker(left_out: int, limit: int, *, after_line: bool) -> bytes:
    text = (f"=== rota: {format_memory(left_out)} of output left out here ({left_out} "
            f"bytes; max_log_bytes = {format_memory(limit)}) ===\n")
    return (b"" if after_line else b"\n") + text.encode()


def move_reader(out: OutputReader, moved: Moved) -> None:
    """The output reader goes on where its place went: the same bytes when they were
    kept, else the marker (what it had not read of the part left out is not parsed)."""
    at = out.progress.log_offset + len(out.partial) + out.skipped
    if at > moved.head:
        if out.progress.log_offset >= moved.start:
            out.progress.log_offset = moved.map(out.progress.log_offset)
        else:  # its unfinished line, or what it had yet to read, was left out
            out.progress.log_offset = moved.head
            out.partial, out.skipped, out.partial_after_cr = b"", 0, False
            out.partial_seen = b""
        out.changed = True
    if out.until is not None:
        out.until = moved.map(out.until)

