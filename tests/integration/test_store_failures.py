"""A batch the store could not commit: the daemon does not go on from a memory the store
does not share; it takes its work up again from the store and the runner's records, as a
restart would. Nothing is lost and nothing runs twice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from rota.core.spec import JobSpec
from rota.server.loop import daemon as daemon_module
from rota.server.loop.daemon import Daemon
from rota.store.repo import Store
from rota_testing import in_process_daemon, until


class _Faults:
    """Makes the store's next ``left`` commits fail (the batch's held writes raise as a
    full disk would), once armed."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch, *,
                 writes_only: bool = False) -> None:
        self.left = 0
        self.failed = 0
        real = store._flush

        def flush(c: Any) -> None:
            # writes_only: reads inside a batch go on working (a full disk); else they fail
            # too (a database that cannot be reached)
            writes = bool(store._held or store._events)
            if self.left > 0 and (writes or not writes_only):
                self.left -= 1
                self.failed += 1
                raise OperationalError("COMMIT", {}, Exception("database or disk is full"))
            real(c)

        monkeypatch.setattr(store, "_flush", flush)

    @contextmanager
    def failing(self, n: int = 1) -> Iterator[None]:
        self.left = n
        yield


def _fail_once(d: object, name: str, faults: _Faults, n: int = 1) -> list[int]:
    """The daemon part's ``name`` batch fails the first time it runs (its commit and the next
    n - 1 ones); returns a one-item list that counts how often it ran failing."""
    real: Callable[[], None] = getattr(d, name)
    fired: list[int] = []

    def once() -> None:
        if fired:
            real()
            return
        fired.append(1)
        faults.left = n
        real()

    setattr(d, name, once)
    return fired


def _submit(d: Daemon, store: Store, command: list[str]) -> int:
    [row] = store.add_jobs([JobSpec(command=command, gpus=0.25)], user="u", source="test",
                           now=d.clock())
    d.accept([row])
    return int(row.id)


