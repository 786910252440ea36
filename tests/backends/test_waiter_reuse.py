"""The local runner hands later bursts to the waiter it forked for an earlier one, until that
waiter has been handed its quota of jobs: then a new one is forked, and the old one exits
once its own jobs have ended. Killing the runner and its keeper while a reused waiter holds
jobs of several bursts loses no end and starts nothing twice."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rota.backends.base import Handle, Launched, LaunchFailed
from rota.backends.local.backend import LocalBackend

from .conftest import Env, wait_exit, wait_for


def _waiter_of(backend: LocalBackend, h: Handle) -> int:
    status = backend.read_status(h.status_path)
    assert status is not None
    return int(status["waiter"])


def _keeper_and_runner(env: Env) -> list[psutil.Process]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(30)
        s.connect(str(Path(env.screendir) / "runner.sock"))
        s.send(b'{"op": "hello"}')
        hello = json.loads(s.recv(1 << 16))
    return [psutil.Process(hello["pid"]), psutil.Process(hello["runner"])]


def test_a_later_burst_goes_to_the_same_waiter(env: Env, tmp_path: Path) -> None:
    backend = env.backend("local")
    assert isinstance(backend, LocalBackend)
    go = tmp_path / "go"
    first = env.launch(backend, env.req(
        ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 2"]))
    later = [env.launch(backend, env.req(["sh", "-c", f"exit {n}"])) for n in range(3)]
    assert [wait_exit(backend, h).exit_code for h in later] == [0, 1, 2]
    waiter = _waiter_of(backend, first)
    assert {_waiter_of(backend, h) for h in later} == {waiter}  # four bursts, one waiter
    go.touch()
    assert wait_exit(backend, first).exit_code == 2


#: the runner and its keeper, a waiter handed 2 jobs retired
_QUOTA_2 = """
import sys
from rota.backends.local import runner, waiter
waiter.WAITER_JOBS = 2
sys.exit(runner.main(["runner", sys.argv[1]]))
"""


def test_a_waiter_handed_its_quota_is_retired_and_exits_with_its_last_job(
        env: Env, tmp_path: Path) -> None:
    sock = Path(env.screendir) / "runner.sock"
    with (tmp_path / "runner.log").open("wb") as log:
        keeper = subprocess.Popen([sys.executable, "-c", _QUOTA_2, str(sock)], stdout=log,
                                  stderr=log, start_new_session=True)
    wait_for(sock.exists, what="the runner's socket")
    backend = env.backend("local")
    assert isinstance(backend, LocalBackend)
    go = tmp_path / "go"
    wait = ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"]
    handles = [env.launch(backend, env.req(wait)) for _ in range(5)]
    waiters = [_waiter_of(backend, h) for h in handles]
    # launched one by one: a burst each, two to a waiter
    assert waiters[0] == waiters[1] != waiters[2] == waiters[3] != waiters[4], waiters
    old = psutil.Process(waiters[0])
    assert old.is_running()  # retired, it lives while its jobs do
    go.touch()
    assert {wait_exit(backend, h).exit_code for h in handles} == {3}
    wait_for(lambda: not old.is_running() or old.status() == psutil.STATUS_ZOMBIE,
             what="the retired waiter to exit")
    assert backend.runner is not None and backend.runner.pid == keeper.pid


@pytest.mark.parametrize("bursts", [3])
def test_runner_and_keeper_killed_under_a_reused_waiter(env: Env, tmp_path: Path,
                                                         bursts: int) -> None:
    """Jobs of several bursts in one waiter; SIGKILL of runner and keeper: every end is
    recorded by the waiter, with its own status, and no job starts twice."""
    backend = env.backend("local")
    assert isinstance(backend, LocalBackend)
    go, runs = tmp_path / "go", tmp_path / "runs"
    handles = []
    for b in range(bursts):
        reqs = [env.req(["sh", "-c", f"echo {b}-{n} >> {runs}; "
                                     f"while [ ! -e {go} ]; do sleep 0.05; done; exit {b + n}"])
                for n in range(2)]
        for got in backend.launch_many(reqs):
            handle = getattr(got, "handle", None)
            assert handle is not None, got
            env.handles.append(handle)
            handles.append(handle)
    waiters = {_waiter_of(backend, h) for h in handles}
    assert len(waiters) == 1, waiters
    procs = _keeper_and_runner(env)
    for p in procs:
        p.kill()
    psutil.wait_procs(procs, timeout=10)
    assert all(backend.collect(h) is None for h in handles)  # running: not taken for ended
    go.touch()
    codes = [wait_exit(backend, h).exit_code for h in handles]
    assert codes == [b + n for b in range(bursts) for n in range(2)]
    lines = runs.read_text().split()
    assert sorted(lines) == sorted({*lines}) and len(lines) == 2 * bursts  # none twice
    # the next keeper starts the next job, through a waiter of its own
    after = env.launch(backend, env.req(["sh", "-c", "exit 9"]))
    assert wait_exit(backend, after).exit_code == 9
    assert _waiter_of(backend, after) not in waiters


#: the runner and its keeper, the runner made to SIGKILL itself once, in its second burst
#: (the first of two jobs): after telling the keeper ("announced"), after sending the first
#: job ("sending"), or once the waiter has answered ("started"). It reads its socket a
#: moment late, so that the two launches sent together are taken together (one burst).
_DIES_AT_SECOND = """
import os, signal, sys, time
from rota.backends.local import runner as r, waiter as w

