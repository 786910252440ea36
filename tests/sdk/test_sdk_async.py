"""`rota.AsyncClient`: the same essentials as the sync client, under asyncio."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sdk_helpers import Sdk, held, printer

import rota
from rota import JobState
from rota.errors import DaemonUnavailable, InvalidSpec, NotFound, WaitTimeout

Unique = Callable[[str], str]


def test_submit_list_get_and_act(sdk: Sdk, unique: Unique) -> None:
    name = unique("async")

    async def main() -> None:
        async with rota.AsyncClient(sdk.daemon.socket) as c:
            one = await c.submit(held(name))
            many = await c.submit([held(name) for _ in range(4)])
            kw = await c.submit(command=["true"], gpus=0.5, name=name, hold=True)
            assert isinstance(one, rota.Job) and len(many) == 4 and kw.gpus == 0.5
            again = await c.submit(held(name), idempotency_key=f"{name}-key")
            assert (await c.submit(held(name), idempotency_key=f"{name}-key")).id == again.id

            page = await c.list("held", name=name, limit=2)
            assert len(page.items) == 2 and page.next is not None
            walked = [j.id async for j in c.iter_jobs(name=name, page_size=2)]
            assert walked == sorted([one.id, *(j.id for j in many), kw.id, again.id],
                                    reverse=True)

            detail = await c.get(one.id)
            assert detail.spec["name"] == name and detail.state is JobState.HELD
            assert (await c.why(one)).code == "held"
            assert (await c.events(one.id))[-1].to_state == "held"
            assert (await c.release(one.id)).state is not JobState.HELD
            for j in [*many, kw, again]:
                assert (await c.cancel(j.id)).state is JobState.CANCELLED
            assert (await c.wait(one.id, timeout=60)).state is JobState.COMPLETED

    asyncio.run(main())


def test_wait_logs_and_timeout(sdk: Sdk, unique: Unique) -> None:
    async def main() -> None:
        async with rota.AsyncClient(sdk.daemon.socket) as c:
            job = await c.submit(command=printer("one", "two", pause=0.5), gpus=0.25,
                                 name=unique("alog"))
            followed = "".join([t async for t in c.logs(job.id, follow=True)])
            assert "one\n" in followed and "two\n" in followed
            done = await c.wait(job.id, timeout=30)
            assert (done.state, done.exit_code) == (JobState.COMPLETED, 0)
            assert "two\n" in "".join([t async for t in c.logs(job.id)])

            slow = await c.submit(command=["sleep", "60"], gpus=0, name=unique("aslow"))
            started = time.monotonic()
            with pytest.raises(WaitTimeout):
                await c.wait(slow.id, timeout=0.3)
            assert time.monotonic() - started < 10
            with pytest.raises(TimeoutError):  # what asyncio users catch
                await c.wait(slow.id, timeout=0.1)
            await c.cancel(slow.id)

    asyncio.run(main())


def test_machine_and_errors(sdk: Sdk, tmp_path: Path) -> None:
    async def main() -> None:
        async with rota.AsyncClient(sdk.daemon.socket) as c:
            assert len(await c.gpus()) == 4
            assert (await c.pause_gpu(2)).paused
            assert not (await c.resume_gpu(2)).paused
            assert (await c.health()).ok and (await c.queue()).counts is not None
            with pytest.raises(InvalidSpec):
                await c.submit(command=["true"], gpus=8)
            huge = await c.submit(command=["true"], gpus=8, force=True)
            try:
                page = await c.queue(limit=10_000, counts=False)
                assert huge.id in [j.id for j in page.waiting_jobs] and page.counts == {}
            finally:
                await c.cancel(huge)
            assert (await c.whoami()).via == "socket"
            with pytest.raises(NotFound, match="no job 99999999"):
                await c.get(99999999)
            with pytest.raises(NotFound):
                [t async for t in c.logs(99999999, follow=True)]
            with pytest.raises(InvalidSpec) as caught:
                await c.submit(command=["true"], gpus="lots")
            assert caught.value.field == "gpus"
        c = rota.AsyncClient(tmp_path / "rota.sock")
        try:
            with pytest.raises(DaemonUnavailable, match="rota server --detach"):
                await c.health()
        finally:
            await c.aclose()

    asyncio.run(main())
