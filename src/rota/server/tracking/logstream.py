"""Following a job's log file while it runs, as raw bytes or as server-sent events.

The shim writes the log straight to a file, so following it is reading from an offset
until the job has ended and nothing is left to read (``tail -f`` with an end). Byte
offsets are the positions: a client that reconnects sends the last one it saw (the SSE
``Last-Event-ID``) and misses nothing and gets nothing twice. They count the bytes as the
job wrote them (``read_log``): a log kept under max_log_bytes (rota.server.tracking.log_limit)
moves none of them; what was left out reads as its marker.

Every read opens the log through the door to users' files (``open_log``): the job's
account owns it, and a link or fifo in its place gives nothing.
"""

from __future__ import annotations

import asyncio
import codecs
import errno
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from rota.server.tracking.log_limit import cut_of, logical_size
from rota.storage.owner_files import open_own_path

#: How often a followed log is read again while it does not grow.
POLL_S = 0.2
#: An SSE comment this often keeps proxies from closing a quiet stream.
KEEPALIVE_S = 15.0
CHUNK = 1 << 20
#: Bytes read at a time when looking for a line's start or end.
SCAN = 1 << 16


def open_log(path: Path, uid: int | None = None) -> int | None:
    """A descriptor of a job's log (or events file) through the door to users' files:
    opened without following a link, a plain file of the daemon or of account ``uid``
    (None: of the account that owns it, as the runner made it in the daemon's folder).
    None when there is none: missing, or swapped for a link, a fifo or another's file."""
    try:
        owner = os.lstat(path).st_uid if uid is None else uid
        return open_own_path(str(path), uid=owner)
    except (FileNotFoundError, PermissionError):  # (not the job's: a PermissionError)
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.ENOTDIR):
            return None
        raise


def read_range(path: Path, offset: int, limit: int, *, uid: int | None = None) -> bytes:
    """Up to ``limit`` bytes from file offset ``offset`` (nothing when the file is missing
    or is no plain file of its job's). One ``pread`` of what the file holds: a buffered
    read of ``limit`` would allocate all of it first, which costs more than the read when
    logs are small and are read per job."""
    fd = open_log(path, uid)
    if fd is None:
        return b""
    try:
        size = os.fstat(fd).st_size
        if offset >= size:
            return b""
        return os.pread(fd, min(limit, size - offset), offset)
    finally:
        os.close(fd)


def read_log(path: Path, offset: int, limit: int, *,
             uid: int | None = None) -> tuple[int, bytes]:
    """Up to ``limit`` bytes of the log from *logical* offset ``offset`` (as the job wrote
    them: a compaction moves none, rota.server.tracking.log_limit), and the logical offset they
    start at: later than ``offset`` when that was left out (they start at the marker). A
    read never crosses the head's end, where logical and file offsets part."""
    fd = open_log(path, uid)
    if fd is None:
        return offset, b""
    try:
        cut = cut_of(path)
        if cut is None:
            at, where = offset, offset
        else:
            where, at = cut.physical(offset)
            if where < cut.head:
                limit = min(limit, cut.head - where)
        size = os.fstat(fd).st_size
        if where >= size:
            return at, b""
        return at, os.pread(fd, min(limit, size - where), where)
    finally:
        os.close(fd)


