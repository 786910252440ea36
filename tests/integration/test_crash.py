"""Kill the daemon with SIGKILL at random moments: nothing lost, nothing run twice."""

from __future__ import annotations

import json
import os
import random
import socket
import time
from collections import Counter

import psutil
import pytest

from rota_testing import wait_until

# the bar DESIGN's invariants are held to (1,000 jobs under 20 kills) takes several minutes:
# ROTA_CRASH_JOBS=1000 ROTA_CRASH_KILLS=20 runs it; CI runs a quarter of it
N_JOBS = int(os.environ.get("ROTA_CRASH_JOBS", "240"))
KILLS = int(os.environ.get("ROTA_CRASH_KILLS", "6"))


@pytest.mark.slow
def test_repeated_sigkill_loses_nothing_and_runs_nothing_twice(daemon_factory, tmp_path):
    rng = random.Random(20261122)
    runs = tmp_path / "runs.txt"
    d = daemon_factory(simulate="4x24G").start()
    specs = []
    for n in range(N_JOBS):
        code = 3 if n % 10 == 7 else 0
        pause = rng.choice(["0", "0.05", "0.2", "3"])
        if n % 40 == 5:  # outlives a restart (a daemon takes seconds to start), to re-adopt
            pause = "20"
        script = f'echo "$ROTA_JOB_ID" >> {runs}; sleep {pause}; exit {code}'
        specs.append(({"command": ["sh", "-c", script], "gpus": 0.25, "name": f"j{n}"}, code))
    with d.client() as c:
        jobs = c.submit([spec for spec, _ in specs])
        expected = {job["id"]: code for job, (_, code) in zip(jobs, specs, strict=True)}
    for _ in range(KILLS):
        # let it get somewhere (some job running: a loaded machine takes its time), then
        # crash at a random point
        with d.client() as c:
            wait_until(lambda: any(j["state"] == "running" for j in c.jobs(limit=N_JOBS + 100))
                       or all(j["state"] in ("completed", "failed")
                              for j in c.jobs(limit=N_JOBS + 100)),
                       what="a job to run")
        time.sleep(rng.uniform(0.2, 1.2))
        d.kill()
        time.sleep(rng.uniform(0.0, 0.6))  # jobs keep running and ending while it is down
        d.start()
    with d.client() as c:
        def all_done() -> bool:
            return all(j["state"] in ("completed", "failed") for j in c.jobs(limit=N_JOBS + 100))
        wait_until(all_done, timeout=240 * max(1.0, N_JOBS / 240), every=0.5,
                   what="every job to finish")
        jobs = {j["id"]: j for j in c.jobs(limit=N_JOBS + 100)}
        assert set(jobs) == set(expected)  # nothing lost
        for job_id, code in expected.items():
            want = "completed" if code == 0 else "failed"
            assert (jobs[job_id]["state"], jobs[job_id]["exit_code"]) == (want, code), job_id
        assert all(g["allocated"] == 0 for g in c.gpus()["gpus"])  # no stale allocations
    started = Counter(int(x) for x in runs.read_text().split())
    assert set(started) == set(expected)
    twice = {j: n for j, n in started.items() if n > 1}
    assert not twice, f"jobs ran more than once: {twice}"
    adopted = sum(1 for j in expected for e in d.client().events(j) if e["kind"] == "adopted")
    # the kills really hit running jobs, which were re-adopted
    assert adopted > 0, _kinds(d, expected)


def _kinds(d, expected) -> Counter:  # type: ignore[no-untyped-def]
    with d.client() as c:
        return Counter(e["kind"] + ":" + (e["message"] or "")[:30] for j in expected
                       for e in c.events(j) if e["kind"] not in ("submitted", "completed"))


