"""The local runner's keeper: a job outlives its runner's SIGKILL with its exit status;
an end lost with the keeper too is not counted as the job's failure; a runner killed at any
point of a launch leaves the job started once and known, or not started at all."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rota.backends.base import Backend, Handle, Launched, LaunchFailed, TakenBack

from .conftest import Env, wait_exit, wait_for


def _keeper_and_runner(env: Env) -> tuple[psutil.Process, psutil.Process]:
    """By the runner's own word (``hello``): its waiters, forks of it, carry its argv."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(30)
        s.connect(str(Path(env.screendir) / "runner.sock"))
        s.send(b'{"op": "hello"}')
        hello = json.loads(s.recv(1 << 16))
    return psutil.Process(hello["pid"]), psutil.Process(hello["runner"])


def _runners(env: Env) -> set[int]:
    try:
        return {_keeper_and_runner(env)[1].pid}
    except (OSError, ValueError, psutil.Error):  # between runners
        return set()


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


def test_a_job_outlives_its_runner_and_keeper_with_its_exit_status(env: Env,
                                                                    tmp_path: Path) -> None:
    """SIGKILL of the runner and its keeper together (the OOM killer): the job's waiter
    records its end, so it is known how it ended (and it is not run again)."""
    backend, h, go = _waiting_job(env, tmp_path, 5)
    procs = list(_keeper_and_runner(env))
    for p in procs:
        p.kill()
    psutil.wait_procs(procs, timeout=10)
    assert backend.collect(h) is None  # still running: not taken for ended
    fd = backend.watch(h)  # the waiter, the next runner knowing nothing of the job
    assert fd is not None
    go.touch()
    info = wait_exit(backend, h)
    assert (info.exit_code, info.signal) == (5, None), info


def test_an_end_lost_with_the_waiter_too_is_not_the_jobs_failure(env: Env,
                                                                 tmp_path: Path) -> None:
    backend, h, go = _waiting_job(env, tmp_path, 0)
    keeper, runner = _keeper_and_runner(env)
    [waiter] = [p for p in runner.children() if p.pid != h.pid]
    procs = [runner, keeper, waiter]
    for p in procs:
        p.kill()
    psutil.wait_procs(procs, timeout=10)
    assert backend.collect(h) is None  # still running: not taken for ended
    go.touch()
    info = wait_exit(backend, h)
    assert isinstance(info, TakenBack) and "not recorded" in info.why, info


#: The runner and its keeper (``main``), with the runner made to SIGKILL itself once, at the
#: point named by argv[1]: on a daemon's hello, before answering it ("greeting"); in a
#: launch, after telling the keeper of the waiter it forked, before letting it start
#: ("announced"); once the waiter has started the job, before the daemon is answered
#: ("started"); just after the answer is sent ("answered"). The next runner, forked from
#: the same keeper, lives (the marker).
_DIES_AT = """
import os, signal, sys
from rota.backends.local import runner as r

point, marker, sock = sys.argv[1:4]

def die(here):
    if here == point and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)

tell, answer, handle = r.Runner._tell_keeper, r.Runner._answer, r.Runner._handle

def _handle(self, conn, msg, fds):
    die("greeting" if msg.get("op") == "hello" else None)
    return handle(self, conn, msg, fds)

def _tell(self, msg):
    tell(self, msg)
    die({b"I": "announced"}.get(msg[:1]))

def _answer(self, conn, reply, fds):
    launched = "pid" in reply and "protocol" not in reply  # the waiter started its job
    die("started" if launched else None)
    sent = answer(self, conn, reply, fds)
    die("answered" if launched else None)
    return sent

r.Runner._tell_keeper, r.Runner._answer, r.Runner._handle = _tell, _answer, _handle
sys.exit(r.main(["runner", sock]))
"""


@pytest.mark.parametrize("point", ["greeting", "announced", "started", "answered"])
def test_a_runner_killed_in_a_launch_leaves_the_job_started_once_or_not_at_all(
        env: Env, tmp_path: Path, point: str) -> None:
    sock, marker, runs = Path(env.screendir) / "runner.sock", tmp_path / "died", tmp_path / "runs"
    with (tmp_path / "runner.log").open("wb") as log:
        keeper = subprocess.Popen([sys.executable, "-c", _DIES_AT, point, str(marker), str(sock)],
                         stdout=log, stderr=log, start_new_session=True)
    wait_for(sock.exists, what="the runner's socket")
    backend = env.backend("local")
    [got] = backend.launch_many([env.req(["sh", "-c", f"echo $$ >> {runs}; sleep 0.3; exit 3"])])
    # the runner died where it was told to (once answered, maybe after the answer came)
    wait_for(marker.exists, what="the runner's death")
    if point == "announced":  # nothing was started: the daemon queues it again
        assert isinstance(got, LaunchFailed) and got.retryable and got.lost, got
        time.sleep(0.5)
        assert not runs.exists()
    else:  # started: the daemon knows it (by the journal, if the answer was lost)
        assert isinstance(got, Launched), got
        env.handles.append(got.handle)
        info = wait_exit(backend, got.handle)
        assert (info.exit_code, info.signal) == (3, None), info
        assert runs.read_text().split() == [str(got.handle.pid)]  # once, and that job
    # the next runner, of the same keeper, starts the next job
    [after] = backend.launch_many([env.req(["sh", "-c", "exit 4"])])
    assert isinstance(after, Launched), after
    env.handles.append(after.handle)
    assert wait_exit(backend, after.handle).exit_code == 4
    # asked again, not replaced: a second keeper would have started (and read the
    # journal) before the first one recorded a job its dead runner had started
    assert backend.runner is not None and backend.runner.pid == keeper.pid
