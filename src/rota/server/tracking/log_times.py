"""When each part of a job's log was written: a time index beside the log.

A log is the raw bytes a job's processes wrote; its lines carry no time. The daemon (the
only writer) appends a record to ``<log>.times`` whenever it sees the log has grown: on
every read of running jobs' output (each ``READ_EVERY_S``), for engine jobs too (their
poller copies the engine's output into the log between reads), and at the final read
when a job ends. The file is a 16-byte header (``MAGIC``, then the daemon's read interval
as a float64) and 20-byte records ``(t: float64, lag: float32, size: uint64)``, little
endian, meaning:

    at time ``t`` the log held ``size`` bytes, and the bytes from the previous record's
    ``size`` (0 for the first record) up to ``size`` were written in ``(t - lag, t]``.

``t - lag`` is when the daemon last looked and saw the previous size: one read interval
while it runs. Output written while the daemon was down gets the interval back to the
previous record (or the attempt's start): a window's edges are that coarse there. Neither
``t`` nor ``t - lag`` ever goes down from one record to the next, so both edges of a
window are found by bisection (about 20 reads for a million records, 20 MB).

A window ``[since, until]`` then holds every byte written in it, and at each edge at most
the bytes of one record written just outside it (one read interval while the daemon ran).
Bytes past the last record (written since the daemon's last look) count as written in the
last two read intervals. A truncated log (size going down) is not indexed further. Sizes
and offsets are logical (the bytes as the job wrote them): a log kept under max_log_bytes
(rota.server.tracking.log_limit) keeps its index as it is, and a window's edge that fell into the
part left out starts at the marker.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

from rota.errors import Conflict
from rota.server.tracking.log_limit import logical_size
from rota.server.tracking.logstream import line_end, line_start, open_log
from rota.server.tracking.outputs import READ_EVERY_S, ROTA_LINE

log = logging.getLogger("rota.daemon")

MAGIC = b"rotatim1"
#: a log holding only Rota's own lines (ROTA_LINE) gets no index yet, so a job that writes
#: nothing makes one file (its log), not two; past this size it holds the job's output too
_ROTA_ONLY_MAX = 4096
_HEAD = struct.Struct("<8sd")
_REC = struct.Struct("<dfQ")


def index_path(log_path: Path) -> Path:
    """Where a log's time index lives: beside it, ``12.log`` -> ``12.log.times``."""
    return log_path.with_name(log_path.name + ".times")


@dataclass(frozen=True)
class Record:
    t: float  # when the daemon saw the log hold ``size`` bytes
    lo: float  # the bytes since the previous record were written after this
    size: int


# --- writing (the daemon) --------------------------------------------------------------

@dataclass
class _Seen:
    size: int
    look: float  # when the daemon last saw the log at this size
    rota_only: bool = False  # it held Rota's own lines only: nothing indexed yet


