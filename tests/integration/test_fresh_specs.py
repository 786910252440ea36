"""A job's first launch takes the spec its submit checked (kept in memory) rather than
validating the stored one again: it must be the very spec the store gives back, and the
memory it takes must stay bounded."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path

import pytest

from rota.core.spec import JobSpec
from rota.server.intake import Intake
from rota.server.jobs import job_table
from rota_testing import in_process_daemon, until


def rich_spec(tmp_path: Path, **more: object) -> dict[str, object]:
    """A spec with the kinds of field a round trip through JSON could change: tuples and
    lists, durations and sizes in words, a path, a mapping, patterns."""
    return {"command": ["sleep", "30"], "gpus": 0.25, "name": "fresh", "cwd": str(tmp_path),
            "env": {"A": "1", "B": "two words"}, "tags": ["x", "y"], "time_limit": "2h",
            "retries": 2, "retry_backoff": 5, "gpu_mem": "4G", "conda": None,
            "metric_patterns": [r"acc=(?P<acc>\S+)"], "priority": 3, **more}


def test_a_first_launch_runs_the_spec_the_store_gives_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            intake = Intake(d)
            [row] = intake.submit([rich_spec(tmp_path)], user=getpass.getuser(),
                                  source="test")
            assert row.id in d.table.fresh_specs
            await until(lambda: d.running.get(row.id) is not None
                        and d.running[row.id].handle is not None, "the job's start")
            assert row.id not in d.table.fresh_specs  # taken by its launch
            stored = JobSpec.stored(store.get_job(row.id).spec)
            assert d.running[row.id].spec == stored
            assert d.running[row.id].spec.model_dump() == stored.model_dump()

    asyncio.run(scenario())


def test_ended_jobs_leave_no_spec_behind_and_a_large_submit_keeps_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_table, "FRESH_SPECS_MAX", 3)

    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            intake, me = Intake(d), getpass.getuser()
            held = intake.submit([rich_spec(tmp_path, hold=True, name=f"h{i}")
                                  for i in range(2)], user=me, source="test")
            assert set(d.table.fresh_specs) == {r.id for r in held}
            d.cancel(held[0].id)
            assert set(d.table.fresh_specs) == {held[1].id}  # a cancelled job's is dropped
            # 1 kept + 3 would pass the bound: none of these is kept; each launch reads the
            # store, and runs what was stored
            many = intake.submit([rich_spec(tmp_path, name=f"m{i}", command=["true"])
                                  for i in range(3)], user=me, source="test")
            assert set(d.table.fresh_specs) == {held[1].id}
            await until(lambda: all(store.get_job(r.id).state == "completed" for r in many),
                        "the three jobs' ends")

    asyncio.run(scenario())
