"""Schemathesis against the daemon's own OpenAPI document, every check it has: no 5xx, every
answer's status, content type and body as documented, schema-valid requests accepted and
schema-violating ones refused.

`schemathesis run --checks all` (its CLI: examples, coverage, fuzzing and stateful phases)
with a fixed seed, over TCP with an admin's token, against a drained daemon so no generated
job ever starts. Left out: shutdown (it would end the run), drain (it would let generated
jobs start), revoking a token (it could revoke the run's own), and the endpoints that block
until a job ends (wait, following logs: a pending job never ends here).

One documented exception: a submitted job can be well formed and still refused (422)
because of this machine's state (more GPUs or memory than it has, a secret its user has
not stored, a cwd that is not a directory, ...); no schema can say that, so positive-data
acceptance takes 422 for POST /v1/jobs (and only there).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota_testing import DaemonProcess, free_port, kill_job_processes

SEED = 20240501
EXAMPLES = 100
SKIPPED = r"/(shutdown|drain|wait|logs|logs/stream|tokens/\{token_id\}/revoke)$"
CONFIG = """
[[operations]]
include-path = "/v1/jobs"
include-method = "POST"
[operations.checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    port = free_port()
    base: Path = tmp_path_factory.mktemp("fuzz")
    d = DaemonProcess(base / "home", args=["--listen", f"127.0.0.1:{port}"]).start()
    try:
        with d.client() as c:
            c.drain(True)
            c.submit([{"command": ["true"], "gpus": 0.5}, {"command": ["true"], "hold": True}])
        assert d.cli("user", "add", "fuzz", "--admin").returncode == 0
        made = d.cli("token", "create", "--user", "fuzz", "--json")
        yield f"http://127.0.0.1:{port}", json.loads(made.stdout)["token"], base
    finally:
        d.stop()
        kill_job_processes(d.home)


def test_the_api_answers_as_its_document_says(served: tuple[str, str, Path]) -> None:
    url, token, base = served
    (base / "schemathesis.toml").write_text(CONFIG)
    cli = Path(sys.executable).with_name("schemathesis")
    r = subprocess.run(
        [str(cli), "--config-file", str(base / "schemathesis.toml"), "run",
         f"{url}/openapi.json", "--checks", "all", "--exclude-path-regex", SKIPPED,
         "--seed", str(SEED), "--max-examples", str(EXAMPLES), "--no-color",
         "-H", f"Authorization: Bearer {token}"],
        capture_output=True, text=True, timeout=280, cwd=base,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""}, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-12000:]
    tested = re.search(r"Tested: (\d+)", out)
    assert tested is not None and int(tested.group(1)) >= 30, out[-3000:]  # every operation
