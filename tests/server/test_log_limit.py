"""A job's log past max_log_bytes keeps its head, one marker line and its newest tail,
compacted in place, and every reader stays where it was: the metrics reader (file
offsets, moved), the time index, ``read_log``'s logical offsets and followers."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rota.ml.parse import LineParser
from rota.server.tracking.log_limit import LogLimit, compact, cut_of
from rota.server.tracking.log_times import LogTimes, window
from rota.server.tracking.logstream import follow, read_log, read_range, read_tail
from rota.server.tracking.outputs import OutputReader, Progress, events_path
from rota.storage.owner_files import OwnerFiles

LIMIT = 256 << 10
MARKER = re.compile(rb"=== rota: \S+ of output left out here \((\d+) bytes; "
                    rb"max_log_bytes = 256K\) ===\n")


def write(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def lines(start: int, n: int) -> bytes:
    return b"".join(b"line %07d %s\n" % (i, b"x" * 40) for i in range(start, start + n))


def run_of(log: Path, output: OutputReader | None = None) -> Any:
    """What LogLimit.bound reads of a running job."""
    return SimpleNamespace(job_id=7, log_path=log, output=output, files=OwnerFiles(None))


def reader(log: Path) -> OutputReader:
    return OutputReader(job_id=7, log_path=log, events_path=events_path(log.parent / "7-1.json"),
                        parser=LineParser([]), progress=Progress(attempt=1))


def test_a_log_past_the_limit_keeps_head_marker_and_tail(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    head, tail = lines(0, 2000), lines(2000, 20_000)
    write(log, head + tail)
    written = len(head) + len(tail)

    LogLimit(LIMIT).bound([run_of(log)])

    data = log.read_bytes()
    assert len(data) <= LIMIT
    m = MARKER.search(data)
    assert m is not None
    kept_head, kept_tail = data[:m.start()], data[m.end():]
    assert len(kept_head) >= LIMIT // 2 - 100 and (head + tail).startswith(kept_head)
    assert kept_head.endswith(b"\n") and kept_tail.startswith(b"line ")  # whole lines
    assert (head + tail).endswith(kept_tail) and len(kept_tail) > LIMIT // 3
    assert int(m.group(1)) == written - len(kept_head) - len(kept_tail)  # what was left out

    # offsets count what the job wrote: the newest line is where it was written
    last = lines(21_999, 1)
    at, got = read_log(log, written - len(last), 1 << 20)
    assert (at, got) == (written - len(last), last)
    # an offset in the part left out reads on from the marker
    at, got = read_log(log, written // 2, 1 << 20)
    assert got.startswith(b"=== rota: ") and written // 2 < at < written - len(kept_tail)


def test_it_stays_bounded_as_the_job_goes_on_writing(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    limit, written = LogLimit(LIMIT), 0
    for k in range(10):
        chunk = lines(k * 5000, 5000)
        write(log, chunk)
        written += len(chunk)
        limit.bound([run_of(log)])
        assert log.stat().st_size <= LIMIT
    data = log.read_bytes()
    assert len(MARKER.findall(data)) == 1  # one marker, counting every compaction
    assert data.endswith(lines(49_999, 1))
    at, got = read_log(log, written - 60, 1 << 20)
    assert at == written - 60 and len(got) == 60


def test_metrics_written_after_a_compaction_are_read(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    out = reader(log)
    write(log, b"step 1 loss=9.0\n" + lines(0, 10_000))
    while not out.caught_up():
        out.read(1.0)
    out.drain()
    LogLimit(LIMIT).bound([run_of(log, out)])
    assert out.progress.log_offset == log.stat().st_size  # moved with the bytes
    write(log, b"step 2 loss=0.5\n")
    out.read(2.0)
    rows = out.drain()
    assert [(r["step"], r["value"]) for r in rows] == [(2, 0.5)]


def test_a_reader_left_in_the_part_left_out_goes_on_at_the_marker(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    out = reader(log)
    write(log, lines(0, 1000))
    out.read(1.0)  # it has read the head only
    write(log, lines(1000, 20_000) + b"step 5 loss=0.25\n")
    LogLimit(LIMIT).bound([run_of(log, out)])
    while not out.caught_up():
        out.read(2.0)
    assert [(r["step"], r["value"]) for r in out.drain()] == [(5, 0.25)]


def test_since_still_cuts_the_log_after_a_compaction(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    times = LogTimes(read_every_s=2.0)
    write(log, lines(0, 3000))
    times.note(log, 100.0, attempt_start=99.0, log_start=99.0)
    write(log, lines(3000, 3000))
    times.note(log, 102.0, attempt_start=99.0, log_start=99.0)
    LogLimit(LIMIT).bound([run_of(log)])
    late = lines(6000, 2000)
    write(log, late)
    times.note(log, 104.0, attempt_start=99.0, log_start=99.0)

    start, end = window(log, 7, 103.0, None, now=104.0, ended=False)
    assert end is None  # to the log's end
    at, got = read_log(log, start, 1 << 20)
    assert (at, got) == (start, late)
    # a window from before the compaction starts at the marker (its lines were left out)
    start, _ = window(log, 7, 101.0, None, now=104.0, ended=False)
    assert read_log(log, start, 100)[1].startswith(b"=== rota: ")


def test_a_follower_in_the_part_left_out_goes_on_at_the_marker(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    write(log, lines(0, 6000))
    place = 150_000  # where a follower had got to: in the part to be left out
    LogLimit(LIMIT).bound([run_of(log)])

    async def first() -> tuple[int, bytes]:
        async for at, data in follow(log, place, lambda: True):
            return at, data
        raise AssertionError("nothing followed")

    at, data = asyncio.run(first())
    assert at > place and data.startswith(b"=== rota: ") and data.endswith(lines(5999, 1))


def test_a_log_under_the_limit_is_left_as_it_is(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    write(log, lines(0, 100))
    before = log.read_bytes()
    LogLimit(LIMIT).bound([run_of(log)])
    assert log.read_bytes() == before and cut_of(log) is None


def test_a_log_swapped_for_a_link_or_a_fifo_gives_nothing(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"root:$6$hash\n" * 50_000)
    log = tmp_path / "7.log"
    log.symlink_to(secret)
    assert read_range(log, 0, 100) == b"" and read_tail(log, 100) == b""
    assert read_log(log, 0, 100)[1] == b""
    with pytest.raises(OSError):
        compact(log, LIMIT)
    assert secret.read_bytes() == b"root:$6$hash\n" * 50_000
    log.unlink()
    os.mkfifo(log)
    assert read_range(log, 0, 100) == b"" and read_log(log, 0, 100)[1] == b""


def test_a_log_with_a_second_name_is_never_cut(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.write_bytes(lines(0, 20_000))
    log = tmp_path / "7.log"
    os.link(other, log)
    with pytest.raises(PermissionError):
        compact(log, LIMIT)
    assert other.stat().st_size > LIMIT
