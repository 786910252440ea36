"""Kill the daemon with SIGKILL at random moments: nothing lost, nothing run twice."""

from __future__ import annotations

import random
import time
from collections import Counter

import psutil
import pytest

from rota_testing import wait_until

N_JOBS = 240
KILLS = 6


@pytest.mark.slow
def test_repeated_sigkill_loses_nothing_and_runs_nothing_twice(daemon_factory, tmp_path):
    rng = random.Random(20261122)
    runs = tmp_path / "runs.txt"
    d = daemon_factory(simulate="4x24G").start()
    specs = []
    for n in range(N_JOBS):
        code = 3 if n % 10 == 7 else 0
        pause = rng.choice(["0", "0.05", "0.2", "3"])
        script = f'echo "$ROTA_JOB_ID" >> {runs}; sleep {pause}; exit {code}'
        specs.append(({"command": ["sh", "-c", script], "gpus": 0.25, "name": f"j{n}"}, code))
    with d.client() as c:
        jobs = c.submit([spec for spec, _ in specs])
        expected = {job["id"]: code for job, (_, code) in zip(jobs, specs, strict=True)}
    for _ in range(KILLS):
        time.sleep(rng.uniform(0.2, 1.2))  # let it get somewhere, then crash at a random point
        d.kill()
        time.sleep(rng.uniform(0.0, 0.6))  # jobs keep running and ending while it is down
        d.start()
    with d.client() as c:
        def all_done() -> bool:
            return all(j["state"] in ("completed", "failed") for j in c.jobs(limit=1000))
        wait_until(all_done, timeout=240, every=0.5, what="every job to finish")
        jobs = {j["id"]: j for j in c.jobs(limit=1000)}
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
    sock = str(home / "runner.sock")
    found = [p for p in psutil.process_iter(["cmdline"]) if sock in (p.info["cmdline"] or [])]
    assert len(found) == 1, found
    return found[0]


def test_the_runner_outlives_the_daemon_and_its_own_death_is_survived(daemon_factory,
                                                                      tmp_path):
    """Jobs are started by the local runner, which stays when the daemon is killed (and
    records the end of a job that finishes meanwhile). When the runner itself is killed, a
    running job is not taken for ended: it is watched directly and ends as killed (its exit
    status died with the runner), and the next job gets a new runner."""
    go = tmp_path / "go"
    d = daemon_factory().start()
    with d.client() as c:
        quick, slow = c.submit([
            {"command": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 4"],
             "gpus": 0.25},
            {"command": ["sh", "-c", f"while [ ! -e {go}2 ]; do sleep 0.05; done"],
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
        time.sleep(1.0)
        assert c.job(slow["id"])["state"] == "running"  # still running: not taken for ended
        (tmp_path / "go2").touch()
        wait_until(lambda: c.job(slow["id"])["state"] == "failed", what="the slow job's end")
        assert "signal 9" in c.job(slow["id"])["end_reason"]
        [after] = c.submit([{"command": ["true"], "gpus": 0.25}])
        assert c.wait(after["id"], timeout=30)["state"] == "completed"
    assert _runner_of(d.home).pid != runner.pid
    # the dead runner's journal, every job in it stored as ended, goes at the next start;
    # the live runner's stays
    journal = d.home / "status" / "journal"
    assert any(p.name.startswith(f"runner-{runner.pid}-") for p in journal.iterdir())
    d.stop()
    d.start()
    names = [p.name for p in journal.iterdir()]
    assert not any(n.startswith(f"runner-{runner.pid}-") for n in names), names
    assert any(n.startswith(f"runner-{_runner_of(d.home).pid}-") for n in names), names
