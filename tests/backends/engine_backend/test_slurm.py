"""EngineBackend over the real Slurm engine and a private Slurm (two slurmd on this host):
the daemon's view of a cluster job, end to end."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rota.backends.base import ExitInfo, Handle, LaunchRequest, Located
from rota.backends.engine import EngineJob, EngineState
from rota.backends.engine_backend import EngineBackend
from rota.backends.engine_record import state_path
from rota.backends.slurm import SlurmEngine
from rota.pools import SlurmPool
from rota_testing import wait_until

from ..slurm.conftest import PrivateSlurm
from ..slurm.test_engine import PY, TRAP  # a job that traps SIGTERM and says so

_ids = iter(range(5001, 9999))
TOKEN = "tok-Zq9!-never-on-disk"


class Pool:
    """A daemon's home over the private Slurm; each ``adapter()`` is a daemon (re)started."""

    def __init__(self, slurm: PrivateSlurm, home: Path) -> None:
        assert slurm.folder is not None
        self.slurm, self.home = slurm, home
        self.pool = SlurmPool(engine="slurm", slurm_conf=slurm.env["SLURM_CONF"], shards=True)
        self.work_dir = os.path.join(slurm.folder, "rota-adapter")
        self.made: list[EngineBackend] = []

    def adapter(self) -> EngineBackend:
        def make(secrets: Callable[[str], str]) -> SlurmEngine:
            return SlurmEngine(self.pool, self.work_dir, secrets=secrets)
        a = EngineBackend("hpc", make, poll_every=0.2)
        self.made.append(a)
        return a

    def req(self, argv: tuple[str, ...], secret_env: dict[str, str] | None = None
            ) -> LaunchRequest:
        n = next(_ids)
        job = EngineJob(job_id=n, attempt=1, name=f"t{n}", argv=argv, grace=20,
                        secret_env=secret_env or {})
        return LaunchRequest(
            job_id=n, attempt=1, argv=list(argv), shell=False, env={"TOKEN": TOKEN},
            cwd=None, conda=None, log_path=self.home / "logs" / f"{n}.log",
            status_path=self.home / "status" / f"{n}-1.json", session_name="",
            log_header=f"=== rota: job {n} attempt 1", engine_job=job)

    def jobs_named(self, key: str) -> list[str]:
        out = subprocess.run(["squeue", "-h", "-t", "all", f"--name={key}", "-o", "%i"],
                             env=self.slurm.env, capture_output=True, text=True, check=True,
                             timeout=30).stdout
        return out.split()


@pytest.fixture
def pool(slurm: PrivateSlurm, tmp_path: Path) -> Iterator[Pool]:
    p = Pool(slurm, tmp_path)
    yield p
    for a in p.made:
        a.close()


def wait_readable(fds: list[int], timeout: float = 30) -> None:
    deadline, left = time.monotonic() + timeout, set(fds)
    while left and time.monotonic() < deadline:
        left -= set(select.select(list(left), [], [], 0.5)[0])
    assert not left, f"no end seen within {timeout}s"


def log_has(req: LaunchRequest, text: str, timeout: float = 20) -> None:
    wait_until(lambda: req.log_path.exists() and text in req.log_path.read_text(), timeout,
               every=0.1, what=f"{text!r} in the job's log")


def test_jobs_end_with_their_exit_codes_and_their_output_in_the_log(pool: Pool) -> None:
    a = pool.adapter()
    digest = "import hashlib, os; print(hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest())"
    ok = pool.req((PY, "-c", f"print('hello'); {digest}"), secret_env={"TOKEN": "api-token"})
    bad = pool.req(("sh", "-c", "echo failing; exit 3"))
    handles = [a.launch(ok), a.launch(bad)]
    fds = [a.watch(h) for h in handles]
    assert all(fd is not None for fd in fds)
    wait_readable([fd for fd in fds if fd is not None])
    assert a.collect(handles[0]).exit_code == 0  # type: ignore[union-attr]
    bad_end = a.collect(handles[1])
    assert bad_end is not None and (bad_end.exit_code, bad_end.signal) == (3, None)
    assert bad_end.ended_at and abs(bad_end.ended_at - time.time()) < 120
    assert ok.log_path.read_text() == (f"=== rota: job {ok.job_id} attempt 1\nhello\n"
                                       f"{hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    assert bad.log_path.read_text().endswith("attempt 1\nfailing\n")
    files = [p for p in (pool.home, Path(pool.work_dir)) for p in p.rglob("*") if p.is_file()]
    assert not any(TOKEN.encode() in p.read_bytes() for p in files)


def test_sigterm_is_the_stop_handshake(pool: Pool, tmp_path: Path) -> None:
    a = pool.adapter()
    marker = tmp_path / "stopped"
    req = pool.req((PY, "-c", TRAP, str(marker)))
    h = a.launch(req)
    fd = a.watch(h)
    assert fd is not None
    log_has(req, "ready")
    st = a.status(h)
    assert st is not None and st.state is EngineState.RUNNING and st.started_at
    began = time.monotonic()
    a.signal(h, signal.SIGTERM)
    wait_readable([fd])
    assert time.monotonic() - began < 15  # it left on the signal, not on the kill
    assert marker.read_text() == "got 15"
    assert a.collect(h) == ExitInfo(0, None, a.status(h).ended_at)  # type: ignore[union-attr]


def test_a_restarted_daemon_finds_its_job_again_and_never_submits_it_twice(
        pool: Pool) -> None:
    first = pool.adapter()
    req = pool.req((PY, "-c", "import time; print('one', flush=True); time.sleep(2); "
                              "print('two')"))
    h = first.launch(req)
    log_has(req, "one")
    first.close()  # the daemon stops; the job runs on
    second = pool.adapter()
    found = second.locate(h, h.status_path, 0.0)
    assert found.handle == h and found.ended is None
    fd = second.watch(h)
    assert fd is not None
    wait_readable([fd])
    assert second.collect(h) is not None and second.collect(h).exit_code == 0  # type: ignore[union-attr]
    assert req.log_path.read_text() == f"=== rota: job {req.job_id} attempt 1\none\ntwo\n"
    # killed after the submit, before the answer was stored: found by its key
    record = json.loads(state_path(req.status_path).read_text())
    state_path(req.status_path).unlink()
    third = pool.adapter()
    by_key = third.locate(None, h.status_path, 0.0)
    assert by_key.handle is not None and by_key.handle.extra["engine_id"] == h.extra["engine_id"]
    assert by_key.ended is not None and by_key.ended.exit_code == 0
    # a launch retried after such a crash asks before it submits
    state_path(req.status_path).write_text(json.dumps({**record, "engine_id": None}))
    again = pool.adapter().launch(req)
    assert again.extra["engine_id"] == h.extra["engine_id"]
    assert pool.jobs_named(h.extra["key"]) == [h.extra["engine_id"]]
    never = pool.adapter().locate(None, str(pool.req(("true",)).status_path), 0.0)
    assert never == Located(None)


def test_a_stored_handle_is_watched_by_another_adapter(pool: Pool) -> None:
    a = pool.adapter()
    h = a.launch(pool.req(("true",)))
    back = Handle.from_json(json.loads(json.dumps(h.to_json())))
    other = pool.adapter()
    fd = other.watch(back)
    assert fd is not None
    wait_readable([fd])
    assert other.collect(back) == other.collect(h) == ExitInfo(
        0, None, other.status(h).ended_at)  # type: ignore[union-attr]
