"""A job's output cannot make the daemon hold it all or parse it all at once: an
unfinished line is kept up to MAX_PARTIAL bytes, and a read stops parsing at its deadline
and goes on from the next line the next time, losing and repeating nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rota.ml.parse import LineParser
from rota.server.tracking.outputs import MAX_PARTIAL, MAX_READ, OutputReader, Progress, events_path

PAST = 0.0  # a deadline already gone: each read parses one line, then stops


def reader(tmp_path: Path) -> OutputReader:
    return OutputReader(job_id=7, log_path=tmp_path / "7.log",
                        events_path=events_path(tmp_path / "7-1.json"),
                        parser=LineParser(), progress=Progress(attempt=1))


def write(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def values(r: OutputReader, name: str) -> list[float]:
    return [x["value"] for x in r.drain() if x["name"] == name]


def test_a_long_unfinished_line_is_kept_only_up_to_its_cap(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.log_path, b"loss: 1.5 ")
    biggest = 0
    for i in range(6):  # 12 MiB without a newline, more than MAX_READ at a time
        write(r.log_path, b"x" * (2 * MAX_READ))
        for _ in range(3):
            r.read(float(i))
            biggest = max(biggest, len(r.partial))
    assert biggest <= MAX_PARTIAL
    assert r.partial.startswith(b"loss: 1.5 ")
    assert r.progress.log_offset == 0  # a restart reads the line again from its start
    write(r.log_path, b"\nstep 3: loss: 0.25\n")
    for _ in range(3):
        r.read(9.0)
    assert values(r, "loss") == [1.5, 0.25]  # the long line's start, then the next line
    assert r.partial == b"" and r.skipped == 0
    assert r.progress.log_offset == r.log_path.stat().st_size


def test_a_read_past_its_deadline_goes_on_next_time(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.log_path, b"".join(b"step %d: loss: %d.5\n" % (i, i) for i in range(10)))
    size = r.log_path.stat().st_size
    reads = 0
    while r.progress.log_offset < size:
        r.read(1.0, deadline=PAST)
        reads += 1
        assert reads < 50
    assert reads == 10  # one line each time
    assert values(r, "loss") == [i + 0.5 for i in range(10)]
    write(r.log_path, b"step 10: loss: 10.5\nstep 11: loss: 11.5\n")
    r.read(2.0, deadline=time.perf_counter() + 60)  # time enough: all of it at once
    assert values(r, "loss") == [10.5, 11.5]


def test_events_past_the_deadline_wait_too(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.events_path, b"".join(
        json.dumps({"kind": "metrics", "step": i, "metrics": {"loss": i}}).encode() + b"\n"
        for i in range(5)))
    for _ in range(5):
        r.read(1.0, deadline=PAST)
    assert values(r, "loss") == [0, 1, 2, 3, 4]
    assert r.progress.events_offset == r.events_path.stat().st_size


def test_an_ended_jobs_output_is_read_to_its_end_and_no_further(tmp_path: Path) -> None:
    """The final read of a job that wrote much just before it ended stops at its deadline
    like any; the reads that go on (job_output.read_ended) stop where it ended: a retry's
    output appended to the same log is not this attempt's."""
    r = reader(tmp_path)
    write(r.log_path, b"".join(b"step %d: loss: %d.5\n" % (i, i) for i in range(6)))
    write(r.log_path, b"step 6: loss: 6.5")  # its last line, no newline
    r.ended()  # its end: what the log holds now
    write(r.log_path, b"\nstep 0: loss: 99.5\n")  # the next attempt's
    reads = 0
    while not r.caught_up():
        r.read(1.0, final=True, deadline=PAST)
        reads += 1
        assert reads < 50
    assert values(r, "loss") == [i + 0.5 for i in range(7)]
    r.read(2.0, final=True, deadline=PAST)
    assert values(r, "loss") == []  # nothing past its end, nothing twice
