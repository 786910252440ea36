"""An engine job's log (copied from the engine's output by the adapter's poller) gets its
time index from the daemon's reads of running jobs' output, as every job's log does: the
very ``read_outputs`` the daemon's outputs loop and its final read call, over the adapter
and the in-memory engine of tests/backends/engine_backend, on a made-up clock."""

from __future__ import annotations

import heapq
import random
from pathlib import Path
from typing import Any

import pytest

from backends.engine_backend.fake import FakeEngine
from rota.backends.base import LaunchRequest
from rota.backends.engine import EngineJob
from rota.backends.engine_backend import EngineBackend
from rota.core.spec import JobSpec
from rota.server.jobs.job_output import read_outputs
from rota.server.jobs.running import Running
from rota.server.tracking.log_times import window

POLL, READ, EVERY = 1.0, 2.0, 0.3  # the poller's, the daemon's, the job's printing


def _request(home: Path) -> LaunchRequest:
    job = EngineJob(job_id=3, attempt=1, name="j3", argv=("train",), secret_env={},
                    grace=12.0, install="")
    return LaunchRequest(job_id=3, attempt=1, argv=["train"], shell=False, env={}, cwd=None,
                         conda=None, log_path=home / "logs" / "3.log",
                         status_path=home / "status" / "3-1.json", session_name="",
                         log_header="=== rota: job 3 attempt 1", engine_job=job)


def _running(req: LaunchRequest, backend: EngineBackend, started: float) -> Running:
    """What the daemon keeps of the job: no output reader needed for the index."""
    none: Any = None
    return Running(job_id=3, attempt_id=1, attempt_no=1,
                   spec=JobSpec.model_validate({"command": ["train"]}), gpus=(), milli=0,
                   gpu_mem=None, backend=backend, started_at=started, pending=none,
                   failures=0, log_path=req.log_path, status_path=req.status_path,
                   submitted_at=started)


@pytest.fixture
def ran(tmp_path: Path) -> tuple[Path, list[float]]:
    """The job prints L00..L19 every 0.3 s from t=1000; the poller copies every second,
    the daemon reads every two; the job ends, then the final poll and the final read."""
    engine: FakeEngine | None = None

    def make(secrets: Any) -> FakeEngine:
        nonlocal engine
        engine = FakeEngine(secrets)
        return engine

    adapter = EngineBackend("hpc", make, poll_every=3600.0)
    try:
        req = _request(tmp_path)
        run = _running(req, adapter, 999.9)
        adapter.watch(adapter.launch(req))
        assert engine is not None
        printed = [1000.0 + EVERY * i for i in range(20)]
        timeline = [(t, 0, i) for i, t in enumerate(printed)]
        timeline += [(1000.5 + POLL * k, 1, k) for k in range(8)]
        timeline += [(1001.0 + READ * k, 2, k) for k in range(4)]
        heapq.heapify(timeline)
        while timeline:
            now, what, i = heapq.heappop(timeline)
            if what == 0:
                engine.run("100", f"L{i:02d}\n".encode())
            elif what == 1:
                adapter.poll_once()
            else:
                read_outputs(none_store(), none_store(), [run], now)
        engine.end("100")
        adapter.poll_once()
        read_outputs(none_store(), none_store(), [run], 1008.6, final=True)
    finally:
        adapter.close()
    return req.log_path, printed


def none_store() -> Any:
    """No metrics come from this job (no output reader): the store is not touched."""
    return None


def lines(log: Path, since: float | None, until: float | None) -> list[int]:
    start, end = window(log, 3, since, until, now=2000.0, ended=True)
    text = log.read_bytes()[start:end].decode()
    return [int(line[1:]) for line in text.splitlines() if line.startswith("L")]


def test_the_pollers_copies_are_indexed_and_cut_by_time(
        ran: tuple[Path, list[float]]) -> None:
    log, printed = ran
    assert lines(log, None, None) == list(range(20))
    rng = random.Random(7)
    for _ in range(200):
        since, until = sorted(rng.uniform(999.0, 1008.0) for _ in range(2))
        got = lines(log, since, until)
        assert got == sorted(got) and (not got or got == list(range(got[0], got[-1] + 1)))
        # in the log once copied (a poll later at most); indexed at a read within READ
        assert {i for i, w in enumerate(printed) if since <= w <= until - POLL} <= set(got)
        assert all(since - READ - POLL < printed[i] <= until + READ for i in got), (
            since, until, got)


def test_a_window_after_the_last_line_is_empty_and_one_before_the_first_too(
        ran: tuple[Path, list[float]]) -> None:
    log, _ = ran
    assert lines(log, 1010.0, None) == []
    assert lines(log, None, 999.0) == []
