"""Point requests before bulk reads (rota.server.api.admission): a waiting job list lets the
requests about one job go first, and is never starved by them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota.core.spec import JobSpec
from rota.server.api import admission, build_app
from rota.server.api.admission import PointRequestsFirst
from rota.server.daemon_ports import DaemonPorts
from rota.server.intake import Intake
from rota_testing import PATIENCE_S, in_process_daemon

Request = tuple[str, str]
Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Runs a coroutine on the standard loop or on uvloop (the daemon's where installed):
    the order of a loop's turns is what the gate relies on."""
    factory = asyncio.new_event_loop
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory = uvloop.new_event_loop

    def run(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    return run


def _scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": []}


def _gate(started: list[Request], **kw: Any) -> PointRequestsFirst:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        started.append((scope["method"], scope["path"]))
    return PointRequestsFirst(app, **kw)


async def _all_at_once(gate: PointRequestsFirst, requests: list[Request]) -> None:
    """The requests arrive together: their tasks start in this order in one loop turn, as
    uvicorn starts the requests its connections delivered."""
    await asyncio.gather(*(gate(_scope(m, p), None, None) for m, p in requests))


ARRIVING = [("GET", "/v1/jobs"), ("GET", "/v1/jobs/1"), ("POST", "/v1/jobs"),
            ("GET", "/metrics"), ("GET", "/v1/jobs/2"), ("GET", "/v1/summary"),
            ("POST", "/v1/jobs/3/cancel")]


def test_point_requests_go_before_waiting_bulk_reads_which_keep_their_order(run: Run) -> None:
    started: list[Request] = []
    run(_all_at_once(_gate(started), ARRIVING))
    assert started == [("GET", "/v1/jobs/1"), ("POST", "/v1/jobs"), ("GET", "/v1/jobs/2"),
                       ("POST", "/v1/jobs/3/cancel"),
                       ("GET", "/v1/jobs"), ("GET", "/metrics"), ("GET", "/v1/summary")]


def test_without_bulk_reads_requests_start_in_arrival_order(run: Run) -> None:
    started: list[Request] = []
    run(_all_at_once(_gate(started, is_bulk=lambda scope: False), ARRIVING))
    assert started == ARRIVING


def test_other_scopes_pass_untouched() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    gate = PointRequestsFirst(app)
    asyncio.run(gate({"type": "lifespan"}, None, None))
    asyncio.run(gate({"type": "websocket", "path": "/v1/jobs"}, None, None))
    assert seen == ["lifespan", "websocket"] and gate.point_requests == 0


@pytest.mark.parametrize("max_yields", [1, 3, 8])
def test_a_flood_of_point_requests_does_not_starve_bulk_reads(max_yields: int, run: Run) -> None:
    """A point request starts on every loop turn, forever: each bulk read still goes, after
    at most max_yields turns for itself, and for each bulk read ahead of it."""
    started: list[Request] = []
    arrived: dict[str, int] = {}  # bulk read: how many requests had started when it came

    def is_bulk(scope: Any) -> bool:
        bulk = admission.is_bulk_read(scope)
        if bulk:
            arrived[scope["path"]] = len(started)
        return bulk

    gate = _gate(started, max_yields=max_yields, is_bulk=is_bulk)

    async def flood() -> None:
        n = 0
        while True:
            n += 1
            await gate(_scope("GET", f"/v1/jobs/{n}"), None, None)
            await asyncio.sleep(0)

    async def scenario() -> None:
        flooding = asyncio.create_task(flood())
        await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(gate(_scope("GET", "/v1/jobs"), None, None),
                                              gate(_scope("GET", "/v1/queue"), None, None)),
                               timeout=PATIENCE_S)
        flooding.cancel()

    run(scenario())
    first = started.index(("GET", "/v1/jobs"))
    second = started.index(("GET", "/v1/queue"))
    # one flood request per turn: a bulk read lets at most max_yields go ahead of it
    assert arrived["/v1/jobs"] < first <= arrived["/v1/jobs"] + max_yields
    # the next in line: one turn to hand the line over, then at most max_yields turns
    assert first < second <= first + 1 + 1 + max_yields


def test_max_yields_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_yields must be at least 1, not 0"):
        _gate([], max_yields=0)


@pytest.mark.parametrize("bulk_paths", [admission.BULK_READ_PATHS, frozenset()],
                         ids=["gated", "not-gated"])
def test_the_daemons_api_answers_a_get_before_a_list_sent_just_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bulk_paths: frozenset[str],
        run: Run) -> None:
    """The real app: a job list and a get arrive together, the list first. The get is
    answered first; without the gate (no bulk paths) the list would be."""
    monkeypatch.setattr(admission, "BULK_READ_PATHS", bulk_paths)

    async def scenario() -> list[str]:
        async with in_process_daemon(tmp_path) as (d, store):
            rows = store.add_jobs([JobSpec(command=["true"], hold=True)] * 3, user="me",
                                  source="test", now=d.clock())
            d.accept(rows)
            ports = DaemonPorts(d, Intake(d))
            transport = httpx.ASGITransport(app=build_app(ports, ports))
            answered: list[str] = []
            async with httpx.AsyncClient(transport=transport, base_url="http://rota") as c:
                async def call(what: str, path: str) -> None:
                    r = await c.get(path)
                    assert r.status_code == 200, r.text
                    answered.append(what)

                await asyncio.gather(call("list", "/v1/jobs"),
                                     call("get", f"/v1/jobs/{rows[0].id}"))
            return answered

    answered = run(scenario())
    assert answered == (["get", "list"] if bulk_paths else ["list", "get"])
