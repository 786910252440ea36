"""The API's side of the newcomer fixes, on an in-process daemon with 2 simulated GPUs of
24 GiB: jobs it can never run are refused unless forced (in the words `rota why` uses),
templates whose packages are missing are refused naming them, a draining daemon says so
in the submit answer, and users can be removed."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota.server.api import build_app, tcp_app
from rota.server.daemon_ports import DaemonPorts
from rota.server.intake import Intake
from rota.server.loop.daemon import Daemon
from rota_testing import in_process_daemon, until


@asynccontextmanager
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Daemon, Any]]:
    """The owner's client (the socket), the daemon, and a maker of TCP clients by token."""
    async with in_process_daemon(tmp_path) as (d, _store):
        ports = DaemonPorts(d, Intake(d))
        app = build_app(ports, ports)
        opened: list[httpx.AsyncClient] = []

        def over_tcp(token: str) -> httpx.AsyncClient:
            c = httpx.AsyncClient(transport=httpx.ASGITransport(app=tcp_app(app)),
                                  base_url="http://rota",
                                  headers={"Authorization": f"Bearer {token}"})
            opened.append(c)
            return c

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://rota") as owner:
            try:
                yield owner, d, over_tcp
            finally:
                for c in opened:
                    await c.aclose()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_job_this_machine_can_never_run_is_refused_unless_forced(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with api(tmp_path) as (c, d, _):
            ok = {"command": ["true"], "gpus": 0, "hold": True}
            r = await c.post("/v1/jobs", json={"jobs": [ok, {"command": ["true"], "gpus": 4}]})
            assert r.status_code == 422, r.text
            assert r.headers["content-type"] == "application/problem+json"
            detail = r.json()["detail"]
            assert detail.startswith("jobs[1]: needs 4 whole GPUs but only 2 GPUs exist")
            assert "--force" in detail
            assert (await c.get("/v1/jobs")).json()["jobs"] == []  # all or nothing
            r = await c.post("/v1/jobs", json={"jobs": [{"command": ["true"],
                                                         "gpu_mem": "30G"}]})
            assert r.status_code == 422
            assert "the largest of its GPUs has 24" in r.json()["detail"]
            before = d.last_plan
            r = await c.post("/v1/jobs", json={"jobs": [{"command": ["true"], "gpus": 4}],
                                               "force": True})
            assert r.status_code == 201, r.text
            job_id = r.json()["jobs"][0]["id"]

            async def why() -> dict[str, Any]:
                return dict((await c.get(f"/v1/jobs/{job_id}/why")).json())

            # kept out of the passes (it can never fit here), it still has its reason
            await until(lambda: d.last_plan is not before, "a pass after the submit")
            assert d.last_plan.reason(job_id) is None
            w = await why()
            assert w["code"] == "unsatisfiable"
            assert w["message"] == "needs 4 whole GPUs but only 2 GPUs exist"
    run(scenario())


def test_a_template_whose_packages_are_missing_is_refused_naming_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))

    async def scenario() -> None:
        async with api(tmp_path) as (c, _, _):
            job = {"command": ["python", "-m", "x"], "gpus": 0,
                   "tags": ["template:nanogpt-shakespeare"]}
            r = await c.post("/v1/jobs", json={"jobs": [job]})
            assert r.status_code == 422
            assert r.json()["detail"] == (
                "jobs[0]: template 'nanogpt-shakespeare' needs torch, which is not "
                "installed here: pip install 'rota[ml]'")
    run(scenario())


