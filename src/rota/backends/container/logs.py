"""Copying a container's output into the job's log file, exactly once across restarts.

Docker keeps the container's output (json-file, one entry per line or partial line) until
the container is removed; a thread of Rota's follows it and appends each entry to the
job's log. A cursor file next to the attempt's status file says how far the copy got:
entries copied and the log's size just after the last one. After a daemon restart the
copy starts again from Docker's first entry, skips the entries counted, and writes on.

The cursor is written just after each entry, so a crash between the two writes leaves
bytes in the log past the cursor's size: those are compared with what comes next, and
what is there already (the whole entry, or the start of it when the write itself was cut
short) is not written again. Bytes that are not the next entry (someone else wrote to the
log) are left alone and the copy goes on after them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_CURSOR_WIDTH = 48  # one fixed-size record, rewritten in place


@dataclass(frozen=True, slots=True)
class Cursor:
    entries: int = 0  # Docker log entries copied
    size: int = -1  # the log's size just after the last of them; -1: none copied yet


def cursor_path(status_path: str | Path) -> Path:
    return Path(f"{status_path}.logpos")


def start_cursor(status_path: str | Path, log_path: Path) -> None:
    """Before the container starts: nothing copied, and the log ends where it ends now
    (so that a crash before the first cursor write cannot copy an entry twice)."""
    size = log_path.stat().st_size if log_path.exists() else 0
    cursor_path(status_path).write_text(f"0 {size}\n", encoding="ascii")


def read_cursor(path: Path) -> Cursor:
    try:
        entries, size = path.read_text(encoding="ascii").split()[:2]
        return Cursor(int(entries), int(size))
    except (OSError, ValueError):
        return Cursor()


class LogCopy:
    """One pass of the copy: from the cursor to the end of ``frames``."""

    def __init__(self, log_path: Path, status_path: str | Path) -> None:
        self.log_path = log_path
        self.cursor_file = cursor_path(status_path)
        self.cursor = read_cursor(self.cursor_file)

    def run(self, frames: Iterable[bytes]) -> int:
        """Append the entries of ``frames`` (all of Docker's, from the first) not copied
        yet; the number appended."""
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        cur_fd = os.open(self.cursor_file, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            return self._copy(frames, log_fd, cur_fd)
        finally:
            os.close(log_fd)
            os.close(cur_fd)

    def _copy(self, frames: Iterable[bytes], log_fd: int, cur_fd: int) -> int:
        entries, size = self.cursor.entries, self.cursor.size
        past = self._past_cursor(os.fstat(log_fd).st_size)
        copied = 0
        for n, frame in enumerate(frames, 1):
            if n <= entries:
                continue
            if past:
                frame, past = _written_before(frame, past)
            if frame:
                _write_all(log_fd, frame)
                copied += 1
            entries, size = n, os.fstat(log_fd).st_size
            record = f"{entries} {size}".ljust(_CURSOR_WIDTH - 1) + "\n"
            os.pwrite(cur_fd, record.encode("ascii"), 0)
        self.cursor = Cursor(entries, size)
        return copied

    def _past_cursor(self, log_size: int) -> bytes:
        """What the log holds after the cursor's size (written before a crash)."""
        start = self.cursor.size
        if start < 0 or log_size <= start:
            return b""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read(log_size - start)


def _written_before(frame: bytes, past: bytes) -> tuple[bytes, bytes]:
    """(what of ``frame`` is still to write, what of ``past`` is left to match)."""
    if past.startswith(frame):
        return b"", past[len(frame):]
    if frame.startswith(past):  # the write was cut short
        return frame[len(past):], b""
    return frame, b""  # not ours: leave it, copy on


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def drop_cursor(status_path: str | Path) -> None:
    with contextlib.suppress(OSError):
        cursor_path(status_path).unlink()