def rota_lines_only(log_path: Path) -> bool:
    """Whether the log holds only lines Rota wrote (none of the job's output)."""
    try:  # (os calls: an io object per ended job cost more than the read)
        fd = open_log(log_path)
    except OSError:
        return False
    if fd is None:
        return False
    try:
        head = os.pread(fd, _ROTA_ONLY_MAX + 1, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    if len(head) > _ROTA_ONLY_MAX:
        return False
    return all(line.startswith(ROTA_LINE) for line in head.splitlines() if line)


class LogTimes:
    """The daemon's writer: remembers the size and time of its last look at each log, so a
    log that did not grow costs one ``stat``."""

    def __init__(self, read_every_s: float = READ_EVERY_S) -> None:
        self.read_every_s = read_every_s
        self._seen: dict[Path, _Seen] = {}

    def note(self, log_path: Path, now: float, *, attempt_start: float,
             log_start: float) -> None:
        """Index what the log holds now. ``attempt_start``: nothing not yet indexed was
        written before it (earlier attempts' output is); ``log_start``: the same for a log
        that has no index yet (before this change, earlier attempts' output was not)."""
        try:  # the bytes the job wrote (a log kept under max_log_bytes holds fewer)
            size = logical_size(log_path, log_path.stat().st_size)
        except FileNotFoundError:
            return
        except OSError as e:
            log.warning("time index of %s: %s", log_path, e)
            return
        seen = self._seen.get(log_path)
        if seen is not None and size == seen.size:
            seen.look = now
            return
        if size == 0:  # nothing to index (and no empty index file for it)
            return
        if (seen is None or seen.rota_only) and size <= _ROTA_ONLY_MAX \
                and rota_lines_only(log_path):
            self._seen[log_path] = _Seen(size, now, rota_only=True)
            return
        try:
            self._append(log_path, size, now, seen, attempt_start, log_start)
        except OSError as e:  # the log itself is fine: only its windows get coarser
            log.warning("time index of %s: %s", log_path, e)

    def forget(self, log_path: Path) -> None:
        """The attempt ended: the next one's output may come long after the last look."""
        self._seen.pop(log_path, None)

    def _append(self, log_path: Path, size: int, now: float, seen: _Seen | None,
                attempt_start: float, log_start: float) -> None:
        fd = os.open(index_path(log_path), os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                     0o644)
        try:
            last = _last_record(fd)
            prev_size = last.size if last else 0
            if size <= prev_size:  # indexed already (a restart), or the log was truncated
                self._seen[log_path] = _Seen(prev_size, now)
                return
            if seen is not None and not seen.rota_only:
                lo = max(seen.look, attempt_start)
            elif last is not None:
                lo = max(last.t, attempt_start)
            else:
                lo = log_start
            t = max(now, last.t if last else now)  # a clock stepping back keeps order
            lo = min(max(lo, last.t if last else lo), t)
            head = b"" if os.fstat(fd).st_size else _HEAD.pack(MAGIC, self.read_every_s)
            os.write(fd, head + _REC.pack(t, t - lo, size))
            self._seen[log_path] = _Seen(size, now)
        finally:
            os.close(fd)


def _last_record(fd: int) -> Record | None:
    n = _count(os.fstat(fd).st_size)
    return _record(fd, n - 1) if n else None


def _count(file_size: int) -> int:
    return max(0, (file_size - _HEAD.size) // _REC.size)


def _record(fd: int, i: int) -> Record:
    raw = os.pread(fd, _REC.size, _HEAD.size + i * _REC.size)
    t, lag, size = _REC.unpack(raw)
    return Record(t, t - lag, size)


# --- reading (the API) -----------------------------------------------------------------

class _Records(Sequence[Record]):
    """The records of an open index, read one at a time (for bisection)."""

    def __init__(self, fd: int, n: int) -> None:
        self.fd, self.n = fd, n

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> Record: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Record]: ...

    def __getitem__(self, i: int | slice) -> Record | Sequence[Record]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return _record(self.fd, i % self.n)


@dataclass
class TimeIndex:
    """An open index. With no records, every byte of the log counts as just written."""

    records: Sequence[Record]
    read_every_s: float

    def start(self, since: float) -> int:
        """Where the bytes written at or after ``since`` begin."""
        k = bisect.bisect_left(self.records, since, key=lambda r: r.t)
        if k == len(self.records):  # nothing indexed since then: only the unindexed rest
            k -= 1
            return self.records[k].size if k >= 0 else 0
        return self.records[k - 1].size if k > 0 else 0

    def end(self, until: float, now: float) -> int | None:
        """Where the bytes written at or before ``until`` end; None: at the log's end (its
        unindexed rest may have been written by then)."""
        j = bisect.bisect_left(self.records, until, key=lambda r: r.lo)
        if j == len(self.records):
            last_t = self.records[-1].t if self.records else 0.0
            if max(last_t, now - 2 * self.read_every_s) < until:
                return None
        return self.records[j - 1].size if j > 0 else 0


def window(log_path: Path, job_id: int, since: float | None, until: float | None, *,
           now: float, ended: bool, uid: int | None = None) -> tuple[int, int | None]:
    """The bytes ``[start, end)`` of the whole lines written from ``since`` to ``until``
    (unix times; None: no bound); ``end`` None: to the log's end, as it grows.

    ``ended``: the job has ended, so a log with no index was written before indexes were
    kept (a running job's log gets one at the daemon's next read). ``since`` after
    ``until`` is an empty window (the CLI and the SDK say so before asking)."""
    if since is None and until is None:
        return 0, None
    with opened(log_path, job_id) as found:
        idx = found or _unindexed(log_path, job_id, ended)
        start = idx.start(since) if since is not None else 0
        end = idx.end(until, now) if until is not None else None
    start = line_start(log_path, start, uid=uid)
    if since is not None and until is not None and since > until:
        return start, start
    return start, None if end is None else line_end(log_path, end, start, uid=uid)


def _unindexed(log_path: Path, job_id: int, ended: bool) -> TimeIndex:
    """A log with no index: a running job's, whose output is all just written (nothing
    or the first moments of it); an ended job's that wrote nothing (Rota's own lines
    only), or written before Rota kept indexes."""
    with contextlib.suppress(OSError):
        if ended and log_path.stat().st_size and not rota_lines_only(log_path):
            raise Conflict(f"job {job_id}'s log has no time index (it was written before "
                           "Rota kept one), so it cannot be cut by time; without since and "
                           "until all of it is there")
    return TimeIndex([], READ_EVERY_S)


@contextlib.contextmanager
def opened(log_path: Path, job_id: int) -> Iterator[TimeIndex | None]:
    """The log's time index; None when it has none."""
    try:
        fd = os.open(index_path(log_path), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, _HEAD.size, 0)
        if size and (len(head) < _HEAD.size or not head.startswith(MAGIC)):
            raise Conflict(f"job {job_id}'s log time index {index_path(log_path)} is not "
                           "one this Rota can read, so its log cannot be cut by time")
        every = _HEAD.unpack(head)[1] if size else READ_EVERY_S
        yield TimeIndex(_Records(fd, _count(size)), every)
    finally:
        os.close(fd)