def log_size(path: Path, uid: int | None = None) -> int:
    """The log's logical size: how many bytes its job has written (0: none, or no log)."""
    fd = open_log(path, uid)
    if fd is None:
        return 0
    try:
        return logical_size(path, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def read_tail(path: Path, limit: int, *, uid: int | None = None) -> bytes:
    """The last ``limit`` bytes of a file (all of it when smaller; nothing when missing)."""
    fd = open_log(path, uid)
    if fd is None:
        return b""
    try:
        size = os.fstat(fd).st_size
        at = max(0, size - limit)
        return os.pread(fd, size - at, at)
    finally:
        os.close(fd)


def line_start(path: Path, offset: int, *, uid: int | None = None) -> int:
    """The first line beginning at or after logical ``offset`` (the log's end when none
    does)."""
    at = offset - 1  # a line begins right after a \n
    while at >= 0:
        got, data = read_log(path, at, SCAN, uid=uid)
        if not data:
            return max(got, offset)
        if got != at:  # the part left out: the marker begins a line
            return got
        nl = data.find(b"\n")
        if nl >= 0:
            return at + nl + 1
        at += len(data)
    return 0


def line_end(path: Path, offset: int, floor: int, *, uid: int | None = None) -> int:
    """Just after the last line that ends before logical ``offset`` (its \n), scanning
    back no further than ``floor``; ``floor`` when no line does."""
    end = offset
    while end > floor:
        at = max(floor, end - SCAN)
        got, data = read_log(path, at, end - at, uid=uid)
        if got != at:  # within the part left out: the line before it ends at the marker
            return max(floor, min(got, end))
        nl = data.rfind(b"\n")
        if nl >= 0:
            return at + nl + 1
        end = at
    return floor


async def follow(path: Path, offset: int, ended: Callable[[], bool], *,
                 heartbeat_s: float | None = None, stop_at: int | None = None,
                 uid: int | None = None) -> AsyncIterator[tuple[int, bytes]]:
    """(logical offset, data) chunks from ``offset`` on, until ``ended()`` and the log is
    read (or up to ``stop_at``). A follower whose place was left out by a compaction goes
    on at the marker: the offset of the chunk then jumps ahead.

    ``ended`` is asked before the last read, so output written just before the end is
    never cut off. With ``heartbeat_s``, a quiet log yields an empty chunk that often.
    """
    quiet = 0.0
    while True:
        done = ended()
        want = CHUNK if stop_at is None else min(CHUNK, stop_at - offset)
        at, data = read_log(path, offset, want, uid=uid) if want > 0 else (offset, b"")
        if data:
            yield at, data
            offset = at + len(data)
            quiet = 0.0
            continue
        if done or want <= 0:
            return
        if heartbeat_s is not None and quiet >= heartbeat_s:
            quiet = 0.0
            yield offset, b""
        await asyncio.sleep(POLL_S)
        quiet += POLL_S


async def sse(path: Path, offset: int, ended: Callable[[], bool],
              end_event: Callable[[], dict[str, Any]], *,
              uid: int | None = None) -> AsyncIterator[bytes]:
    """The log as ``text/event-stream``.

    ``event: log`` carries ``{"offset", "next", "text"}`` as JSON (plain ``data:`` lines
    could not tell a partial line, such as a progress bar's, from a whole one) with
    ``id: next``; the last event is ``event: end`` with the job's final state. Text is
    decoded as UTF-8 without splitting a character across events: ``next`` counts only
    the bytes already sent as text, so a reconnect from it resumes at a character. An
    ``offset`` past the previous ``next`` says the bytes between were left out (the log
    passed max_log_bytes).
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    sent = end = offset
    yield b"retry: 2000\n\n"
    async for at, data in follow(path, offset, ended, heartbeat_s=KEEPALIVE_S, uid=uid):
        if not data:
            yield b": keep-alive\n\n"
            continue
        if at != end:  # a jump over what was left out: no character spans it
            decoder.reset()
            sent = at
        end = at + len(data)
        text = decoder.decode(data)
        nxt = end - len(decoder.getstate()[0])  # an unfinished character waits
        if text:
            yield _event("log", {"offset": sent, "next": nxt, "text": text}, nxt)
            sent = nxt
    rest = decoder.decode(b"", final=True)  # a character the log ends in the middle of
    if rest:
        yield _event("log", {"offset": sent, "next": end, "text": rest}, end)
    yield _event("end", end_event(), None)


def _event(kind: str, body: dict[str, Any], event_id: int | None) -> bytes:
    head = f"event: {kind}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return f"{head}data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()
