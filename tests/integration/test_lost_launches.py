"""Launches lost to what starts jobs (the local runner gone mid-request) are queued again
without charging a retry, but not forever: a job whose launch is lost every time fails,
saying so, and the count of losses in a row comes from the store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from rota.backends.base import LaunchFailed, LaunchOutcome, LaunchRequest
from rota.config import load_settings
from rota.core.lifecycle import JobState
from rota.core.outcome import LOST, LOST_LAUNCHES_MAX
from rota.core.spec import JobSpec
from rota.devices.simulated import SimulatedDevices
from rota.server.api.views import job_view, stored_facts, why_view
from rota.server.loop.daemon import Daemon
from rota.store.repo import Store
from rota_testing import kill_job_processes, until

LOST_TEXT = "the local runner went away"


class Clock:
    """The daemon's clock, moved on by the test (a lost launch waits before its next try)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _lose_launches(d: Daemon, monkeypatch: pytest.MonkeyPatch,
                   lose: Callable[[], bool]) -> None:
    """The local backend loses each launch while ``lose()`` says so, as when its runner is
    killed mid-request; otherwise it launches as ever."""
    backend = d.backends.get("local")
    real = backend.launch_many

    def launch_many(reqs: list[LaunchRequest]) -> list[LaunchOutcome]:
        if lose():
            return [LaunchFailed(f"job {r.job_id}: {LOST_TEXT}", retryable=True, lost=True)
                    for r in reqs]
        return real(reqs)

    monkeypatch.setattr(backend, "launch_many", launch_many)
    monkeypatch.setattr(backend, "launch_later", lambda reqs, done: False)


def _daemon(home: Path, clock: Clock) -> tuple[Daemon, Store]:
    settings = load_settings(home=home)
    home.mkdir(parents=True, exist_ok=True)
    store = Store.open(settings.db_url)
    return Daemon(settings, store, SimulatedDevices("2x24G"), clock=clock), store


def _try_again(d: Daemon, clock: Clock, store: Store, job_id: int) -> None:
    """Past the job's wait, and a pass."""
    row = store.get_job(job_id)
    if row.not_before is not None:
        clock.now = max(clock.now, row.not_before) + 0.1
    d.schedule_pass()


def test_a_launch_lost_every_time_fails_the_job_after_the_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()

    async def scenario() -> None:
        home = tmp_path / "home"
        d, store = _daemon(home, clock)
        await d.start()
        await d.queue_ready.wait()  # a restart reads its queue after start()
        try:
            _lose_launches(d, monkeypatch, lambda: True)
            [row] = store.add_jobs([JobSpec(command=["true"], gpus=0.5, retries=3)],
                                   user="u", source="test", now=clock())
            d.accept([row])
            for n in range(1, LOST_LAUNCHES_MAX):
                _try_again(d, clock, store, row.id)
                job = store.get_job(row.id)
                assert job.state == "pending", (n, job.state, job.end_reason)
                assert job.attempts == n and job.failures == 0  # no retry charged
                assert job.not_before is not None and job.not_before > clock.now
            # a restarted daemon goes on counting from the store
            await d.stop()
            store.close()
            d, store = _daemon(home, clock)
            await d.start()
            await d.queue_ready.wait()  # a restart reads its queue after start()
            _lose_launches(d, monkeypatch, lambda: True)
            _try_again(d, clock, store, row.id)
            job, attempts = store.job_with_attempts(row.id)
        finally:
            await d.stop()
            kill_job_processes(tmp_path)
            store.close()
        reason = f"its launch was lost {LOST_LAUNCHES_MAX} times in a row: job {row.id}: " \
                 f"{LOST_TEXT}"
        assert job.state == "failed" and job.end_reason == reason
        assert [a.outcome for a in attempts] == [LOST] * LOST_LAUNCHES_MAX
        why = why_view(job_view(job, stored_facts(job)), clock.now)
        assert why["code"] == "failed" and why["message"].endswith(f": {reason}"), why

    asyncio.run(scenario())


def test_a_launch_lost_once_then_run_is_not_charged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()

    async def scenario() -> None:
        d, store = _daemon(tmp_path / "home", clock)
        await d.start()
        await d.queue_ready.wait()  # a restart reads its queue after start()
        try:
            lost = [LOST_LAUNCHES_MAX - 1]  # as many in a row as may be lost, and no more

            def lose() -> bool:
                lost[0] -= 1
                return lost[0] >= 0

            _lose_launches(d, monkeypatch, lose)
            # no retries allowed: a loss charged as a failure would end it failed
            [row] = store.add_jobs([JobSpec(command=["true"], gpus=0.5)], user="u",
                                   source="test", now=clock())
            d.accept([row])
            for _ in range(LOST_LAUNCHES_MAX):
                _try_again(d, clock, store, row.id)
            await until(lambda: d.job_state(row.id).terminal, "the job to end", 60)
            job, attempts = store.job_with_attempts(row.id)
        finally:
            await d.stop()
            kill_job_processes(tmp_path)
            store.close()
        assert job.state == JobState.COMPLETED.value and job.failures == 0
        assert [a.outcome for a in attempts] == [LOST] * (LOST_LAUNCHES_MAX - 1) + \
            ["completed"]

    asyncio.run(scenario())
