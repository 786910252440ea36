"""`rota sim --from-history` against a real daemon: the replay's jobs are the ones that ran,
with the run times, sizes, names and limits the daemon recorded."""

from __future__ import annotations

import json
from typing import Any

from rota_testing import DaemonProcess, wait_until


def job(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return c.job(job_id)


def test_the_history_replays_the_jobs_that_ran_with_their_durations(
        daemon: DaemonProcess, tmp_path: Any) -> None:
    ids = [daemon.submit("--gpus", "1", "--name", "quick", "--", "sleep", "0.3"),
           daemon.submit("--gpus", "0.5", "--name", "half", "--time-limit", "5m",
                         "--", "sleep", "0.6"),
           daemon.submit("--gpus", "2", "--", "sleep", "0.1")]
    for i in ids:
        wait_until(lambda i=i: job(daemon, i)["state"] == "completed", timeout=60,
                   what=f"job {i} to complete")
    ran = {i: job(daemon, i) for i in ids}
    saved = tmp_path / "history.json"
    r = daemon.cli("sim", "--from-history", "30d", "--gpus", "4x24G", "--json",
                   "--compare", "fifo,backfill", "--save-trace", str(saved))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["jobs"] == 3
    assert [run["finished"] for run in out["runs"]] == [3, 3]
    trace = {t["id"]: t for t in json.loads(saved.read_text())}
    assert sorted(trace) == sorted(ids)
    first = min(j["created_at"] for j in ran.values())
    for i, j in ran.items():
        t = trace[i]
        assert abs(t["duration"] - (j["ended_at"] - j["started_at"])) < 1e-6
        assert abs(t["submit"] - (j["created_at"] - first)) < 1e-6
        assert t["gpus"] == j["gpus"]
    assert trace[ids[0]]["name"] == "quick"
    assert trace[ids[1]]["time_limit"] == 300
    # each job ran alone on 4 GPUs: the replay's JCTs are those durations (none waits)
    durations = sorted(t["duration"] for t in trace.values())
    for run in out["runs"]:
        assert run["queueing"]["mean"] == 0
        assert abs(run["jct"]["mean"] - sum(durations) / 3) < 1e-6
    # fairshare on the history takes the daemon's shares (rota share set): read, not refused
    assert daemon.cli("share", "set", "nobody-here", "3").returncode == 0
    r = daemon.cli("sim", "--from-history", "30d", "--gpus", "4x24G", "--json",
                   "--policy", "fairshare")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["runs"][0]["finished"] == 3
