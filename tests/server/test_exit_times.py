"""An attempt's end is stored at the time its runner, shim or engine recorded, not when the
daemon learnt of it (rota.server.loop.exits)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rota.backends.base import ExitInfo
from rota.core.spec import JobSpec
from rota.server.loop.exits import recorded_end
from rota_testing import in_process_daemon, until


def test_the_recorded_end_is_kept_between_the_start_and_now() -> None:
    assert recorded_end(ExitInfo(0, None, 105.0), started_at=100.0, now=170.0) == 105.0
    assert recorded_end(ExitInfo(0, None, None), started_at=100.0, now=170.0) == 170.0
    # an engine's clock behind or ahead of ours
    assert recorded_end(ExitInfo(0, None, 90.0), started_at=100.0, now=170.0) == 100.0
    assert recorded_end(ExitInfo(0, None, 900.0), started_at=100.0, now=170.0) == 170.0


def test_an_exit_learnt_late_is_stored_at_its_recorded_end(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            [row] = store.add_jobs([JobSpec(command=["sleep", "30"], gpus=0.25)], user="u",
                                   source="test", now=d.clock())
            d.accept([row])
            await until(lambda: store.get_job(row.id).state == "running", "the job to run")
            run = d.running[row.id]
            d.exits.unwatch(run)
            await asyncio.sleep(0.5)  # the daemon learns of the end 0.5 s after it
            end = run.started_at + 0.01
            with d.batch():
                d.exits.finish(run, ExitInfo(3, None, end))
            job = store.get_job(row.id)
            [attempt] = store.attempts(row.id)
            assert (job.state, job.exit_code, job.ended_at) == ("failed", 3, end)
            assert (attempt.exit_code, attempt.ended_at) == (3, end)

    asyncio.run(scenario())
