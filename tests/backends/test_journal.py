"""The local runner's journal: a start and an end line per job in one file per runner,
the end sent through the watch pipe too, read back by key, segments rotated and pruned."""

from __future__ import annotations

import json
import os
import select
from pathlib import Path

import pytest

from rota.backends.local import journal_writer
from rota.backends.local.backend import LocalBackend
from rota.backends.local.journal import JournalIndex, journal_dir, segment_name

from .conftest import Env, wait_exit


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def segments(status_dir: Path) -> list[Path]:
    return sorted(Path(journal_dir(str(status_dir))).glob("runner-*.journal"))


def test_a_job_makes_no_status_file_and_its_end_comes_through_the_pipe(env: Env) -> None:
    backend = env.backend("local")
    assert isinstance(backend, LocalBackend)
    req = env.req(["sh", "-c", "exit 7"])
    h = env.launch(backend, req)
    fd = backend.watch(h)
    assert fd is not None
    select.select([fd], [], [], 10)
    watched = os.read(fd, 4096)
    os.close(fd)
    end = json.loads(watched)
    assert end["key"] == str(req.status_path) and end["exit_status"] == 7
    assert not req.status_path.exists()  # one file per job now: its log
    [segment] = segments(req.status_path.parent)
    start, recorded_end = lines(segment)
    assert start == {"key": str(req.status_path), "shim_pid": h.pid, "pgid": h.pid,
                     "runner": h.extra["runner"], "runner_started": start["runner_started"],
                     "waiter": start["waiter"]}  # the job's parent, which recorded its end
    assert start["waiter"] not in (h.pid, h.extra["runner"])
    assert recorded_end == end
    # the pipe's record alone says how it ended: no journal needed
    segment.unlink()
    info = backend.collect(h, watched)
    assert info is not None
    assert (info.exit_code, info.signal, info.ended_at) == (7, None, end["ended_at"])


def test_without_the_pipe_the_end_is_read_from_the_journal(env: Env) -> None:
    backend = env.backend("local")
    reqs = [env.req(["sh", "-c", f"kill -{sig} $$"]) for sig in (15, 9)] + \
        [env.req(["true"])]
    handles = [env.launch(backend, r) for r in reqs]
    got = [wait_exit(backend, h) for h in handles]
    assert [(i.exit_code, i.signal) for i in got] == [(None, 15), (None, 9), (0, None)]
    status = backend.read_status(reqs[2].status_path)
    assert status is not None and status["shim_pid"] == handles[2].pid
    assert status["exit_code"] == 0 and status["runner"] == handles[2].extra["runner"]


def test_a_stale_status_file_is_removed_at_the_launch(env: Env) -> None:
    backend = env.backend("local")
    req = env.req(["sleep", "30"])
    req.status_path.parent.mkdir(parents=True)
    req.status_path.write_text(json.dumps({"shim_pid": 1, "exit_code": 0, "ended_at": 2.0}))
    h = env.launch(backend, req)
    assert not req.status_path.exists()
    assert backend.is_alive(h) and backend.collect(h) is None


def write(path: Path, *records: dict[str, object], tail: bytes = b"") -> None:
    with path.open("ab") as f:
        f.write(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)


def test_the_index_reads_whole_lines_and_a_start_replaces_an_older_life(tmp_path: Path) -> None:
    where = Path(journal_dir(str(tmp_path)))
    where.mkdir()
    key = str(tmp_path / "1-1.json")
    old, new = where / segment_name(50, 1000.0, 1), where / segment_name(60, 2000.0, 1)
    # a key's earlier life (a database started afresh in the same home): it ended
    write(old, {"key": key, "shim_pid": 5, "runner": 50, "runner_started": 1000.0},
          {"key": key, "shim_pid": 5, "exit_status": 0, "ended_at": 1001.0})
    write(new, {"key": key, "shim_pid": 6, "runner": 60, "runner_started": 2000.0},
          tail=b'{"key": "' + key.encode() + b'", "exit_st')  # the end, half written
    (where / "notes.txt").write_text("not a segment")
    index = JournalIndex()
    assert index.lookup(key) == {"shim_pid": 6, "runner": 60, "runner_started": 2000.0}
    with new.open("ab") as f:
        f.write(b'atus": 3, "ended_at": 2005.0}\nnot json\n')
    assert index.lookup(key) == {"shim_pid": 6, "runner": 60, "runner_started": 2000.0,
                                 "exit_status": 3, "ended_at": 2005.0}
    assert index.lookup(str(tmp_path / "2-1.json")) is None
    assert JournalIndex().lookup(str(tmp_path / "nowhere" / "1-1.json")) is None


