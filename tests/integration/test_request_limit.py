"""Request bodies are bounded (max_request_bytes): an oversized submit is refused with a 413
that names the limit and the setting, before any of it is stored, whether it declares its
length or comes chunked; the daemon's app, an API worker and the CLI all say so."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota.server.api import body_limit, build_app
from rota.server.daemon_ports import DaemonPorts
from rota.server.intake import Intake
from rota_testing import DaemonProcess, free_port, in_process_daemon, kill_job_processes

LIMIT = 1 << 20  # the smallest the setting takes


def _jobs(total: int, each: int = 1000) -> list[dict[str, Any]]:
    """Held jobs of about ``each`` bytes whose JSON is about ``total`` bytes."""
    job = {"command": ["echo", "x" * each], "gpus": 0, "hold": True}
    return [job] * max(1, total // (each + 50))


def _jobs_body(total: int) -> bytes:
    return json.dumps({"jobs": _jobs(total)}).encode()


def _stored_jobs(d: Any) -> int:
    return sum(d.store.count_by_state().values())


def _problem(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 413, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    doc: dict[str, Any] = r.json()
    assert doc["title"] == "RequestTooLarge" and doc["status"] == 413
    assert "1 MiB (1048576 bytes)" in doc["detail"]
    assert "max_request_bytes" in doc["detail"]
    return doc


async def _with_app(tmp_path: Path, scenario: Any) -> None:
    async with in_process_daemon(tmp_path) as (d, _store):
        ports = DaemonPorts(d, Intake(d))
        app = build_app(ports, ports, max_request_bytes=LIMIT)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://rota") as c:
            await scenario(c, d)


def test_a_submit_over_the_limit_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    async def scenario(c: httpx.AsyncClient, d: Any) -> None:
        big = _jobs_body(2 * LIMIT)
        assert len(big) > LIMIT
        _problem(await c.post("/v1/jobs", content=big,
                              headers={"content-type": "application/json"}))
        assert _stored_jobs(d) == 0
        small = _jobs_body(LIMIT // 2)
        r = await c.post("/v1/jobs", content=small,
                         headers={"content-type": "application/json"})
        assert r.status_code == 201, r.text
        assert _stored_jobs(d) == len(json.loads(small)["jobs"])

    asyncio.run(_with_app(tmp_path, scenario))


def test_a_chunked_body_is_cut_off_at_the_limit(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    chunk = b" " * 65536  # JSON whitespace: the body would be valid JSON if it ended
    pulled = 0
    monkeypatch.setattr(body_limit, "DRAIN_BYTES", 2 * LIMIT)

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        yield b'{"jobs": [{"command": ["true"], "gpus": 0, "hold": true}]'
        while pulled < 1000:  # 64 MB if it were all read
            pulled += 1
            yield chunk
        yield b"}"

    async def chunked_small() -> AsyncIterator[bytes]:
        yield b'{"jobs": [{"command": ["true"], '
        yield b'"gpus": 0, "hold": true}]}'

    async def scenario(c: httpx.AsyncClient, d: Any) -> None:
        r = await c.post("/v1/jobs", content=endless(),
                         headers={"content-type": "application/json"})
        assert "content-length" not in r.request.headers
        _problem(r)
        # read no further than the limit and what is dropped so that the client hears
        assert pulled <= (LIMIT + body_limit.DRAIN_BYTES) // len(chunk) + 2
        assert _stored_jobs(d) == 0
        r = await c.post("/v1/jobs", content=chunked_small(),
                         headers={"content-type": "application/json"})
        assert r.status_code == 201, r.text
        assert _stored_jobs(d) == 1

    asyncio.run(_with_app(tmp_path, scenario))


def _rows(home: Path) -> int:
    with sqlite3.connect(home / "rota.db") as db:
        return int(db.execute("SELECT count(*) FROM jobs").fetchone()[0])


def test_the_cli_and_an_api_worker_say_what_the_limit_is(tmp_path: Path) -> None:
    port = free_port()
    d = DaemonProcess(tmp_path / "home", simulate="1x24G",
                      extra_env={"ROTA_MAX_REQUEST_BYTES": "1M"},
                      args=["--listen", f"127.0.0.1:{port}", "--api-workers", "1"]).start()
    try:
        specs = tmp_path / "jobs.json"  # the CLI sends 100 a request: 1.2 MB
        specs.write_text(json.dumps(_jobs(120 * 12_050, each=12_000)))
        r = d.cli("submit", "-f", str(specs))
        assert r.returncode == 2, r.stdout + r.stderr
        assert "larger than 1 MiB (1048576 bytes)" in r.stderr
        assert "raise max_request_bytes" in r.stderr
        assert _rows(d.home) == 0

        assert d.cli("user", "add", "alice").returncode == 0
        made = d.cli("token", "create", "--user", "alice", "--json")
        token = json.loads(made.stdout)["token"]
        tcp = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                           headers={"Authorization": f"Bearer {token}"})
        with tcp:  # through the worker: refused there, never forwarded
            _problem(tcp.post("/v1/jobs", content=_jobs_body(2 * LIMIT),
                              headers={"content-type": "application/json"}))
            ok = tcp.post("/v1/jobs", json={"jobs": [{"command": ["true"], "gpus": 0,
                                                      "hold": True}]})
            assert ok.status_code == 201, ok.text
        assert _rows(d.home) == 1
    finally:
        d.stop()
        kill_job_processes(d.home)
