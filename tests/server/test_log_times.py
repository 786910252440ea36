"""The time index beside each job log: what the daemon appends as a log grows, and the
byte range a window [since, until] cuts from it (by bisection, at line boundaries)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from rota.errors import Conflict
from rota.server.tracking import log_times
from rota.server.tracking.log_times import LogTimes, index_path, opened, window

R = 2.0  # the daemon's read interval in these tests


def grow(log: Path, text: str) -> None:
    with open(log, "a") as f:
        f.write(text)


def records(log: Path) -> list[log_times.Record]:
    with opened(log, 1) as idx:
        assert idx is not None
        return list(idx.records)


def test_a_record_says_when_the_bytes_since_the_previous_one_were_written(
        tmp_path: Path) -> None:
    log, times = tmp_path / "1.log", LogTimes(R)
    times.note(log, 100.0, attempt_start=99.0, log_start=99.0)  # no log yet
    log.touch()
    times.note(log, 101.0, attempt_start=99.0, log_start=99.0)  # an empty one
    assert not index_path(log).exists()
    grow(log, "a\n")
    times.note(log, 102.0, attempt_start=99.0, log_start=99.0)
    times.note(log, 104.0, attempt_start=99.0, log_start=99.0)  # no growth: no record
    grow(log, "bb\n")
    times.note(log, 106.0, attempt_start=99.0, log_start=99.0)
    assert [(r.t, r.lo, r.size) for r in records(log)] == [
        (102.0, 99.0, 2),  # the first bytes: written since the attempt started
        (106.0, 104.0, 5)]  # since the last look that saw 2 bytes
    assert index_path(log).stat().st_size == 16 + 2 * 20


def test_after_a_restart_or_between_attempts_the_interval_reaches_back_as_far_as_it_must(
        tmp_path: Path) -> None:
    log = tmp_path / "1.log"
    first = LogTimes(R)
    grow(log, "attempt 1\n")
    first.note(log, 10.0, attempt_start=9.0, log_start=9.0)
    grow(log, "while the daemon was down\n")
    restarted = LogTimes(R)  # knows no last look: the previous record's time is the bound
    restarted.note(log, 50.0, attempt_start=9.0, log_start=9.0)
    restarted.note(log, 50.0, attempt_start=9.0, log_start=9.0)  # indexed already
    restarted.forget(log)  # the attempt ended at its final read
    grow(log, "attempt 2\n")  # an hour later: nothing of it before its start
    restarted.note(log, 3700.0, attempt_start=3699.0, log_start=0.0)
    grow(log, "x\n")
    restarted.note(log, 3690.0, attempt_start=3699.0, log_start=0.0)  # the clock stepped back
    got = [(r.t, r.lo) for r in records(log)]
    assert got == [(10.0, 9.0), (50.0, 10.0), (3700.0, 3699.0), (3700.0, 3700.0)]


def test_a_log_from_before_indexes_were_kept_counts_from_the_jobs_submission(
        tmp_path: Path) -> None:
    log = tmp_path / "1.log"
    grow(log, "attempt 1, never indexed\nattempt 2\n")
    LogTimes(R).note(log, 500.0, attempt_start=400.0, log_start=100.0)
    assert [(r.t, r.lo) for r in records(log)] == [(500.0, 100.0)]


def write_index(log: Path, recs: list[tuple[float, float, int]]) -> None:
    head = struct.pack("<8sd", log_times.MAGIC, R)
    index_path(log).write_bytes(head + b"".join(
        struct.pack("<dfQ", t, t - lo, size) for t, lo, size in recs))


def synthetic(n: int, seed: int) -> tuple[list[tuple[float, float, int]], list[float]]:
    """n records of a log that grows by whole 10-byte lines at irregular times, with
    daemon reads every R seconds (and one long gap, as a restart); and each line's
    true write time."""
    rng = random.Random(seed)
    recs: list[tuple[float, float, int]] = []
    written: list[float] = []
    look, size = 1000.0, 0
    while len(recs) < n:
        gap = 600.0 if rng.random() < 0.001 else R
        new = [look + rng.uniform(0, gap) for _ in range(rng.randint(0, 3))]
        look_next = look + gap
        if new:
            written += sorted(new)
            size += 10 * len(new)
            recs.append((look_next, look, size))
        look = look_next
    return recs, written


def lines_in(start: int, end: int) -> range:
    assert start % 10 == 0 and end % 10 == 0
    return range(start // 10, end // 10)


@pytest.mark.parametrize("seed", range(5))
def test_a_window_holds_every_line_written_in_it_and_at_most_one_record_more_each_side(
        tmp_path: Path, seed: int) -> None:
    log = tmp_path / "1.log"
    recs, written = synthetic(3000, seed)
    log.write_bytes(b"123456789\n" * len(written))
    write_index(log, recs)
    lag = {}  # each line's record: written in (lo, t]
    for i, (t, lo, size) in enumerate(recs):
        for line in range((recs[i - 1][2] if i else 0) // 10, size // 10):
            lag[line] = (lo, t)
    rng = random.Random(seed)
    now = recs[-1][0] + 1
    for _ in range(300):
        since, until = sorted(rng.uniform(900, now + 10) for _ in range(2))
        start, end = window(log, 1, since, until, now=now, ended=True)
        got = lines_in(start, end if end is not None else log.stat().st_size)
        want = {i for i, w in enumerate(written) if since <= w <= until}
        assert want <= set(got), (since, until)
        for i in got:  # anything more was written in a record that reaches into the window
            lo, t = lag[i]
            assert t >= since and lo < until, (i, written[i], since, until)


def test_a_million_records_are_searched_by_bisection(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    log, n = tmp_path / "1.log", 1_000_000
    recs = [(1000.0 + 2 * i, 998.0 + 2 * i, 10 * (i + 1)) for i in range(n)]
    log.write_bytes(b"123456789\n" * 20)  # only the cut's line ends are read from it
    write_index(log, recs)
    assert index_path(log).stat().st_size == 16 + 20 * n  # 20 MB
    reads = 0
    real = log_times._record

    def counted(fd: int, i: int) -> log_times.Record:
        nonlocal reads
        reads += 1
        return real(fd, i)

    monkeypatch.setattr(log_times, "_record", counted)
    with opened(log, 1) as idx:
        assert idx is not None
        for k in (0, 1, 12_345, 500_000, n - 1):
            t = recs[k][0]
            assert idx.start(t) == (recs[k - 1][2] if k else 0)  # record k reaches t
            assert idx.start(t - 0.5) == (recs[k - 1][2] if k else 0)
            assert idx.end(t, now=t) == recs[k][2]  # record k+1 began after t
        assert idx.start(0) == 0 and idx.end(0, now=1e9) == 0
    searches = 5 * 3 + 2
    assert 0 < reads <= searches * 21  # log2(1e6) ~ 20 reads a search, not the file


def cut(log: Path, recs: list[tuple[float, float, int]], since: float | None,
        until: float | None, now: float = 1e6) -> str:
    write_index(log, recs)
    start, end = window(log, 7, since, until, now=now, ended=True)
    return log.read_bytes()[start:end].decode()


def test_the_range_is_cut_at_line_boundaries(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    log.write_bytes(b"one\ntwo\nthr" + b"ee\nfour\n")  # a line cut by a daemon read
    recs = [(10.0, 8.0, 11), (12.0, 10.0, 19)]
    # from 11: the record at 12 holds its bytes, from offset 11, mid-line: the next line
    assert cut(log, recs, 11.0, None) == "four\n"
    # until 9: the first record (8, 10] reaches back before 9: up to its last whole line
    assert cut(log, recs, None, 9.0) == "one\ntwo\n"
    assert cut(log, recs, 9.0, 11.0) == "one\ntwo\nthree\nfour\n"
    assert cut(log, recs, 13.0, None) == ""  # nothing written since
    assert cut(log, recs, None, 8.0) == ""  # nor before
    assert cut(log, recs, 11.0, 10.0) == ""  # since after until: an empty window


def test_output_the_daemon_has_not_indexed_yet_counts_as_just_written(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    log.write_bytes(b"old\nnew\n")
    recs = [(10.0, 8.0, 4)]
    assert cut(log, recs, 11.0, None, now=20.0) == "new\n"
    assert cut(log, recs, None, 19.0, now=20.0) == "old\nnew\n"  # within two reads of now
    assert cut(log, recs, None, 15.0, now=20.0) == "old\n"


def test_windows_that_cannot_be_cut_say_why(tmp_path: Path) -> None:
    log = tmp_path / "7.log"
    assert window(log, 7, 1.0, 2.0, now=30.0, ended=True) == (0, 0)  # no log: nothing
    log.write_bytes(b"from an older Rota\n")
    with pytest.raises(Conflict, match="job 7's log has no time index"):
        window(log, 7, 1.0, None, now=30.0, ended=True)
    # a running job's log is indexed at the daemon's next read: all of it is new
    assert window(log, 7, 29.0, None, now=30.0, ended=False) == (0, None)
    assert window(log, 7, 1.0, 2.0, now=30.0, ended=False) == (0, 0)
    index_path(log).write_bytes(b"not an index at all")
    with pytest.raises(Conflict, match="not one this Rota can read"):
        window(log, 7, 1.0, None, now=30.0, ended=True)


def test_a_log_of_rota_s_own_lines_gets_no_index_until_the_job_writes(
        tmp_path: Path) -> None:
    """A job that writes nothing makes one file, its log: Rota's header is not indexed.
    Once output comes, the first record reaches back to the attempt's start."""
    log, times = tmp_path / "3.log", LogTimes(R)
    grow(log, "=== rota: job 3 attempt 1 on GPUs 0\n")
    times.note(log, 100.0, attempt_start=99.0, log_start=99.0)
    times.note(log, 102.0, attempt_start=99.0, log_start=99.0)
    assert not index_path(log).exists()
    # an ended job that wrote nothing: its window is its (header) bytes, not an error
    assert window(log, 3, 50.0, None, now=200.0, ended=True) == (0, None)
    grow(log, "step 1 loss 2.0\n")
    times.note(log, 104.0, attempt_start=99.0, log_start=99.0)
    assert [(r.t, r.lo, r.size) for r in records(log)] == [(104.0, 99.0, log.stat().st_size)]
    # the job's own output looking like Rota's is still output past the first 4 KiB
    other = tmp_path / "4.log"
    grow(other, "=== rota: x\n" * 400)
    times.note(other, 100.0, attempt_start=99.0, log_start=99.0)
    assert index_path(other).exists()
