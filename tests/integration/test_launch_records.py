"""A job started by the local runner is watched as soon as its answer comes, and stored as
running with the next write: an exit's transaction, a pass's, or a short timer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rota.core.spec import JobSpec
from rota.server.loop import daemon as daemon_module
from rota.server.loop.daemon import Daemon
from rota.store.repo import Store
from rota_testing import in_process_daemon, until


def _submit(d: Daemon, store: Store, command: list[str], n: int = 1) -> list[int]:
    rows = store.add_jobs([JobSpec(command=command, gpus=0.25)] * n, user="u", source="test",
                          now=d.clock())
    d.accept(rows)
    return [r.id for r in rows]


def test_a_started_job_is_stored_as_running_without_other_writes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            [job] = _submit(d, store, ["sleep", "30"])
            await until(lambda: store.get_job(job).state == "running", "the running state")
            [attempt] = store.attempts(job)
            handle = d.running[job].handle
            assert handle is not None and attempt.handle
            assert attempt.handle["pid"] == handle.pid
            assert not d.launcher.unrecorded

    asyncio.run(scenario())


def test_jobs_that_end_before_their_start_is_stored_keep_their_whole_timeline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no timer stores the starts: only the exits' own transactions can
    monkeypatch.setattr(daemon_module, "LAUNCH_RECORD_S", 3600.0)

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            jobs = _submit(d, store, ["sh", "-c", "exit 3"], 12)
            await until(lambda: all(store.get_job(j).state == "failed" for j in jobs),
                         "every job to fail")
            for j in jobs:
                assert [e.to_state for e in store.events(j) if e.to_state] == \
                    ["pending", "starting", "running", "failed"]
                [attempt] = store.attempts(j)
                assert attempt.handle is not None and attempt.exit_code == 3
                assert attempt.outcome == "failed"
            assert not d.launcher.unrecorded and not d.running

    asyncio.run(scenario())


def test_a_stopping_daemon_stores_the_starts_it_has_not_yet_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemon_module, "LAUNCH_RECORD_S", 3600.0)

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            [job] = _submit(d, store, ["sleep", "30"])
            await until(lambda: d.running.get(job) is not None
                         and d.running[job].handle is not None, "the runner's answer")
            assert store.get_job(job).state == "starting"  # answered, not yet stored
            await d.stop()
            assert store.get_job(job).state == "running"
            [attempt] = store.attempts(job)
            assert attempt.handle is not None and attempt.ended_at is None

    asyncio.run(scenario())


def test_a_running_daemon_deletes_ended_journal_segments_every_few_exits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mid-run, not only at the start: after TIDY_EVERY_EXITS exits a segment of a runner
    that is gone, naming only jobs stored as ended, is deleted; one naming a running job
    and the live runner's own segment stay."""
    import json
    import os

    from rota.backends.local.journal import journal_dir, segment_name

    monkeypatch.setattr(daemon_module, "TIDY_EVERY_EXITS", 2)

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            [long] = _submit(d, store, ["sleep", "30"])
            await until(lambda: store.get_job(long).state == "running", "the long job")
            where = Path(journal_dir(str(d.settings.status_dir)))
            live = set(os.listdir(where))
            ended, kept = where / segment_name(4_000_000, 1.0, 1), \
                where / segment_name(4_000_000, 1.0, 2)  # no such pid: a runner gone
            ended.write_text(json.dumps({"key": str(where / "old-1.json"), "shim_pid": 1,
                                         "runner": 4_000_000, "runner_started": 1.0}) + "\n")
            kept.write_text(json.dumps({"key": str(d.running[long].status_path),
                                        "shim_pid": 2, "runner": 4_000_000,
                                        "runner_started": 1.0}) + "\n")
            jobs = _submit(d, store, ["true"], 2)
            await until(lambda: all(store.get_job(j).state == "completed" for j in jobs),
                         "two exits")
            await until(lambda: not ended.exists(), "the ended segment to go")
            assert kept.exists() and live <= set(os.listdir(where))

    asyncio.run(scenario())