def test_segments_rotate_and_a_jobs_end_goes_with_its_start(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """The runner hands each job a segment (a new one past SEGMENT_BYTES); its waiter, a
    fork holding that segment open, writes the job's start and, later, its end there."""
    monkeypatch.setattr(journal_writer, "SEGMENT_BYTES", 300)
    journal = journal_writer._Journal(str(tmp_path), 1234.5)
    keys = [str(tmp_path / f"{n}-1.json") for n in range(6)]
    held = []
    for n, key in enumerate(keys):
        path, fd = journal.reserve(key)
        held.append((path, os.dup(fd)))  # as the waiter's fork holds it
        line = {"key": key, "shim_pid": 100 + n, "pgid": 100 + n, "runner": os.getpid(),
                "runner_started": 1234.5}
        os.write(held[-1][1], (json.dumps(line) + "\n").encode())
    for n, key in enumerate(keys):
        line = {"key": key, "shim_pid": 100 + n, "exit_status": n, "ended_at": 9.0}
        os.write(held[n][1], (json.dumps(line) + "\n").encode())
        os.close(held[n][1])
    os.close(journal.fd)
    found = segments(tmp_path)
    assert len(found) >= 3 and all(p.stat().st_size < 300 + 600 for p in found)
    index = JournalIndex()
    for n, key in enumerate(keys):
        record = index.lookup(key)
        assert record is not None and record["shim_pid"] == 100 + n
        assert record["exit_status"] == n
        assert [json.loads(x)["key"] for x in Path(held[n][0]).read_text().splitlines()].count(
            key) == 2


def test_prune_keeps_active_keys_and_a_live_runners_newest_segment(tmp_path: Path) -> None:
    where = Path(journal_dir(str(tmp_path)))
    where.mkdir()
    k = [str(tmp_path / f"{n}-1.json") for n in range(4)]
    dead1, dead2 = where / segment_name(70, 100.0, 1), where / segment_name(70, 100.0, 2)
    live1, live2 = where / segment_name(80, 200.0, 1), where / segment_name(80, 200.0, 2)
    write(dead1, {"key": k[0], "shim_pid": 1, "runner": 70, "runner_started": 100.0})
    write(dead2, {"key": k[1], "shim_pid": 2, "runner": 70, "runner_started": 100.0})
    write(live1, {"key": k[2], "shim_pid": 3, "runner": 80, "runner_started": 200.0})
    write(live2, {"key": k[3], "shim_pid": 4, "runner": 80, "runner_started": 200.0},
          {"key": k[3], "shim_pid": 4, "exit_status": 0, "ended_at": 3.0})
    index = JournalIndex()
    asked: list[tuple[int, float]] = []

    def alive(pid: int, started: float) -> bool:
        asked.append((pid, started))
        return pid == 80

    gone = index.prune(str(tmp_path), active={k[1]}, runner_alive=alive)
    # dead1: nothing active; dead2: job 1 not stored yet; live1: closed, nothing active;
    # live2: runner 80 still writes it
    assert sorted(gone) == sorted([str(dead1), str(live1)])
    assert sorted(p.name for p in segments(tmp_path)) == sorted([dead2.name, live2.name])
    assert (70, 100.0) in asked and (80, 200.0) in asked
    assert index.lookup(k[0]) is None and index.lookup(k[2]) is None
    assert index.lookup(k[1]) is not None
    assert index.prune(str(tmp_path), active=set(), runner_alive=alive) == [str(dead2)]

