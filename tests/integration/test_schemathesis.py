"""Schemathesis against the daemon's own OpenAPI document, every check it has: no 5xx, every
answer's status, content type and body as documented, schema-valid requests accepted and
schema-violating ones refused.

`schemathesis run --checks all` (its CLI: examples, coverage, fuzzing and stateful phases)
with a fixed seed, over TCP with an admin's token, on every operation but shutdown (it
would end the run), in two runs on two daemons:

- all but the TOUCHY ones, against a drained daemon, so no generated job ever starts;
- the TOUCHY ones, which would spoil that run: drain (it would let generated jobs start),
  revoking a token (it could revoke the run's own), and the endpoints that block until a
  job ends (wait, following the logs). This run creates no job, against a daemon whose
  jobs have all ended, so toggling drain starts nothing and wait and follow answer at
  once. Its token comes from schemathesis_hooks.py, which mints a new one through the
  owner's socket after the run revokes its own.

The run's token is an admin's and stays valid, so a schema-valid request is never
refused with 401 (positive-data acceptance does not take it, and no answer is a 401).

One documented exception: a submitted job can be well formed and still refused (422)
because of this machine's state (more GPUs or memory than it has, a secret its user has
not stored, a cwd that is not a directory, ...); no schema can say that, so positive-data
acceptance takes 422 for POST /v1/jobs. Likewise GET /v1/report: its since and until are
each documented by a pattern, but no schema can say that since must not come after until,
nor that February 29th exists only in leap years; it takes 422 there too. And the users'
Unix accounts (POST /v1/users, PATCH /v1/users/{name}): a well-formed account name this
machine has no account for is refused (422), which no schema can say either.

The daemon reaches a real S3-protocol server (moto's, with no bucket), so that POST
/v1/dataset-imports gets the bucket's own answer (no such bucket: 404) rather than
failing for want of credentials.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rota.client import RawClient
from rota.server.tracking.metrics import REQUESTS
from rota_testing import DaemonProcess, free_port, kill_job_processes, s3_server

SEED = 20240501
EXAMPLES = 50  # per operation: 100 took 260 s of a 2-core CI machine for little more found
USER = "fuzz"
#: the second run's operations (one method each)
TOUCHY = ("/v1/drain", "/v1/tokens/{token_id}/revoke", "/v1/jobs/{job_id}/wait",
          "/v1/jobs/{job_id}/logs", "/v1/jobs/{job_id}/logs/stream")
TOUCHY_RE = "^({})$".format("|".join(map(re.escape, TOUCHY)))
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "403", "404", "409"]

[[operations]]
include-path = "/v1/jobs"
include-method = "POST"
[operations.checks.positive_data_acceptance]
expected-statuses = ["2xx", "403", "404", "409", "422"]

[[operations]]
include-path = "/v1/report"
include-method = "GET"
[operations.checks.positive_data_acceptance]
expected-statuses = ["2xx", "403", "404", "409", "422"]

[[operations]]
include-path = "/v1/users"
include-method = "POST"
[operations.checks.positive_data_acceptance]
expected-statuses = ["2xx", "403", "404", "409", "422"]

[[operations]]
include-path = "/v1/users/{name}"
include-method = "PATCH"
[operations.checks.positive_data_acceptance]
expected-statuses = ["2xx", "403", "404", "409", "422"]
"""


