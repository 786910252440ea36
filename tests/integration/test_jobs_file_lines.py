"""A line of the watched jobs file runs once: a failed or cancelled line stays as it ended
when the file is edited or the daemon restarts, until its text changes or `rota add --again`
names it; a line the daemon refuses at submit is a `jobsfile_error` event."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.rota_testing import DaemonProcess, kill_job_processes, wait_until


def _by_line(d: DaemonProcess) -> dict[int, list[str]]:
    """The states of the jobs each line of the jobs file ran as, oldest first."""
    out: dict[int, list[str]] = {}
    with d.client() as c:
        for job in sorted(c.jobs(limit=100), key=lambda j: j["id"]):
            out.setdefault(int(job["source"].rsplit(":", 1)[1]), []).append(job["state"])
    return out


def _file_errors(home: Path) -> list[str]:
    with sqlite3.connect(home / "rota.db") as db:
        return [m for (m,) in db.execute(
            "select message from events where kind = 'jobsfile_error' order by id")]


def test_a_line_runs_once_across_edits_and_restarts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    jobs = home / "jobs.txt"
    jobs.write_text("0,false,,,\n"         # fails
                    "0,sleep,,600,\n"      # cancelled below
                    "0,true,,,3-3\n"       # fine
                    "0,true,,--never,7\n")  # refused at submit: there is no GPU 7
    d = DaemonProcess(home).start()
    try:
        wait_until(lambda: _by_line(d).get(1) == ["failed"] and _by_line(d).get(3) == [
            "completed"] and _by_line(d).get(2) == ["running"], 60, what="lines 1-3 ran")
        with d.client() as c:
            [sleeper] = c.jobs(states=["running"])
            c.cancel(sleeper["id"])
        wait_until(lambda: _by_line(d).get(2) == ["cancelled"], 30, what="line 2 cancelled")
        assert any(m.startswith(f"{jobs}:4: ") and "7" in m for m in _file_errors(home))

        r = d.cli("add", "0", "echo", "--json", "--", "five")  # an edit: the file is read again
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["line"] == 5
        wait_until(lambda: _by_line(d).get(5) == ["completed"], 30, what="line 5 ran")
        assert _by_line(d) == {1: ["failed"], 2: ["cancelled"], 3: ["completed"],
                               5: ["completed"]}
        r = d.cli("add", "0", "false")  # the same text as line 1: it ran before
        assert r.returncode == 0 and "ran before as job" in r.stdout, r.stdout
        assert "rota add --again 6" in r.stdout

        d.stop()
        d.start()  # the record of what ran is the store's
        with d.client() as c:
            status = c.reload_jobs_file()
        assert status["queued"] == []
        assert [(r["line"], r["state"]) for r in status["ran_before"]] == [
            (1, "failed"), (2, "cancelled"), (3, "completed"), (5, "completed"), (6, "failed")]

        r = d.cli("add", "--again", "1", "2", "9", "--json")
        assert r.returncode == 2
        rows = {row["line"]: row for row in json.loads(r.stdout)["lines"]}
        assert rows[1]["job"] is not None and rows[2]["job"] is not None
        assert rows[9]["job"] is None and "no job on this line" in rows[9]["error"]
        wait_until(lambda: _by_line(d).get(1) == ["failed", "failed"], 30,
                   what="line 1 ran again")
        assert len(_by_line(d)[2]) == 2
    finally:
        d.stop()
        kill_job_processes(home)