def test_a_draining_daemon_says_so_when_a_job_is_submitted(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with api(tmp_path) as (c, _, _):
            job = {"jobs": [{"command": ["true"], "gpus": 0, "hold": True}]}
            assert "warnings" not in (await c.post("/v1/jobs", json=job)).json()
            assert (await c.post("/v1/drain?on=true")).status_code == 200
            r = await c.post("/v1/jobs", json=job)
            assert r.json()["warnings"] == [
                "the daemon is draining: no job starts until `rota drain --off`"]
    run(scenario())


def test_removing_a_user(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with api(tmp_path) as (c, d, over_tcp):
            for name, admin in (("alice", False), ("root2", True)):
                assert (await c.post("/v1/users", json={"name": name, "admin": admin})
                        ).status_code == 201
            alice = over_tcp((await c.post("/v1/tokens", json={"user": "alice"})).json()["token"])
            await c.post("/v1/tokens", json={"user": "alice", "note": "second"})
            root2 = over_tcp((await c.post("/v1/tokens", json={"user": "root2"})).json()["token"])
            assert (await alice.put("/v1/secrets/HF_TOKEN", json={"value": "s3"})).status_code \
                == 200
            done = (await alice.post("/v1/jobs", json={"jobs": [
                {"command": ["true"], "gpus": 0}]})).json()["jobs"][0]["id"]
            assert (await c.get(f"/v1/jobs/{done}/wait?timeout=20")).json()["state"] == \
                "completed"
            held = (await alice.post("/v1/jobs", json={"jobs": [
                {"command": ["true"], "gpus": 0, "hold": True}]})).json()["jobs"][0]["id"]

            r = await alice.delete("/v1/users/root2")
            assert r.status_code == 403
            r = await root2.delete("/v1/users/root2")
            assert r.status_code == 409 and "themself" in r.json()["detail"]
            r = await c.delete(f"/v1/users/{d.settings.user}")
            assert r.status_code == 409
            r = await root2.delete("/v1/users/alice")
            assert r.status_code == 409 and "1 active job (" in r.json()["detail"]
            r = await root2.delete("/v1/users/alice?cancel_jobs=true")
            assert r.status_code == 200, r.text
            assert r.json() == {"user": "alice", "tokens_revoked": 2, "jobs_cancelled": 1}
            assert (await alice.get("/v1/whoami")).status_code == 401
            assert (await c.get(f"/v1/jobs/{held}")).json()["state"] == "cancelled"
            assert (await c.get(f"/v1/jobs/{done}")).json()["user"] == "alice"  # history
            assert (await c.get("/v1/secrets?user=alice")).json()["secrets"] == []
            assert (await c.delete("/v1/users/alice")).status_code == 404
    run(scenario())


def test_faults_for_a_gpu_the_simulation_lacks_are_a_404(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with api(tmp_path) as (c, _, _):
            r = await c.post("/v1/gpus/1023/simulate", json={"healthy": False})
            assert r.status_code == 404 and "indices 0-1" in r.json()["detail"]
    run(scenario())


def test_neither_the_routers_nor_the_api_workers_import_the_daemon() -> None:
    code = ("import sys, rota.server.api, rota.server.api_worker; "
            "print('rota.server.loop.daemon' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "False"




def test_a_sweep_in_the_submit_makes_one_job_per_combination(tmp_path: Path) -> None:
    """The grid as `rota submit --sweep` takes it (the dashboard's form sends it so)."""
    async def scenario() -> None:
        async with api(tmp_path) as (c, _d, _):
            spec = {"command": ["echo", "lr={lr}", "seed={seed}"], "name": "tune", "gpus": 0,
                    "hold": True}
            r = await c.post("/v1/jobs", json={"jobs": [spec],
                                               "sweep": ["lr=1e-3,3e-4", "seed=1..2"]})
            assert r.status_code == 201, r.text
            jobs = r.json()["jobs"]
            assert [j["name"] for j in jobs] == [
                "tune[lr=1e-3,seed=1]", "tune[lr=1e-3,seed=2]",
                "tune[lr=3e-4,seed=1]", "tune[lr=3e-4,seed=2]"]
            got = (await c.get(f"/v1/jobs/{jobs[3]['id']}")).json()
            assert got["spec"]["command"] == ["echo", "lr=3e-4", "seed=2"]
            before = len((await c.get("/v1/jobs", params={"limit": 100})).json()["jobs"])
            for bad, why in ((["lr"], "sweep 'lr'"), (["lr=1..200000"], "sweep 'lr=1..200000'"),
                             (["lr=1..200", "seed=1..200"], "the sweep makes 40000 jobs")):
                r = await c.post("/v1/jobs", json={"jobs": [spec], "sweep": bad})
                assert r.status_code == 422 and why in r.json()["detail"], r.text
                assert r.json()["field"] == "sweep", r.text
            # nothing of a refused sweep is stored
            assert len((await c.get("/v1/jobs", params={"limit": 100})).json()["jobs"]) == before
    run(scenario())
