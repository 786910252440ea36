"""The daemon's connection to the local runner under load, on the daemon's own event loop.

uvloop (the daemon's loop on Linux) makes every descriptor it watches non-blocking, the
runner's socket included: a burst of launches larger than the socket's send buffer then
met EAGAIN, the connection was dropped as if the runner had died, the launches not yet
sent failed, and a job already started was watched through its waiter, so its end was
learnt only once the waiter's other jobs had ended (a `true` seen running for minutes)."""

from __future__ import annotations

import asyncio
import os
import select
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from rota.backends.base import Launched, LaunchOutcome
from rota.backends.local.backend import LocalBackend

from .conftest import Env, wait_exit

#: more launch messages than the daemon's socket buffer holds at once (~200 KiB)
MANY = 300
#: each launch carries its own variables, as the daemon's do (a job's ROTA_* and more)
JOB_ENV = {f"ROTA_TEST_VAR_{i}": "x" * 60 for i in range(12)}

Runner = Callable[[Coroutine[Any, Any, Any]], Any]
LOOPS: dict[str, Runner] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.mark.parametrize("loop", list(LOOPS))
def test_a_burst_larger_than_the_socket_buffer_is_launched_whole(env: Env, loop: str) -> None:
    backend = env.backend("local")
    assert isinstance(backend, LocalBackend)
    go = env.tmp / "go"
    holder = env.launch(backend, env.req(  # keeps the waiter alive, as a long job would
        ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"]))
    reqs = [env.req(["true"], env=JOB_ENV) for _ in range(MANY)]

    async def launch_all() -> dict[int, LaunchOutcome]:
        got: dict[int, LaunchOutcome] = {}
        all_in = asyncio.Event()

        def answered(i: int, outcome: LaunchOutcome) -> None:
            got[i] = outcome
            if len(got) == len(reqs):
                all_in.set()

        assert backend.launch_later(reqs, answered)
        await asyncio.wait_for(all_in.wait(), 120)
        # a request answered in turn on the same connection, after the burst
        assert backend.runner is not None and backend.runner.watch(holder.pid,
                                                                   backend.runner.pid)
        return got

    try:
        got = LOOPS[loop](launch_all())
        failed = {i: o for i, o in got.items() if not isinstance(o, Launched)}
        assert not failed, f"{len(failed)} of {MANY} not launched: {[*failed.values()][:2]}"
        handles = [o.handle for o in got.values() if isinstance(o, Launched)]
        env.handles += handles
        # each end is seen through the job's own pipe (not its waiter's, which lives on
        # while the holder runs)
        for h in handles:
            fd = backend.watch(h)
            if fd is not None:
                try:
                    assert select.select([fd], [], [], 30)[0], f"job {h.pid}'s end not seen"
                finally:
                    os.close(fd)
        assert {wait_exit(backend, h).exit_code for h in handles} == {0}
    finally:
        go.touch()
    assert wait_exit(backend, holder, 30).exit_code == 0
