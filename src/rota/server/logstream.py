"""Following a job's log file while it runs, as raw bytes or as server-sent events.

The shim writes the log straight to a file, so following it is reading from an offset
until the job has ended and nothing is left to read (``tail -f`` with an end). Byte
offsets are the positions: a client that reconnects sends the last one it saw (the SSE
``Last-Event-ID``) and misses nothing and gets nothing twice.
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

#: How often a followed log is read again while it does not grow.
POLL_S = 0.2
#: An SSE comment this often keeps proxies from closing a quiet stream.
KEEPALIVE_S = 15.0
CHUNK = 1 << 20
#: Bytes read at a time when looking for a line's start or end.
SCAN = 1 << 16


def read_range(path: Path, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``offset`` (nothing when the file is missing). One
    ``pread`` of what the file holds: a buffered read of ``limit`` would allocate all of it
    first, which costs more than the read when logs are small and are read per job."""
    try:  # never through a link, nor held by a pipe: a job run as another account owns
        # its log and events file, and the daemon reading them may be root
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b""
    except OSError as e:
        if e.errno == errno.ELOOP:
            return b""
        raise
    try:
        size = os.fstat(fd).st_size
        if offset >= size:
            return b""
        return os.pread(fd, min(limit, size - offset), offset)
    finally:
        os.close(fd)


def read_tail(path: Path, limit: int) -> bytes:
    """The last ``limit`` bytes of a file (all of it when smaller; nothing when missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return f.read(limit)
    except FileNotFoundError:
        return b""


def line_start(path: Path, offset: int) -> int:
    """The first line beginning at or after ``offset`` (the log's end when none does)."""
    at = offset - 1  # a line begins right after a \n
    while at >= 0:
        data = read_range(path, at, SCAN)
        if not data:
            return max(at, offset)
        nl = data.find(b"\n")
        if nl >= 0:
            return at + nl + 1
        at += len(data)
    return 0


def line_end(path: Path, offset: int, floor: int) -> int:
    """Just after the last line that ends before ``offset`` (its \n), scanning back no
    further than ``floor``; ``floor`` when no line does."""
    end = offset
    while end > floor:
        at = max(floor, end - SCAN)
        nl = read_range(path, at, end - at).rfind(b"\n")
        if nl >= 0:
            return at + nl + 1
        end = at
    return floor


async def follow(path: Path, offset: int, ended: Callable[[], bool], *,
                 heartbeat_s: float | None = None,
                 stop_at: int | None = None) -> AsyncIterator[tuple[int, bytes]]:
    """(offset, data) chunks from ``offset`` on, until ``ended()`` and the file is read
    (or up to ``stop_at``).

    ``ended`` is asked before the last read, so output written just before the end is
    never cut off. With ``heartbeat_s``, a quiet log yields an empty chunk that often.
    """
    quiet = 0.0
    while True:
        done = ended()
        want = CHUNK if stop_at is None else min(CHUNK, stop_at - offset)
        data = read_range(path, offset, want) if want > 0 else b""
        if data:
            yield offset, data
            offset += len(data)
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
              end_event: Callable[[], dict[str, Any]]) -> AsyncIterator[bytes]:
    """The log as ``text/event-stream``.

    ``event: log`` carries ``{"offset", "next", "text"}`` as JSON (plain ``data:`` lines
    could not tell a partial line, such as a progress bar's, from a whole one) with
    ``id: next``; the last event is ``event: end`` with the job's final state. Text is
    decoded as UTF-8 without splitting a character across events: ``next`` counts only
    the bytes already sent as text, so a reconnect from it resumes at a character.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    sent = end = offset
    yield b"retry: 2000\n\n"
    async for at, data in follow(path, offset, ended, heartbeat_s=KEEPALIVE_S):
        if not data:
            yield b": keep-alive\n\n"
            continue
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