point, marker, sock = sys.argv[1:4]
seen = {}

def die(here):
    seen[here] = seen.get(here, 0) + 1
    if here == point and seen[here] == (1 if here == "sending" else 2) \\
            and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)

tell, start_in_waiter, send = r.Runner._tell_keeper, r.Runner._start_in_waiter, w.send
message = r.Runner._message

def _message(self, conn):
    time.sleep(0.2)
    message(self, conn)

def _tell(self, msg):
    tell(self, msg)
    if msg[:1] == b"I":
        die("announced")

def _send(sock, s, data, new_segment, last):
    send(sock, s, data, new_segment, last)
    if not last:
        die("sending")

def _start_in_waiter(self, *args):
    got = start_in_waiter(self, *args)
    die("started")
    return got

r.Runner._tell_keeper, r.Runner._start_in_waiter, w.send = _tell, _start_in_waiter, _send
r.Runner._message = _message
sys.exit(r.main(["runner", sock]))
"""


@pytest.mark.parametrize("point", ["announced", "sending", "started"])
def test_a_runner_killed_in_a_burst_to_a_reused_waiter(env: Env, tmp_path: Path,
                                                       point: str) -> None:
    """The waiter holds a running job of an earlier burst; its runner dies in the next one:
    that burst is started whole, once, or not at all, and every end is recorded."""
    sock, marker, runs = Path(env.screendir) / "runner.sock", tmp_path / "died", tmp_path / "runs"
    go = tmp_path / "go"
    with (tmp_path / "runner.log").open("wb") as log:
        keeper = subprocess.Popen([sys.executable, "-c", _DIES_AT_SECOND, point, str(marker),
                                   str(sock)], stdout=log, stderr=log, start_new_session=True)
    wait_for(sock.exists, what="the runner's socket")
    backend = env.backend("local")
    assert isinstance(backend, LocalBackend)
    wait = ["sh", "-c", f"echo first >> {runs}; while [ ! -e {go} ]; do sleep 0.05; done; exit 2"]
    first = env.launch(backend, env.req(wait))
    got = backend.launch_many([env.req(["sh", "-c", f"echo {n} >> {runs}; exit {n}"])
                               for n in (3, 4)])
    # the runner died where it was told to (once started, the jobs were answered first)
    wait_for(marker.exists, what="the runner's death")
    if point in ("announced", "sending"):  # not taken whole: neither started
        assert all(isinstance(g, LaunchFailed) and g.retryable and g.lost for g in got), got
    else:
        assert all(isinstance(g, Launched) for g in got), got
        handles = [g.handle for g in got if isinstance(g, Launched)]
        env.handles += handles
        assert [wait_exit(backend, h).exit_code for h in handles] == [3, 4]
        assert {_waiter_of(backend, h) for h in handles} == {_waiter_of(backend, first)}
    go.touch()
    assert wait_exit(backend, first).exit_code == 2  # its waiter recorded it
    lines = runs.read_text().split()
    # each of the burst once (its two jobs run side by side: either may write first)
    assert lines[0] == "first" and sorted(lines[1:]) == (
        ["3", "4"] if point == "started" else []), lines
    [after] = backend.launch_many([env.req(["sh", "-c", "exit 5"])])
    assert isinstance(after, Launched), after
    env.handles.append(after.handle)
    assert wait_exit(backend, after.handle).exit_code == 5
    assert backend.runner is not None and backend.runner.pid == keeper.pid
