"""Which engine ids a job is handed over with (server.forwarding.engine_after), and the end
of an attempt its engine dropped for an unmet dependency: over an in-memory engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rota.backends import engines
from rota.backends.base import Handle, NotStarted
from rota.backends.engine import EngineCapabilities, EngineState, EngineStatus
from rota.backends.engine_backend import EngineBackend, exit_info
from rota.config import load_settings
from rota.core.lifecycle import JobState
from rota.core.outcome import StopReason
from rota.core.plan import Start
from rota.core.snapshot import PendingJob
from rota.core.spec import JobSpec
from rota.devices.simulated import SimulatedDevices
from rota.errors import BackendError
from rota.pools import SlurmPool
from rota.server.jobs.running import Running
from rota.server.loop.daemon import Daemon
from rota.server.loop.forwarding import engine_after, engine_ids
from rota.store.repo import Store
from rota_testing import until

from .fake import FakeEngine


def _backend(pool: str, dependencies: bool) -> EngineBackend:
    def make(secrets):  # type: ignore[no-untyped-def]
        return FakeEngine(secrets, capabilities=EngineCapabilities(dependencies=dependencies))
    return EngineBackend(pool, make)


@dataclass
class Table:
    """What engine_after reads of the daemon's job table."""

    states: dict[int, JobState] = field(default_factory=dict)
    running: dict[int, Running] = field(default_factory=dict)

    def state(self, job_id: int) -> JobState:
        return self.states[job_id]

    def add(self, run: Running, state: JobState) -> Running:
        self.running[run.job_id], self.states[run.job_id] = run, state
        return run


def _run(job_id: int, backend: EngineBackend, *, after: tuple[int, ...] = (),
         engine_id: str | None = None) -> Running:
    pool = backend.pool_name
    handle = None if engine_id is None else Handle(
        backend=backend.name, pid=0, status_path=f"/s/{job_id}-1.json",
        extra={"engine_id": engine_id, "pool": pool})
    return Running(job_id=job_id, attempt_id=job_id, attempt_no=1,
                   spec=JobSpec(command=["true"], pool=pool), gpus=(), milli=0, gpu_mem=None,
                   backend=backend, started_at=0.0,
                   pending=PendingJob(id=job_id, priority=0, seq=job_id, gpus_milli=0,
                                      after=after, pool=pool),
                   failures=0, log_path=Path("/l"), status_path=Path(f"/s/{job_id}-1.json"),
                   handle=handle)


def test_a_job_goes_with_the_engine_ids_of_its_unfinished_dependencies() -> None:
    hpc = _backend("hpc", dependencies=True)
    t = Table()
    t.add(_run(1, hpc, engine_id="101"), JobState.RUNNING)
    t.add(_run(2, hpc, engine_id="102"), JobState.STARTING)
    t.states[3] = JobState.COMPLETED
    child = _run(4, hpc, after=(1, 3, 2))
    assert engine_after(child, t) == ("101", "102")  # type: ignore[arg-type]
    assert engine_after(_run(5, hpc, after=(3,)), t) == ()  # type: ignore[arg-type]


@pytest.mark.parametrize("change", ["ended", "no id yet", "stopping", "other pool",
                                    "engine cannot hold"])
def test_a_dependency_that_moved_since_the_pass_fails_the_launch(change: str) -> None:
    hpc = _backend("hpc", dependencies=change != "engine cannot hold")
    t = Table()
    parent = t.add(_run(1, hpc if change != "other pool" else _backend("hpc2", True),
                        engine_id=None if change == "no id yet" else "101"), JobState.RUNNING)
    if change == "ended":
        del t.running[1]
        t.states[1] = JobState.FAILED
    if change == "stopping":
        parent.stop_reason = StopReason.REQUEUE
    with pytest.raises(BackendError, match=r"job 1 it depends on is .* not held by fake:hpc"):
        engine_after(_run(4, hpc, after=(1,)), t)  # type: ignore[arg-type]
    assert engine_ids([1], "hpc", t) == ({1: "101"} if change == "engine cannot hold"  # type: ignore[arg-type]
                                         else {})


def test_an_engine_drop_for_an_unmet_dependency_ends_as_not_started() -> None:
    dropped = EngineStatus("7", EngineState.ENDED, reason="CANCELLED (DependencyNeverSatisfied)",
                           ended_at=5.0, unmet_dependency=True)
    got = exit_info(dropped)
    assert isinstance(got, NotStarted) and "DependencyNeverSatisfied" in got.why
    assert (got.exit_code, got.signal, got.ended_at) == (None, None, 5.0)
    cancelled = exit_info(EngineStatus("8", EngineState.ENDED, reason="CANCELLED by 0"))
    assert cancelled is not None and not isinstance(cancelled, NotStarted)


# --- through an in-process daemon whose pool hpc is an in-memory engine ----------------------
@asynccontextmanager
async def _daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  ) -> AsyncIterator[tuple[Daemon, Store, list[FakeEngine]]]:
    made: list[FakeEngine] = []

    def make(pool, work_dir, *, secrets):  # type: ignore[no-untyped-def]
        # named as the pool's engine: the daemon keeps one backend per "slurm:hpc"
        made.append(FakeEngine(secrets, name="slurm",
                               capabilities=EngineCapabilities(dependencies=True)))
        return made[-1]
    monkeypatch.setattr(engines, "make", make)
    settings = load_settings(home=tmp_path / "home",
                             pools={"hpc": SlurmPool(engine="slurm", poll_every=0.05)})
    settings.home.mkdir(parents=True)
    store = Store.open(settings.db_url)
    d = Daemon(settings, store, SimulatedDevices("1x24G"))
    await d.start()
    try:
        yield d, store, made
    finally:
        await d.stop()
        store.close()


def _submit(d: Daemon, store: Store, after: list[int] | None = None) -> int:
    [row] = store.add_jobs([JobSpec(command=["true"], pool="hpc", after=after or [])],
                           user="u", source="test", now=d.clock())
    d.accept([row])
    return row.id


def test_a_child_goes_to_the_engine_with_its_parents_id_and_never_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        async with _daemon(tmp_path, monkeypatch) as (d, store, made):
            parent = _submit(d, store)
            await until(lambda: made and made[0].jobs, "the parent handed over")
            [parent_id] = made[0].jobs
            await until(lambda: d.running[parent].handle is not None, "the parent's handle")
            child = _submit(d, store, after=[parent])
            await until(lambda: len(made[0].jobs) == 2, "the child handed over")
            assert made[0].jobs[max(made[0].jobs, key=int)].after == (parent_id,)
            # the parent is requeued after a pass decided to hand over a second child
            late = _submit(d, store, after=[parent])
            d.running[parent].stop_reason = StopReason.REQUEUE
            d.launcher.start([Start(late, (), 0, None)], d.clock())
            await until(lambda: store.get_job(late).state == "pending", "the child back")
            [attempt] = store.attempts(late)
            assert attempt.outcome == "launch_failed" and "not held by" in (attempt.reason or "")
            assert store.get_job(late).failures == 0
            assert len(made[0].jobs) == 2 and store.get_job(child).state == "starting"

    asyncio.run(scenario())