def _ran(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def test_an_exit_that_could_not_be_stored_is_stored_from_the_runners_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the start is stored with the exit's own transaction, so both are lost with it
    monkeypatch.setattr(daemon_module, "LAUNCH_RECORD_S", 3600.0)
    marker = tmp_path / "runs"

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            faults = _Faults(store, monkeypatch)
            fired = _fail_once(d.exits, "record_exits", faults)
            job = _submit(d, store, ["sh", "-c", f"echo ran >> {marker}; exit 3"])
            await until(lambda: bool(fired), "the exit's batch")
            assert faults.failed == 1
            await until(lambda: store.get_job(job).state == "failed", "the stored end")
            assert not d.diverged
            row = store.get_job(job)
            assert row.exit_code == 3 and row.attempts == 1
            [attempt] = store.attempts(job)
            assert attempt.exit_code == 3 and attempt.handle is not None
            assert [e.to_state for e in store.events(job) if e.to_state] == \
                ["pending", "starting", "running", "failed"]
            # the daemon works on: the next job runs and its end is stored
            nxt = _submit(d, store, ["sh", "-c", f"echo ran >> {marker}"])
            await until(lambda: store.get_job(nxt).state == "completed", "the next job")
            assert _ran(marker) == 2

    asyncio.run(scenario())


def test_a_start_that_could_not_be_stored_is_taken_up_and_runs_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "runs"

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            faults = _Faults(store, monkeypatch)
            fired = _fail_once(d.launcher, "record_launches", faults)
            job = _submit(d, store, ["sh", "-c", f"echo ran >> {marker}; sleep 1"])
            await until(lambda: bool(fired), "the start's batch")
            assert faults.failed == 1
            await until(lambda: not d.diverged, "the work taken up again")
            assert store.get_job(job).state == "running"
            assert d.running[job].handle is not None  # re-adopted: watched again
            await until(lambda: store.get_job(job).state == "completed", "the job's end")
            assert store.get_job(job).attempts == 1 and _ran(marker) == 1
            [attempt] = store.attempts(job)
            assert attempt.exit_code == 0 and attempt.outcome == "completed"

    asyncio.run(scenario())


def test_while_the_store_keeps_failing_nothing_starts_and_the_daemon_tries_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exit's commit and the first two tries to read the work again fail; the third
    (1 s after the second) succeeds. Meanwhile no pass runs: a job submitted then waits."""
    monkeypatch.setattr(daemon_module, "LAUNCH_RECORD_S", 3600.0)
    marker = tmp_path / "runs"

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            faults = _Faults(store, monkeypatch)
            fired = _fail_once(d.exits, "record_exits", faults, n=3)
            first = _submit(d, store, ["sh", "-c", f"echo ran >> {marker}; exit 0"])
            await until(lambda: bool(fired), "the exit's batch")
            await until(lambda: faults.failed == 3, "two failed tries to take the work up")
            assert d.diverged
            # a submit is stored (its own commit) but no pass starts it while diverged
            waiting = _submit(d, store, ["sh", "-c", f"echo ran >> {marker}"])
            await asyncio.sleep(0.2)
            assert store.get_job(waiting).state == "pending" and waiting not in d.running
            assert d.diverged
            await until(lambda: not d.diverged, "the third try", seconds=10)
            await until(lambda: store.get_job(waiting).state == "completed",
                         "the waiting job")
            assert store.get_job(first).state == "completed"
            assert store.get_job(first).attempts == 1 and _ran(marker) == 2

    asyncio.run(scenario())


def test_the_work_is_taken_up_again_only_once_every_launch_is_answered(
        tmp_path: Path) -> None:
    """An unanswered launch would look never carried out to recovery (its start not yet in
    the runner's journal) and be queued again: the daemon waits for the answers first."""
    marker = tmp_path / "runs"

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            job = _submit(d, store, ["sh", "-c", f"echo ran >> {marker}; sleep 1"])
            await until(lambda: store.get_job(job).state == "running", "the job to run")
            d.launcher.in_flight += 1  # as if another launch were still unanswered
            d._resync_soon(0.0)
            await asyncio.sleep(0.3)
            assert d.diverged and job in d.running  # not forgotten yet
            d.launcher.in_flight -= 1
            await until(lambda: not d.diverged, "the work taken up again")
            assert d.running[job].handle is not None
            await until(lambda: store.get_job(job).state == "completed", "the job's end")
            assert store.get_job(job).attempts == 1 and _ran(marker) == 1

    asyncio.run(scenario())


@pytest.mark.parametrize("writes_only", [True, False], ids=["disk-full", "unreachable"])
def test_while_an_end_cannot_be_stored_reads_show_the_stored_state_then_the_whole_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes_only: bool) -> None:
    """The store refuses every write for a while (a full disk); a job ends meanwhile. Reads
    show it running, as stored, never half-ended; once the store takes writes again its end
    is stored with every field, at the time its runner recorded."""
    from rota.server.daemon_reads import live_facts

    go = tmp_path / "go"

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            faults = _Faults(store, monkeypatch, writes_only=writes_only)
            job = _submit(d, store, ["sh", "-c",
                                     f"while [ ! -e {go} ]; do sleep 0.01; done; exit 3"])
            await until(lambda: store.get_job(job).state == "running", "the job to run")
            faults.left = 10**6  # the disk is full from here on
            go.touch()
            await until(lambda: faults.failed >= 3, "the end and two tries to take it up")
            assert d.diverged
            for _ in range(3):
                row = store.get_job(job)
                assert (row.state, row.ended_at, row.exit_code) == ("running", None, None)
                assert live_facts(d, row)["state"] == "running"
                assert d.job_state(job).value == "running"
                assert job in d.live.running
                await asyncio.sleep(0.2)
            ended_by = d.clock()
            faults.left = 0  # space again
            await until(lambda: store.get_job(job).state == "failed", "the stored end",
                        seconds=40)
            row = store.get_job(job)
            assert row.exit_code == 3 and row.end_reason
            assert row.ended_at is not None and row.ended_at < ended_by
            [attempt] = store.attempts(job)
            assert (attempt.exit_code, attempt.ended_at) == (3, row.ended_at)
            assert attempt.outcome == "failed" and attempt.reason
            assert live_facts(d, row)["state"] == "failed" and not d.diverged

    asyncio.run(scenario())
