"""A start whose intent cannot be stored never looks started: in memory and in the store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rota.config import load_settings
from rota.core.lifecycle import JobState
from rota.core.spec import JobSpec
from rota.devices.simulated import SimulatedDevices
from rota.errors import StoreError
from rota.server.loop.daemon import Daemon
from rota.store.repo import Store
from rota_testing import kill_job_processes, until


def _daemon(tmp_path: Path) -> tuple[Daemon, Store]:
    settings = load_settings(home=tmp_path / "home")
    settings.home.mkdir(parents=True)
    store = Store.open(settings.db_url)
    return Daemon(settings, store, SimulatedDevices("2x24G")), store


def _submit(d: Daemon, store: Store, n: int) -> list[int]:
    rows = store.add_jobs([JobSpec(command=["sleep", "30"], gpus=0.5)] * n, user="u",
                          source="test", now=d.clock())
    d.accept(rows)
    return [r.id for r in rows]


async def _launched(store: Store, job_id: int) -> None:
    await until(lambda: store.get_job(job_id).state == "running", f"job {job_id} to start")


def test_one_refused_intent_leaves_that_job_queued(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        d, store = _daemon(tmp_path)
        await d.start()
        try:
            a, b = _submit(d, store, 2)
            # b is held behind the daemon's back (only a bug could do this): its intent is
            # not stored, so it must not start, and a starts regardless
            store.transition(b, JobState.PENDING, JobState.HELD, now=d.clock())
            d.schedule_pass()
            assert a in d.running and b not in d.running
            assert b in d.queue and str(d.job_state(b)) == "pending"
            await _launched(store, a)  # the runner answers while the loop goes on
            assert store.get_job(b).state == "held" and not store.attempts(b)
            store.transition(b, JobState.HELD, JobState.PENDING, now=d.clock())
            d.schedule_pass()  # the next pass starts it
            assert b in d.running
            await _launched(store, b)
        finally:
            await d.stop()
            kill_job_processes(tmp_path)
            store.close()

    asyncio.run(scenario())


def test_a_failed_commit_of_the_intents_undoes_them_all(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        d, store = _daemon(tmp_path)
        await d.start()
        try:
            ids = _submit(d, store, 3)
            real = store.launch_info

            def then_fail(job_ids: Any, **kw: Any) -> Any:
                got = real(job_ids, **kw)
                store._events.append({"job_id": None, "ts": 0.0, "kind": None,  # NOT NULL
                                      "message": None, "from_state": None, "to_state": None})
                return got

            monkeypatch.setattr(store, "launch_info", then_fail)
            with pytest.raises(StoreError):
                d.schedule_pass()
            assert not d.running and all(i in d.queue for i in ids)
            assert {str(d.job_state(i)) for i in ids} == {"pending"}
            assert {store.get_job(i).state for i in ids} == {"pending"}
            assert all(not store.attempts(i) for i in ids)
        finally:
            await d.stop()
            kill_job_processes(tmp_path)
            store.close()

    asyncio.run(scenario())


def test_a_job_no_backend_here_can_run_is_refused_at_submit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backends' capabilities are read before a job is queued: it is refused with a
    sentence instead of failing at its launch."""
    import dataclasses

    from rota.backends.base import Capabilities
    from rota.backends.local.backend import LocalBackend
    from rota.errors import InvalidSpec
    from rota.server.intake import Intake
    from rota.server.loop import backend_set

    class NoPinning(LocalBackend):
        capabilities = dataclasses.replace(Capabilities(), gpu_pinning=False)

    d, store = _daemon(tmp_path)
    try:
        intake = Intake(d)
        empty = tmp_path / "bin"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))
        with pytest.raises(InvalidSpec, match=r"^jobs\[0\]: session: tmux is not installed "
                                              "on this machine") as refused:
            intake.submit([{"command": ["true"], "session": "tmux", "gpus": 0}], user="u",
                          source="t")
        assert refused.value.field == "session"
        monkeypatch.setattr(backend_set, "make_backend",
                            lambda name, **_: NoPinning(tmp_path / "runner.sock"))
        with pytest.raises(InvalidSpec, match="the local backend cannot pin a job to GPUs"):
            intake.submit([{"command": ["true"], "gpus": 1}], user="u", source="t", force=True)
        assert store.count_by_state() == {}  # nothing was stored
        [row] = intake.submit([{"command": ["true"], "gpus": 0}], user="u", source="t")
        assert row.id in d.queue
    finally:
        store.close()
