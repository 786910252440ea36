"""The `rota` command line against a real daemon on simulated GPUs."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from rota.cli.jobs import wait_exit_code
from rota.errors import Conflict
from rota.jobsfile import format_jobs_line

PY = sys.executable


def _json(result: Any) -> Any:
    assert result.stdout.strip(), result.output
    return json.loads(result.stdout)


def _submit(rota: Any, *args: str) -> list[dict[str, Any]]:
    r = rota("submit", "--json", *args)
    assert r.exit_code == 0, r.output
    return list(_json(r)["jobs"])


def _one(rota: Any, *args: str) -> int:
    return int(_submit(rota, *args)[0]["id"])


# --- no daemon ---------------------------------------------------------------------------

def test_without_a_daemon_commands_exit_3_and_say_how_to_start_one(
        tmp_path: Path, runner_for: Any) -> None:
    rota = runner_for({"ROTA_HOME": str(tmp_path)})
    for args in (["queue"], ["submit", "--", "true"], ["gpus"], ["status"], ["why", "1"],
                 ["wait", "1"], ["cancel", "1"], ["drain"], ["sessions"], ["logs", "1"]):
        r = rota(*args)
        assert r.exit_code == 3, (args, r.output)
        assert "rota server --detach" in r.stderr, args
    r = rota("queue", "--json")
    assert r.exit_code == 3
    assert _json(r)["error"] == "DaemonUnavailable"


def test_add_without_a_daemon_still_appends(tmp_path: Path, runner_for: Any) -> None:
    rota = runner_for({"ROTA_HOME": str(tmp_path)})
    r = rota("add", "3", "run.sh", "--json", "--", "--x", "1")
    assert r.exit_code == 0, r.output
    out = _json(r)
    assert out["daemon"] is False and out["job"] is None
    assert (tmp_path / "jobs.txt").read_text() == "3,run.sh,,--x 1,\n"
    r = rota("add", "3", "run.sh", "--", "--y")
    assert "will queue the line when it starts" in r.stdout
    assert (tmp_path / "jobs.txt").read_text().splitlines()[1] == "3,run.sh,,--y,"


# --- submit --------------------------------------------------------------------------------

def test_submit_keeps_the_jobs_own_options(rota: Any, daemon: Any) -> None:
    r = rota("submit", "--gpus", "1", "--", PY, "-c", "print(1)", "--lr", "0.1", "--gpus", "3")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("submitted job ")
    jid = int(r.stdout.split()[2])
    spec = _json(rota("show", str(jid), "--json"))["spec"]
    assert spec["command"] == [PY, "-c", "print(1)", "--lr", "0.1", "--gpus", "3"]
    assert spec["gpus"] == 1
    assert spec["cwd"] == str(Path.cwd())
    # without `--`: the first word that is not an option starts the job's argv
    job = _submit(rota, "--gpus", "0", "echo", "a", "--gpus", "3")[0]
    assert job["gpus"] == 0
    assert _json(rota("show", str(job["id"]), "--json"))["spec"]["command"] == \
        ["echo", "a", "--gpus", "3"]
    assert daemon.client.wait(jid, timeout=20)["state"] == "completed"


def test_submit_sends_only_what_was_set_and_reads_units(rota: Any, tmp_path: Path) -> None:
    job = _submit(rota, "--gpus", "0", "--gpu-mem", "2G", "--priority", "-3", "--name", "u",
                  "--time-limit", "1h30m", "--grace", "5s", "--retries", "2",
                  "--retry-backoff", "20s", "--tag", "a", "--tag", "b", "--hold",
                  "--cwd", str(tmp_path), "--", "true")[0]
    spec = _json(rota("show", str(job["id"]), "--json"))["spec"]
    assert (spec["gpu_mem"], spec["priority"], spec["time_limit"], spec["grace"]) == \
        (2 << 30, -3, 5400, 5)
    assert (spec["retries"], spec["retry_backoff"], spec["tags"], spec["hold"]) == \
        (2, 20, ["a", "b"], True)
    assert spec["cwd"] == str(tmp_path)
    assert job["state"] == "held"
    assert rota("cancel", str(job["id"])).exit_code == 0


def test_submit_sweep_makes_one_job_per_combination(rota: Any, daemon: Any) -> None:
    r = rota("submit", "--gpus", "0", "--sweep", "lr=0.1,0.01,0.001", "--sweep", "seed=1..2",
             "--", "echo", "lr={lr}")
    assert r.exit_code == 0, r.output
    assert "submitted 6 jobs" in r.stdout
    assert "echo[lr=0.01,seed=2]" in r.stdout  # brackets shown, not eaten as markup
    ids = [int(w) for w in r.stdout.splitlines()[0].split(": ")[1].split(", ")]
    commands = sorted(tuple(daemon.client.job(i)["spec"]["command"]) for i in ids)
    assert commands[0] == ("echo", "lr=0.001", "--seed", "1")
    assert len(set(commands)) == 6
    for i in ids:
        assert daemon.client.wait(i, timeout=20)["state"] == "completed"
    r = rota("submit", "--sweep", "lr", "--", "true")
    assert r.exit_code == 2 and "sweep" in r.stderr


def test_submit_env_errors_and_secrets(rota: Any, daemon: Any) -> None:
    r = rota("submit", "--env", "BAD", "--", "true")
    assert r.exit_code == 2
    assert "--env" in r.stderr and "'BAD'" in r.stderr and "KEY=VALUE" in r.stderr
    r = rota("submit", "--secret-env", "s3cretvalue", "--", "true")
    assert r.exit_code == 2 and "--secret-env" in r.stderr
    assert "s3cretvalue" not in r.output
    r = rota("submit", "--env", "1X=2", "--", "true")
    assert r.exit_code == 2 and "env" in r.stderr and "1X" in r.stderr
    r = rota("submit", "--json", "--env", "1X=2", "--", "true")
    assert r.exit_code == 2 and _json(r)["error"] == "InvalidSpec"

    jid = _one(rota, "--gpus", "0", "--env", "A=1", "--secret-env", "TOKEN=s3cretvalue", "--",
               PY, "-c", "import os; print(len(os.environ['TOKEN']))")
    assert daemon.client.wait(jid, timeout=20)["state"] == "completed"
    for args in (["show", str(jid)], ["show", str(jid), "--json"], ["queue", "--all"],
                 ["queue", "--all", "--json"]):
        r = rota(*args)
        assert r.exit_code == 0
        assert "s3cretvalue" not in r.output, args
    assert "TOKEN=***" in rota("show", str(jid)).stdout
    assert "11" in rota("logs", str(jid)).stdout  # the job itself got the value
    with closing(sqlite3.connect(daemon.home / "rota.db")) as db:  # encrypted at rest
        stored = "\n".join(db.iterdump())
    assert "s3cretvalue" not in stored and '"TOKEN": "rota-sealed:v1:' in stored


def test_submit_shell_takes_one_string(rota: Any, daemon: Any) -> None:
    r = rota("submit", "--shell", "--", "echo", "a")
    assert r.exit_code == 2 and "ONE" in r.stderr
    jid = _one(rota, "--gpus", "0", "--shell", "--", "echo one | tr a-z A-Z")
    assert daemon.client.wait(jid, timeout=20)["state"] == "completed"
    assert "ONE" in rota("logs", str(jid)).stdout


def test_submit_without_command_or_with_bad_units(rota: Any) -> None:
    r = rota("submit", "--gpus", "1")
    assert r.exit_code == 2 and "no command" in r.stderr
    r = rota("submit", "--time-limit", "soon", "--", "true")
    assert r.exit_code == 2 and "time_limit" in r.stderr
    r = rota("submit", "--gpu-mem", "lots", "--", "true")
    assert r.exit_code == 2 and "gpu_mem" in r.stderr
    r = rota("submit", "--after", "999999", "--", "true")
    assert r.exit_code == 2 and "after" in r.stderr


def test_submit_file_reports_a_bad_item_and_keeps_the_rest(
        rota: Any, daemon: Any, tmp_path: Path) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text("- command: echo first\n"
                 "  gpus: 0\n"
                 "- command: echo second\n"
                 "  gpus: -1\n"
                 "- command: [echo, third]\n"
                 "  gpus: 0\n"
                 "  name: third\n")
    r = rota("submit", "-f", str(f), "--json")
    assert r.exit_code == 2
    out = _json(r)
    assert [j["name"] for j in out["jobs"]] == ["echo first", "third"]
    assert len(out["errors"]) == 1
    err = out["errors"][0]
    assert err["line"] == 4 and "job 2" in err["message"] and "gpus" in err["message"]
    for j in out["jobs"]:
        assert daemon.client.wait(j["id"], timeout=20)["state"] == "completed"
    r = rota("submit", "-f", str(f), "--dedup")
    assert r.exit_code == 2
    assert f"{f}:4" in r.stderr and "job 2" in r.stderr
    assert "nothing submitted" in r.stdout or "submitted" not in r.stdout

    one = tmp_path / "one.json"
    one.write_text(json.dumps({"command": ["true"], "gpus": 0, "name": "from-json"}))
    r = rota("submit", "--file", str(one), "--json")
    assert r.exit_code == 0, r.output
    assert _json(r)["jobs"][0]["name"] == "from-json"
    for extra in (["--gpus", "0"], ["--priority", "0"], ["--", "true"]):
        r = rota("submit", "-f", str(one), *extra)
        assert r.exit_code == 2 and "do not combine" in r.stderr, extra
    r = rota("submit", "-f", str(tmp_path / "missing.yaml"))
    assert r.exit_code == 2 and "cannot read" in r.stderr


def test_submit_file_item_rejected_by_the_daemon(rota: Any, tmp_path: Path) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text("jobs:\n"
                 "  - {command: 'true', gpus: 0, name: ok}\n"
                 "  - {command: 'true', gpus: 0, cwd: /no/such/dir}\n")
    r = rota("submit", "-f", str(f), "--json")
    assert r.exit_code == 2
    out = _json(r)
    assert [j["name"] for j in out["jobs"]] == ["ok"]
    assert out["errors"][0]["line"] == 3 and "cwd" in out["errors"][0]["message"]


# --- looking at jobs ---------------------------------------------------------------------

def test_queue_show_why_for_a_held_job(rota: Any, daemon: Any) -> None:
    jid = _one(rota, "--hold", "--name", "held-one", "--priority", "7", "--", "true")
    r = rota("queue")
    assert r.exit_code == 0
    line = next(x for x in r.stdout.splitlines() if "held-one" in x)
    assert "held" in line and "7" in line and "rota release" in line
    rows = _json(rota("queue", "--state", "held", "--json"))["jobs"]
    assert jid in [j["id"] for j in rows] and all(j["state"] == "held" for j in rows)
    r = rota("why", str(jid))
    assert r.exit_code == 0 and f"job {jid} is held: `rota release` lets it run" in r.stdout
    assert _json(rota("why", str(jid), "--json"))["code"] == "held"
    show = rota("show", str(jid))
    assert "held-one" in show.stdout and "timeline" in show.stdout and "submitted" in show.stdout
    assert rota("release", str(jid)).exit_code == 0
    assert daemon.client.wait(jid, timeout=20)["state"] == "completed"
    page = _json(rota("queue", "--json"))  # the queue as the scheduler holds it
    assert jid not in [j["id"] for j in page["jobs"]] and page["held"] == 0
    everything = _json(rota("queue", "--all", "--json"))  # the same shape, finished jobs too
    assert jid in [j["id"] for j in everything["jobs"]] and everything["more"] is False
    show = _json(rota("show", str(jid), "--json"))
    assert show["attempts_detail"][0]["exit_code"] == 0
    assert [(e["kind"], e["to"]) for e in show["events"]][:2] == \
        [("submitted", "held"), ("pending", "pending")]
    text = rota("show", str(jid)).stdout
    assert "attempts" in text and "completed" in text
    r = rota("why", str(jid))
    assert "completed" in r.stdout
    r = rota("show", "999999")
    assert r.exit_code == 1 and "no job 999999" in r.stderr


def test_queue_filters_and_user(rota: Any) -> None:
    r = rota("queue", "--state", "nonsense")
    assert r.exit_code == 2 and "state" in r.stderr
    assert _json(rota("queue", "--user", "nobody-has-this-name", "--json")) == \
        {"jobs": [], "limit": 200, "more": False}
    assert "the queue is empty" in rota("queue", "--user", "nobody-has-this-name").stdout


def test_wait_exit_codes(rota: Any, daemon: Any) -> None:
    ok = _one(rota, "--gpus", "0", "--", "true")
    bad = _one(rota, "--gpus", "0", "--", PY, "-c", "import sys; sys.exit(7)")
    slow = _one(rota, "--gpus", "0", "--grace", "1s", "--", "sleep", "30")
    assert rota("wait", str(ok)).exit_code == 0
    r = rota("wait", str(bad))
    assert r.exit_code == 7 and "failed" in r.stdout
    r = rota("wait", str(slow), "--timeout", "0.3", "--json")
    assert r.exit_code == 124 and _json(r)["done"] is False
    assert rota("cancel", str(slow)).exit_code == 0
    r = rota("wait", str(slow), "--timeout", "20", "--json")
    assert r.exit_code == 1 and _json(r)["state"] == "cancelled"
    assert rota("wait", str(ok), "--timeout", "0").exit_code == 2
    assert wait_exit_code({"done": True, "state": "timeout", "exit_code": None}) == 1
    assert wait_exit_code({"done": True, "state": "failed", "exit_code": 3}) == 3


def test_logs_and_follow(rota: Any, daemon: Any) -> None:
    script = "import time\nfor i in range(5):\n    print('line', i, flush=True)\n" \
             "    time.sleep(0.1)\n"
    jid = _one(rota, "--gpus", "0", "--", PY, "-c", script)
    r = rota("logs", "-f", str(jid))
    assert r.exit_code == 0
    assert all(f"line {i}" in r.stdout for i in range(5))
    assert daemon.client.wait(jid, timeout=10)["state"] == "completed"
    r = rota("logs", str(jid))
    assert "line 4" in r.stdout and "=== rota: job" in r.stdout
    out = _json(rota("logs", str(jid), "--json"))
    assert "line 4" in out["data"] and out["next"] == len(out["data"].encode())
    r = rota("logs", "-f", "--json", str(jid))
    assert "line 4" in "".join(json.loads(x)["data"] for x in r.stdout.splitlines())


def test_cancel_hold_release_several(rota: Any, daemon: Any, until: Any) -> None:
    a = _one(rota, "--gpus", "0", "--hold", "--", "true")
    b = _one(rota, "--gpus", "0", "--hold", "--", "true")
    r = rota("release", str(a), str(b))
    assert r.exit_code == 0 and f"released job {a}" in r.stdout
    for j in (a, b):
        assert daemon.client.wait(j, timeout=20)["state"] == "completed"
    r = rota("hold", str(a))
    assert r.exit_code == 1 and "only pending jobs" in r.stderr
    c = _one(rota, "--gpus", "0", "--hold", "--", "true")
    d = _one(rota, "--gpus", "0", "--grace", "1s", "--", "sleep", "30")
    until(lambda: daemon.client.job(d)["state"] == "running", 20, "job to run")
    r = rota("cancel", str(c), "999999", str(d), "--json")
    assert r.exit_code == 1
    out = _json(r)
    assert out[0] == {"id": c, "state": "cancelled"}
    assert out[1]["error"] == "NotFound"
    assert out[2] == {"id": d, "state": "running"}
    assert daemon.client.wait(d, timeout=20)["state"] == "cancelled"
    r = rota("cancel", str(c))
    assert r.exit_code == 1 and "already ended" in r.stderr


def test_sessions_and_attach(rota: Any, daemon: Any, until: Any) -> None:
    plain = _one(rota, "--gpus", "0", "--grace", "1s", "--", "sleep", "30")
    until(lambda: daemon.client.job(plain)["state"] == "running", 20, "job to run")
    r = rota("attach", str(plain))
    assert r.exit_code == 2 and "--session tmux" in r.stderr
    rota("cancel", str(plain))
    daemon.client.wait(plain, timeout=20)
    r = rota("attach", str(plain))  # the job is there, but not running: a conflict, not 404
    assert r.exit_code != 0 and f"job {plain} is cancelled, not running" in r.stderr, r.stderr
    with pytest.raises(Conflict, match="not running"):
        daemon.client.attach_argv(plain)
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    jid = _one(rota, "--gpus", "0", "--session", "tmux", "--grace", "1s", "--", "sleep", "30")
    try:
        until(lambda: daemon.client.job(jid)["state"] == "running", 20, "job to run")
        rows = _json(rota("sessions", "--json"))
        mine = [s for s in rows if s["job"] == jid]
        assert mine and mine[0]["backend"] == "tmux"
        assert f"rota-{jid}" in rota("sessions").stdout
        argv = _json(rota("attach", str(jid), "--json"))["argv"]
        assert argv[0] == "tmux" and daemon.tmux_socket in argv
    finally:
        rota("cancel", str(jid))
        daemon.client.wait(jid, timeout=20)
        daemon.client.wait(plain, timeout=20)


# --- the machine ---------------------------------------------------------------------------

def test_gpus_and_status(rota: Any) -> None:
    r = rota("gpus")
    assert r.exit_code == 0
    assert "simulated" in r.stdout and "24G" in r.stdout
    data = _json(rota("gpus", "--json"))
    assert data["devices"] == "simulated" and len(data["gpus"]) == 4
    r = rota("status")
    assert r.exit_code == 0 and "4 simulated GPUs" in r.stdout
    st = _json(rota("status", "--json"))
    assert st["health"]["ok"] is True and "counts" in st["queue"]


def _why_after_a_pass(rota: Any, until: Any, jid: int) -> dict[str, Any]:
    """`rota why --json`, once a scheduling pass has looked at the job."""
    def looked_at() -> dict[str, Any] | None:
        why = _json(rota("why", str(jid), "--json"))
        return None if why["code"] == "not_scheduled" else dict(why)
    return dict(until(looked_at, 15, "a scheduling pass"))


def test_pause_and_resume_show_in_gpus_and_why(rota: Any, daemon: Any, until: Any) -> None:
    try:
        r = rota("pause", "0", "1", "2", "3")
        assert r.exit_code == 0 and "paused GPU 3" in r.stdout
        gpus = _json(rota("gpus", "--json"))["gpus"]
        assert all(g["paused"] for g in gpus)
        assert rota("gpus").stdout.count("paused") >= 4
        jid = _one(rota, "--gpus", "1", "--allowed-gpus", "2", "--", "true")
        why = _why_after_a_pass(rota, until, jid)
        assert why["state"] == "pending" and why["code"] == "resources"
        assert "paused" in why["message"]
        r = rota("pause", "9", "--json")
        assert r.exit_code == 1 and _json(r)[0]["error"] == "NotFound"
        r = rota("resume", "0", "1", "2", "3")
        assert r.exit_code == 0 and "resumed GPU 2" in r.stdout
        assert daemon.client.wait(jid, timeout=20)["state"] == "completed"
        assert daemon.client.job(jid)["attempts_detail"][0]["gpus"] == [2]
    finally:
        for i in range(4):
            daemon.client.resume(i)


def test_drain_stops_new_starts_until_off(rota: Any, daemon: Any, until: Any) -> None:
    try:
        r = rota("drain")
        assert r.exit_code == 0 and "draining" in r.stdout
        assert _json(rota("status", "--json"))["health"]["draining"] is True
        assert "draining" in rota("gpus").stdout
        jid = _one(rota, "--gpus", "0", "--", "true")
        why = _why_after_a_pass(rota, until, jid)
        assert why["state"] == "pending" and why["code"] == "draining"
        assert "draining" in why["message"]
        r = rota("drain", "--off", "--json")
        assert r.exit_code == 0 and _json(r) == {"draining": False}
        assert daemon.client.wait(jid, timeout=20)["state"] == "completed"
    finally:
        daemon.client.drain(on=False)


# --- the jobs file ----------------------------------------------------------------------------

def test_add_appends_a_line_that_the_daemon_queues(
        rota: Any, daemon: Any, tmp_path: Path) -> None:
    script = tmp_path / "show args.sh"
    script.write_text('for a in "$@"; do echo "arg=$a"; done\n')
    r = rota("add", "4", "show args.sh", "--json", "--", "--tags", "a, b", "--n", "1",
             cwd=tmp_path)
    assert r.exit_code == 0, r.output
    out = _json(r)
    jobs_file = daemon.home / "jobs.txt"
    expected = format_jobs_line(4, str(script), None, ["--tags", "a, b", "--n", "1"], None)
    assert out["path"] == str(jobs_file) and out["text"] == expected
    assert jobs_file.read_text().splitlines()[out["line"] - 1] == expected
    jid = out["job"]
    assert jid is not None and out["error"] is None
    assert daemon.client.wait(jid, timeout=20)["state"] == "completed"
    log = rota("logs", str(jid)).stdout
    assert "arg=a, b" in log and "arg=--n" in log
    job = daemon.client.job(jid)
    assert job["priority"] == 4 and job["source"] == f"{jobs_file}:{out['line']}"
    r = rota("add", "4", "show args.sh", "--", "--tags", "a, b", "--n", "1", cwd=tmp_path)
    assert r.exit_code == 0 and f"ran before as job {jid}" in r.stdout
    r = rota("add", "1", "x.sh", "--allowed-gpus", "3-1")
    assert r.exit_code == 2 and "allowed_gpus" in r.stderr
    before = jobs_file.read_text()
    r = rota("add", "1", "x.py", "--conda", "no-such-env-here", "--json")
    if shutil.which("conda") is None:
        assert r.exit_code == 2 and "conda is not installed" in _json(r)["message"]
        assert jobs_file.read_text() == before  # nothing left behind


# --- the demo ---------------------------------------------------------------------------------

def test_demo_runs_the_tour_and_stops_its_daemon(
        tmp_path_factory: pytest.TempPathFactory, runner_for: Any) -> None:
    home = tmp_path_factory.mktemp("demo")
    rota = runner_for({"ROTA_HOME": str(home)})
    r = rota("demo", "--json", "--timeout", "60")
    assert r.exit_code == 0, r.output
    jobs = {j["name"]: j for j in _json(r)["jobs"]}
    assert jobs["flaky"]["state"] == "completed" and jobs["flaky"]["attempts"] == 2
    assert jobs["huge"]["state"] == "cancelled"
    assert sum(1 for n in jobs if n.startswith("sweep[lr=")) == 3
    share = [jobs["share-a"]["attempts_detail"][0], jobs["share-b"]["attempts_detail"][0]]
    assert share[0]["gpus"] == share[1]["gpus"] and share[0]["fraction"] == 0.5
    assert jobs["urgent"]["started_at"] < min(jobs["eval-1"]["started_at"],
                                              jobs["eval-2"]["started_at"])
    assert all(j["state"] == "completed" for n, j in jobs.items() if n != "huge")
    assert not (home / "rota.sock").exists()


def test_the_demos_summary_reads_whole_at_80_columns(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Piped, as a README reader's terminal of 80 columns: each job of the summary on one
    line, its name and its state whole (a boxed table folded 'completed' mid-word)."""
    home = tmp_path_factory.mktemp("demo80")
    env = {**os.environ, "ROTA_HOME": str(home), "COLUMNS": "80"}
    r = subprocess.run([sys.executable, "-m", "rota", "demo", "--timeout", "60"], env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.rstrip() == "summary")
    end = next(i for i, ln in enumerate(lines) if ln.startswith("$ rota logs"))
    summary = lines[start + 1:end]
    rows = {ln.split()[1]: ln.split()[2] for ln in summary[1:] if ln.strip()}
    assert rows["flaky"] == "completed" and rows["huge"] == "cancelled", summary
    assert rows["sweep[lr=1e-3]"] == "completed", summary
    assert len(rows) == 13 and max(map(len, summary)) <= 80, summary


