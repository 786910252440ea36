"""Schemathesis against the daemon's own OpenAPI document: no 5xx, no schema violations.

The daemon runs on TCP with a non-admin user's token (admin-only operations must answer 403,
not fail) and drained, so no generated job ever starts. Endpoints that block until a job
ends (wait, following logs) are left to their own tests: a pending job never ends here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from rota_testing import DaemonProcess, free_port, kill_job_processes

_state: dict[str, Any] = {}


def _cli(d: DaemonProcess, *args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "rota", *args, "--json"], env=d.env,
                       capture_output=True, text=True, timeout=60, check=True)
    out: dict[str, Any] = json.loads(r.stdout)
    return out


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    port = free_port()
    home: Path = tmp_path_factory.mktemp("fuzz") / "home"
    d = DaemonProcess(home, args=["--listen", f"127.0.0.1:{port}"]).start()
    try:
        with d.client() as c:
            c.drain(True)
            c.submit([{"command": ["true"], "gpus": 0.5}, {"command": ["true"], "hold": True}])
        _cli(d, "user", "add", "fuzz")
        _state["token"] = _cli(d, "token", "create", "--user", "fuzz")["token"]
        schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{port}/openapi.json")
        yield schema.exclude(path_regex=r"/(wait|logs|logs/stream)$")
    finally:
        d.stop()
        kill_job_processes(home)


def test_api_answers_within_its_schema(api_schema: Any) -> None:
    """Every operation, ~25 generated requests each (hypothesis drives schemathesis's
    strategies directly: its pytest plugin does not load under this pytest)."""
    headers = {"Authorization": f"Bearer {_state['token']}"}
    operations = [r.ok() for r in api_schema.get_all_operations()]
    assert len(operations) >= 20, [o.label for o in operations]
    failures: dict[str, str] = {}
    for op in operations:
        @given(case=op.as_strategy())
        @settings(max_examples=25, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case: Any) -> None:
            case.call_and_validate(headers=headers, timeout=30,
                                   checks=[not_a_server_error, response_schema_conformance])

        try:
            run()
        except Exception as e:  # collect all operations' failures, then report them together
            failures[op.label] = f"{type(e).__name__}: {e}"[:1500]
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
