"""A restarted daemon answers before its pending queue is read: the queue comes page by
page while the loop serves, no pass runs before the last page, and what changes meanwhile
(a cancel, a hold, a new job) is as memory says, not as a page read before it says."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rota.config import load_settings
from rota.core.lifecycle import JobState
from rota.core.spec import JobSpec
from rota.devices.simulated import SimulatedDevices
from rota.server.loop import recovery
from rota.server.loop.daemon import Daemon
from rota.store.repo import Store
from rota_testing import kill_job_processes, until


def test_the_queue_is_read_page_by_page_while_the_daemon_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    settings = load_settings(home=home)
    store = Store.open(settings.db_url)
    rows = store.add_jobs([JobSpec(command=["sleep", "60"], gpus=1, priority=k % 3,
                                   name=f"q{k}") for k in range(30)],
                          user="u", source="test", now=1.0)
    by_order = [r.id for r in sorted(rows, key=lambda r: (r.priority, r.id))]
    monkeypatch.setattr(recovery, "LOAD_PAGE", 4)
    pages: list[int] = []
    seen_running: list[int] = []
    real_page = store.pending_page

    async def scenario() -> tuple[list[int], list[int], int]:
        d = Daemon(settings, store, SimulatedDevices("2x24G"))
        cancelled, held = by_order[20], by_order[25]

        def paged(*a, **kw):  # type: ignore[no-untyped-def]
            got = real_page(*a, **kw)
            pages.append(len(got))
            seen_running.append(len(d.running))
            if len(pages) == 2:  # while the queue loads: the daemon takes requests
                with d.batch():
                    d.cancel(cancelled)  # not read yet: the store says so before its page
                    d.hold(held)
                    [new] = store.add_jobs([JobSpec(command=["sleep", "60"], gpus=1,
                                                    priority=-1, name="new")],
                                           user="u", source="test", now=2.0)
                    d.accept([new])
                    pages.append(-new.id)
            return got

        monkeypatch.setattr(store, "pending_page", paged)
        await d.start()
        try:
            assert not d.queue_loaded  # start() returned before the queue was read
            await until(lambda: d.queue_loaded, "the queue to be read", 30)
            await until(lambda: len(d.running) == 2, "two jobs to start", 30)
            started = sorted(d.running)
            order = [j.id for j in d.queue.ordered()]
            new_id = -min(pages)
        finally:
            await d.stop()
            kill_job_processes(tmp_path)
        return started, order, new_id

    try:
        started, order, new_id = asyncio.run(scenario())
    finally:
        store.close()
    cancelled, held = by_order[20], by_order[25]
    # 30 jobs, 4 a page; the two changed while the first pages were read never come
    assert [p for p in pages if p >= 0] == [4] * 7 + [0]
    assert seen_running == [0] * 8  # no pass while pages were read
    # the new job (priority -1) and the head of the queue started; the rest wait in order,
    # without the job cancelled and the one held while the queue was read
    assert started == sorted([new_id, by_order[0]])
    assert order == [j for j in by_order[1:] if j not in (cancelled, held)]
    store2 = Store.open(settings.db_url)
    try:
        assert store2.get_job(cancelled).state == JobState.CANCELLED.value
        assert store2.get_job(held).state == JobState.HELD.value
    finally:
        store2.close()