def test_every_command_speaks_json(rota: Any, daemon: Any) -> None:
    jid = _one(rota, "--gpus", "0", "--hold", "--", "true")
    for args in (["hold", str(jid)], ["release", str(jid)], ["wait", str(jid)],
                 ["queue"], ["queue", "--all"], ["show", str(jid)], ["why", str(jid)],
                 ["logs", str(jid)], ["sessions"], ["gpus"], ["status"], ["pause", "3"],
                 ["resume", "3"], ["drain", "--off"]):
        r = rota(*args, "--json")
        assert r.exit_code in (0, 1), (args, r.output)
        assert isinstance(_json(r), dict | list), args
    assert _json(rota("hold", str(jid), "--json"))[0]["error"] == "Conflict"


@pytest.fixture()
def empty_pg() -> Iterator[str]:
    from rota_testing import pg_database

    yield from pg_database()


def test_the_demo_runs_on_the_postgresql_database_named_when_it_is_empty(
        tmp_path_factory: pytest.TempPathFactory, empty_pg: str) -> None:
    from rota.store.repo import Store

    home = tmp_path_factory.mktemp("demo-pg")
    env = {**os.environ, "ROTA_HOME": str(home), "ROTA_DATABASE_URL": empty_pg}
    r = subprocess.run([sys.executable, "-m", "rota", "demo", "--json", "--timeout", "60"],
                       env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already holds" not in r.stderr and not (home / "demo").exists(), r.stderr
    assert not (home / "rota.db").exists()  # no SQLite beside it
    store = Store.open(empty_pg)
    try:
        names = {j.name for j in store.list_jobs(limit=100)}
    finally:
        store.close()
    assert {"flaky", "huge", "urgent"} <= names, names
    # run again: the database now holds jobs, and the demo keeps out of them, saying so
    r = subprocess.run([sys.executable, "-m", "rota", "demo", "--timeout", "60"],
                       env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    said = " ".join(r.stdout.split())
    assert "already holds jobs: the demo uses its own queue in" in said, said
    assert (home / "demo" / "rota.db").exists()
