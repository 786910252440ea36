"""The local runner's journal, read back.

The runner (``rota.backends.local.runner``) does not write a status file per attempt: it appends
one JSON line per event to a journal, a file per runner in ``journal/`` beside the status
files, a new segment past ``SEGMENT_BYTES``:

- at a job's start: ``{"key", "shim_pid", "pgid", "runner", "runner_started"}``;
- at its end: ``{"key", "shim_pid", "exit_status", "ended_at"}``.

``key`` is the attempt's status path, stored with the attempt before the launch, so a
record is found from the attempt alone. Why: creating a file costs ext4 20 µs to 0.8 ms of
CPU on the machines measured (docs/benchmarks.md), an append about 1 µs, and the runner
created two files per job.

The daemon does not read the journal in the normal course: the runner writes the end
line into the job's watch pipe as well. The journal is for what the daemon did not see:
jobs that ended while it was down (recovery) or a runner lost in the middle of a request.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

JOURNAL_DIR = "journal"
SEGMENT_BYTES = 4 << 20
_NAME = re.compile(r"^runner-(\d+)-(\d+)\.(\d+)\.journal$")


def journal_dir(status_dir: str) -> str:
    return os.path.join(status_dir, JOURNAL_DIR)


def segment_name(runner_pid: int, runner_started: float, seq: int) -> str:
    """A runner's segment: its pid and start (ms) tell runners apart, pid reuse included."""
    return f"runner-{runner_pid}-{int(runner_started * 1000)}.{seq}.journal"


def parse_line(line: bytes) -> dict[str, Any] | None:
    """One record; None for a line that does not parse (a disk that filled mid-write)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("key"), str) \
        else None


class JournalIndex:
    """What the journals say per key, read incrementally: each segment from where the last
    read of it stopped, to its last complete line.

    One per process (``JOURNALS``): recovery and the local backend ask it the same
    questions. Pruned with the segments (``prune``), so it holds only what live
    segments say."""

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}  # segment path -> bytes read
        self._keys: dict[str, set[str]] = {}  # segment path -> keys it names
        self._records: dict[str, dict[str, Any]] = {}  # key -> its records merged

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The merged records of ``key`` (start, then end); None when no journal names it."""
        self._catch_up(journal_dir(os.path.dirname(key)))
        got = self._records.get(key)
        return dict(got) if got is not None else None

    def prune(self, status_dir: str, active: set[str],
              runner_alive: Callable[[int, float], bool]) -> list[str]:
        """Delete the segments none of whose keys is in ``active`` (the attempts whose end
        the daemon has not stored yet), except a live runner's newest one, which it still
        writes. Returns the paths deleted."""
        where = journal_dir(status_dir)
        self._catch_up(where)
        newest: dict[tuple[int, int], tuple[int, str]] = {}
        for path in self._keys:
            m = _NAME.match(os.path.basename(path))
            if m and os.path.dirname(path) == where:
                runner = (int(m[1]), int(m[2]))
                newest[runner] = max(newest.get(runner, (-1, "")), (int(m[3]), path))
        keep = {path for (pid, ms), (_, path) in newest.items() if runner_alive(pid, ms / 1000)}
        gone = [p for p in list(self._keys) if os.path.dirname(p) == where and p not in keep
                and not self._keys[p] & active]
        for path in gone:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            for key in self._keys.pop(path):
                self._records.pop(key, None)
            self._offsets.pop(path, None)
        return gone

    def _catch_up(self, where: str) -> None:
        try:
            names = os.listdir(where)
        except OSError:
            return
        for name in sorted(names, key=_order):
            if _NAME.match(name):
                self._read_new(os.path.join(where, name))

    def _read_new(self, path: str) -> None:
        start = self._offsets.get(path, 0)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            size = os.fstat(fd).st_size
            data = os.pread(fd, size - start, start) if size > start else b""
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self._offsets[path] = start + end
        keys = self._keys.setdefault(path, set())
        for line in data[:end].splitlines():
            record = parse_line(line)
            if record is not None:
                key = record.pop("key")
                keys.add(key)
                if "runner" in record:  # a start: what an older life of this key said goes
                    self._records[key] = record
                else:
                    self._records.setdefault(key, {}).update(record)


def _order(name: str) -> tuple[int, int, int]:
    """Segments oldest first within a runner, so an end overrides its start."""
    m = _NAME.match(name)
    return (int(m[2]), int(m[1]), int(m[3])) if m else (0, 0, 0)


JOURNALS = JournalIndex()