class Served:
    """A daemon on a TCP port with an admin user for the run, and a folder for its files."""

    def __init__(self, base: Path) -> None:
        self.base, self.port = base, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.s3 = s3_server(base / "aws")
        self.daemon = DaemonProcess(base / "home", args=["--listen", f"127.0.0.1:{self.port}"])

    def __enter__(self) -> Served:
        (self.base / "aws").mkdir()
        self.daemon.env.update(self.s3.__enter__())
        self.daemon.start()
        with self.daemon.client() as c:
            c.request("POST", "/v1/users", json={"name": USER, "admin": True})
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.daemon.stop()
            kill_job_processes(self.daemon.home)
        finally:
            self.s3.__exit__(None, None, None)

    def token(self) -> str:
        with self.daemon.client() as c:
            return str(c.request("POST", "/v1/tokens", json={"user": USER})["token"])

    def operations(self) -> int:
        """How many operations the daemon's OpenAPI document has."""
        doc = httpx.get(f"{self.url}/openapi.json", timeout=10).json()
        return sum(len(item) for item in doc["paths"].values())

    def answered(self) -> set[tuple[str, str]]:
        """(route, status) of every kind of answer the daemon has given (its /metrics)."""
        got = httpx.get(f"{self.url}/metrics", timeout=10,
                        headers={"Authorization": f"Bearer {self.token()}"})
        got.raise_for_status()
        return {(s.labels["route"], s.labels["status"])
                for f in text_string_to_metric_families(got.text) if f.name == REQUESTS
                for s in f.samples if s.name.endswith("_count") and s.value}

    def schemathesis(self, *args: str, hooks: str = "") -> str:
        """`schemathesis run --checks all` on this daemon's document; its output, once it
        passed (0 failures) with no request refused for want of a valid token."""
        (self.base / "schemathesis.toml").write_text(CONFIG)
        cli = Path(sys.executable).with_name("schemathesis")
        r = subprocess.run(
            [str(cli), "--config-file", str(self.base / "schemathesis.toml"), "run",
             f"{self.url}/openapi.json", "--checks", "all", "--seed", str(SEED),
             "--max-examples", str(EXAMPLES), "--no-color", *args],
            capture_output=True, text=True, timeout=420, cwd=self.base, check=False,
            env={**os.environ, "SCHEMATHESIS_HOOKS": hooks,
                 "ROTA_FUZZ_SOCKET": str(self.daemon.socket), "ROTA_FUZZ_USER": USER})
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-12000:]
        refused = {route for route, status in self.answered() if status == "401"}
        assert not refused, refused  # the run's token held throughout
        return out


def _tested(out: str) -> int:
    found = re.search(r"Tested: (\d+)", out)
    assert found is not None, out[-3000:]
    return int(found.group(1))


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[Served]:
    with Served(tmp_path) as s:
        yield s


@pytest.mark.timeout(480)  # the run itself may take up to 420 s on a loaded machine
def test_the_api_answers_as_its_document_says(served: Served) -> None:
    with served.daemon.client() as c:
        c.drain(True)
        c.submit([{"command": ["true"], "gpus": 0.5}, {"command": ["true"], "hold": True}])
    out = served.schemathesis("--exclude-path-regex", rf"^/v1/shutdown$|{TOUCHY_RE}",
                              "-H", f"Authorization: Bearer {served.token()}")
    assert _tested(out) == served.operations() - 1 - len(TOUCHY), out[-3000:]


def _ended_jobs(c: RawClient) -> list[int]:
    """Jobs that have run and ended (output, a failure, one cancelled before it ran)."""
    made = c.submit([{"command": ["sh", "-c", "echo out; echo err >&2"]},
                     {"command": ["false"]}, {"command": ["true"], "hold": True}])
    ids = [int(j["id"]) for j in made]
    c.cancel(ids[2])
    for job in ids:
        assert c.wait(job, timeout=60)["done"], job
    return ids


def test_drain_revoke_wait_and_following_answer_as_documented(served: Served) -> None:
    with served.daemon.client() as c:
        jobs = _ended_jobs(c)
        assert c.logs(jobs[0])["data"].endswith("out\nerr\n")
        out = served.schemathesis("--include-path-regex", TOUCHY_RE, hooks=str(HOOKS))
        assert _tested(out) == len(TOUCHY), out[-3000:]
        mine = c.request("GET", "/v1/tokens")["tokens"]
        assert any(t["user"] == USER and t["revoked_at"] for t in mine)  # its own, once
        assert sum(c.queue_summary()["counts"].values()) == len(jobs)  # it made none
    ok = {route for route, status in served.answered() if status.startswith("2")}
    assert set(TOUCHY) <= ok, ok  # each answered as it does when all is well, too