def _runner_of(home) -> psutil.Process:  # type: ignore[no-untyped-def]
    """The runner serving the socket now, by its own word (``hello``). Not from a scan of
    the processes: a job the runner is starting carries the runner's argv until its exec,
    and, its runner killed then, the keeper's child it is looks like the next runner."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(30)
        s.connect(str(home / "runner.sock"))
        s.send(b'{"op": "hello"}')
        return psutil.Process(json.loads(s.recv(1 << 16))["runner"])


def _wait_for_new_runner(home, old: psutil.Process | None) -> psutil.Process:  # type: ignore[no-untyped-def]
    got: list[psutil.Process] = []

    def new() -> bool:
        try:
            got[:] = [_runner_of(home)]
        except (OSError, ValueError, psutil.Error):  # not there yet; died before answering
            return False
        return old is None or got[0].pid != old.pid

    wait_until(new, timeout=30, what="the keeper to start a new runner")
    return got[0]


@pytest.mark.slow
def test_jobs_outlive_their_runner_killed_repeatedly(daemon_factory, tmp_path):
    """SIGKILL the local runner (as the OOM killer might) again and again under tens of
    running jobs: each job ends once, with its own exit status, none charged a retry."""
    rng = random.Random(20261128)
    runs = tmp_path / "runs.txt"
    d = daemon_factory(simulate="4x24G").start()
    specs = []
    for n in range(60):
        code = 5 if n % 6 == 1 else 0
        pause = rng.choice(["0.1", "0.5", "1.5", "3", "5"])
        script = f'echo "$ROTA_JOB_ID" >> {runs}; sleep {pause}; exit {code}'
        specs.append({"command": ["sh", "-c", script], "gpus": 0.05, "name": f"r{n}"})
    with d.client() as c:
        jobs = c.submit(specs)
        expected = {j["id"]: (5 if n % 6 == 1 else 0) for n, j in enumerate(jobs)}
        runner = _wait_for_new_runner(d.home, None)  # started for the first launch
        runner.kill()  # in the middle of the launches, likely
        runner = _wait_for_new_runner(d.home, runner)
        wait_until(lambda: sum(j["state"] == "running" for j in c.jobs(limit=100)) >= 20,
                   timeout=60, what="tens of jobs to run")
        for _ in range(3):
            runner.kill()  # its jobs run on; the keeper starts another runner
            runner = _wait_for_new_runner(d.home, runner)
            time.sleep(rng.uniform(0.2, 0.8))
        wait_until(lambda: all(j["state"] in ("completed", "failed") for j in c.jobs(limit=100)),
                   timeout=240, every=0.5, what="every job to finish")
        got = {j["id"]: j for j in c.jobs(limit=100)}
    assert set(got) == set(expected)  # nothing lost
    wrong = {i: (got[i]["state"], got[i]["exit_code"], got[i]["end_reason"])
             for i, code in expected.items()
             if (got[i]["state"], got[i]["exit_code"]) !=
             ("completed" if code == 0 else "failed", code)}
    assert not wrong, wrong  # each its own exit status, none "killed by signal 9"
    # with no retries allowed, a failure charged to a job would have ended it failed above;
    # an attempt more is only a launch the runner's death cut short, queued again
    with d.client() as c:
        again = {i: [e["message"] for e in c.events(i) if e["kind"] == "requeued"]
                 for i in expected if got[i]["attempts"] > 1}
    assert all(m.startswith("not started") for ms in again.values() for m in ms), again
    started = Counter(int(x) for x in runs.read_text().split())
    assert set(started) == set(expected) and set(started.values()) == {1}, started


def test_the_runner_outlives_the_daemon_and_its_own_death_is_survived(daemon_factory,
                                                                      tmp_path):
    """Jobs are started by the local runner, which stays when the daemon is killed (and
    records the end of a job that finishes meanwhile). When the runner itself is killed, a
    running job goes on under its keeper, whose next runner takes it over: its own exit
    status is recorded; new jobs go to that next runner."""
    go = tmp_path / "go"
    d = daemon_factory().start()
    with d.client() as c:
        quick, slow = c.submit([
            {"command": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 4"],
             "gpus": 0.25},
            {"command": ["sh", "-c", f"while [ ! -e {go}2 ]; do sleep 0.05; done; exit 6"],
             "gpus": 0.25}])
        wait_until(lambda: {c.job(quick["id"])["state"], c.job(slow["id"])["state"]}
                   == {"running"}, what="both to run")
    runner = _runner_of(d.home)
    d.kill()
    go.touch()  # the quick job ends while the daemon is down
    time.sleep(0.5)
    assert runner.is_running()
    d.start()
    with d.client() as c:
        wait_until(lambda: c.job(quick["id"])["state"] == "failed", what="the quick job's end")
        assert c.job(quick["id"])["exit_code"] == 4  # recorded by the runner meanwhile
        runner.kill()
        second = _wait_for_new_runner(d.home, runner)
        time.sleep(1.0)
        assert c.job(slow["id"])["state"] == "running"  # still running: not taken for ended
        (tmp_path / "go2").touch()
        wait_until(lambda: c.job(slow["id"])["state"] == "failed", what="the slow job's end")
        assert c.job(slow["id"])["exit_code"] == 6  # recorded by the keeper
        [after] = c.submit([{"command": ["true"], "gpus": 0.25}])
        assert c.wait(after["id"], timeout=30)["state"] == "completed"
    assert _runner_of(d.home).pid == second.pid
    # the dead runner's journal, every job in it stored as ended, goes at the next start;
    # the live runner's stays
    journal = d.home / "status" / "journal"
    assert any(p.name.startswith(f"runner-{runner.pid}-") for p in journal.iterdir())
    d.stop()
    d.start()
    names = [p.name for p in journal.iterdir()]
    assert not any(n.startswith(f"runner-{runner.pid}-") for n in names), names
    assert any(n.startswith(f"runner-{_runner_of(d.home).pid}-") for n in names), names


def _keeper_of(home) -> psutil.Process:  # type: ignore[no-untyped-def]
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(30)
        s.connect(str(home / "runner.sock"))
        s.send(b'{"op": "hello"}')
        return psutil.Process(json.loads(s.recv(1 << 16))["pid"])


@pytest.mark.slow
@pytest.mark.parametrize(("kills", "share"), [(1, 0.05), (3, 0.15)])
def test_jobs_outlive_their_runner_and_keeper_killed_together(daemon_factory, tmp_path,
                                                               kills, share):
    """SIGKILL the runner and its keeper at once (as the OOM killer may): under 60 running
    jobs, and then again and again under jobs launched in waves (each wave through the
    keeper the daemon starts anew): each job's waiter records its end, so none is lost,
    none runs its command twice, each ends with its own exit status."""
    rng = random.Random(20261205 + kills)
    runs = tmp_path / "runs.txt"
    d = daemon_factory(simulate="4x24G").start()
    specs = []
    for n in range(60):
        code = 5 if n % 6 == 1 else 0
        pause = rng.choice(["0.5", "1.5", "3", "4"])
        script = f'echo "$ROTA_JOB_ID" >> {runs}; sleep {pause}; exit {code}'
        specs.append({"command": ["sh", "-c", script], "gpus": share, "name": f"k{n}"})
    with d.client() as c:
        jobs = c.submit(specs)
        expected = {j["id"]: (5 if n % 6 == 1 else 0) for n, j in enumerate(jobs)}
        wait_until(lambda: sum(j["state"] == "running" for j in c.jobs(limit=100))
                   >= min(40, int(4 / share) // 2), timeout=60, what="tens of jobs to run")
        runner = None
        for _ in range(kills):
            # the daemon starts the next keeper for its next launch
            runner = _wait_for_new_runner(d.home, runner)
            keeper = _keeper_of(d.home)
            for p in (runner, keeper):
                p.kill()
            psutil.wait_procs([runner, keeper], timeout=10)
            time.sleep(rng.uniform(0.2, 0.8))
        wait_until(lambda: all(j["state"] in ("completed", "failed") for j in c.jobs(limit=100)),
                   timeout=240, every=0.5, what="every job to finish")
        got = {j["id"]: j for j in c.jobs(limit=100)}
    assert set(got) == set(expected)  # nothing lost
    wrong = {i: (got[i]["state"], got[i]["exit_code"], got[i]["end_reason"])
             for i, code in expected.items()
             if (got[i]["state"], got[i]["exit_code"]) !=
             ("completed" if code == 0 else "failed", code)}
    assert not wrong, wrong  # each its own exit status, none "not recorded"
    started = Counter(int(x) for x in runs.read_text().split())
    assert set(started) == set(expected)
    twice = {j: n for j, n in started.items() if n > 1}
    assert not twice, f"jobs ran more than once: {twice}"
