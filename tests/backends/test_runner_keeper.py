"""The local runner's keeper: a job outlives its runner's SIGKILL with its exit status;
an end lost with the keeper too is not counted as the job's failure."""

from __future__ import annotations

from pathlib import Path

import psutil

from rota.backends.base import Backend, Handle, TakenBack

from .conftest import Env, wait_exit, wait_for


def _keeper_and_runner(env: Env) -> tuple[psutil.Process, psutil.Process]:
    found = {p.pid: p for p in psutil.process_iter(["cmdline", "ppid"])
             if env.screendir in " ".join(p.info["cmdline"] or [])}
    [runner] = [p for p in found.values() if p.info["ppid"] in found]
    return found[runner.info["ppid"]], runner


def _runners(env: Env) -> set[int]:
    found = {p.pid: p.info["ppid"] for p in psutil.process_iter(["cmdline", "ppid"])
             if env.screendir in " ".join(p.info["cmdline"] or [])}
    return {pid for pid, ppid in found.items() if ppid in found}


def _waiting_job(env: Env, tmp_path: Path, code: int) -> tuple[Backend, Handle, Path]:
    """A job of the runner's that exits with ``code`` once the returned file exists."""
    go = tmp_path / "go"
    backend = env.backend("local")
    h = env.launch(backend, env.req(
        ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit {code}"]))
    return backend, h, go


def test_a_job_outlives_its_runner_with_its_exit_status(env: Env, tmp_path: Path) -> None:
    backend, h, go = _waiting_job(env, tmp_path, 3)
    keeper, runner = _keeper_and_runner(env)
    runner.kill()
    runner.wait(10)
    wait_for(lambda: _runners(env) - {runner.pid}, what="a new runner")
    assert backend.collect(h) is None and keeper.is_running()
    go.touch()
    info = wait_exit(backend, h)
    assert (info.exit_code, info.signal) == (3, None)  # the keeper recorded it


def test_an_end_lost_with_the_keeper_too_is_not_the_jobs_failure(env: Env,
                                                                 tmp_path: Path) -> None:
    backend, h, go = _waiting_job(env, tmp_path, 0)
    procs = list(_keeper_and_runner(env))
    for p in procs:
        p.kill()
    psutil.wait_procs(procs, timeout=10)
    assert backend.collect(h) is None  # still running: not taken for ended
    go.touch()
    info = wait_exit(backend, h)
    assert isinstance(info, TakenBack) and "not recorded" in info.why, info
