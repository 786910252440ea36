"""Workspaces: every job of a user and project sees the same folder (ROTA_WORKSPACE), and a
workspace over its quota holds its jobs, with that reason, until it is back under."""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rota_testing import DaemonProcess, patience, running_daemon, wait_until

WRITE = ("import os; open(os.path.join(os.environ['ROTA_WORKSPACE'], 'data.bin'), 'wb')"
         ".write(b'x' * int(os.environ['SIZE'])); print(os.environ['ROTA_WORKSPACE'])")
READ = ("import os; print('found', len(open(os.path.join(os.environ['ROTA_WORKSPACE'], "
        "'data.bin'), 'rb').read()))")


def run(d: DaemonProcess, work: Path, script: str, *args: str) -> int:
    return d.submit("--gpus", "0", *args, "--", sys.executable, "-c", script, cwd=work)


def ended(d: DaemonProcess, job: int) -> dict[str, Any]:
    with d.client() as c:
        got: dict[str, Any] = c.wait(job, timeout=patience(60))
    return got


#: a workspace quota of 1M, measured every 0.3 s
SMALL_QUOTA = '[storage]\nworkspace_quota = "1M"\nworkspace_scan = 0.3\n'


def fill_over_quota(d: DaemonProcess, work: Path) -> dict[str, Any]:
    """A job writes 2M into the default workspace: its row once measured over its quota."""
    me = getpass.getuser()
    filler = run(d, work, WRITE, "--env", f"SIZE={2 << 20}")
    assert ended(d, filler)["state"] == "completed"
    deadline = time.monotonic() + patience(20)
    while not workspaces(d).get(f"{me}/default", {}).get("over"):
        assert time.monotonic() < deadline, workspaces(d)
        time.sleep(0.1)
    return workspaces(d)[f"{me}/default"]


def workspaces(d: DaemonProcess) -> dict[str, dict[str, Any]]:
    r = d.cli("workspace", "--json")
    assert r.returncode == 0, r.stderr
    return {w["name"]: w for w in json.loads(r.stdout)["workspaces"]}


def test_jobs_of_a_user_and_project_share_a_workspace(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    me = getpass.getuser()
    with running_daemon(tmp_path / "home") as d:
        first = run(d, work, WRITE, "--env", "SIZE=1234")
        assert ended(d, first)["state"] == "completed"
        second = run(d, work, READ)
        assert ended(d, second)["state"] == "completed"
        assert "found 1234" in d.cli("logs", str(second)).stdout
        other = run(d, work, READ, "--project", "vision")  # another project: another folder
        assert ended(d, other)["state"] == "failed"
        ws = tmp_path / "home" / "workspaces"
        assert (ws / me / "default" / "data.bin").stat().st_size == 1234
        assert not (ws / me / "vision").exists()  # nothing written there: not left behind
        assert str(ws / me / "default") in d.cli("logs", str(first)).stdout
        assert (ws / me / "default").stat().st_mode & 0o777 == 0o700


def test_a_workspace_no_job_wrote_into_goes_with_its_last_job(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    me = getpass.getuser()
    folder = tmp_path / "home" / "workspaces" / me / "default"
    go = work / "go"
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"
    with running_daemon(tmp_path / "home") as d:
        plain = run(d, work, "print('no workspace used')")
        assert ended(d, plain)["state"] == "completed"
        assert not folder.exists() and not folder.parent.exists()
        # two jobs share it: the first ending while the other runs leaves it in place
        waiting = run(d, work, wait)

        def state(job: int) -> str:
            with d.client() as c:
                return str(c.request("GET", f"/v1/jobs/{job}")["state"])

        wait_until(lambda: state(waiting) == "running", timeout=patience(30),
                   what="the waiting job to run")
        quick = run(d, work, "print('done')")
        assert ended(d, quick)["state"] == "completed"
        assert folder.is_dir()
        go.touch()
        assert ended(d, waiting)["state"] == "completed"
        assert not folder.exists()
        # what a job leaves there stays, with its folder
        writer = run(d, work, WRITE, "--env", "SIZE=10")
        assert ended(d, writer)["state"] == "completed"
        assert (folder / "data.bin").stat().st_size == 10


def test_a_workspace_over_its_quota_holds_its_jobs_until_an_admin_raises_it(
        tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    me = getpass.getuser()
    with running_daemon(home, SMALL_QUOTA) as d:
        seen = fill_over_quota(d, work)
        assert seen["bytes"] == 2 << 20 and seen["quota"] == 1 << 20
        held = run(d, work, READ)
        elsewhere = run(d, work, READ, "--project", "vision")  # its own workspace: runs
        assert ended(d, elsewhere)["state"] == "failed"  # (nothing to read there)
        time.sleep(1.0)
        with d.client() as c:
            assert c.job(held)["state"] == "pending"
        why = d.cli("why", str(held)).stdout
        assert f"workspace {me}/default holds 2M, over its quota of 1M" in why, why

        r = d.cli("workspace", "quota", f"{me}/default", "10M", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["own_quota"] is True
        got = ended(d, held)
        assert got["state"] == "completed", got
        assert "found 2097152" in d.cli("logs", str(held)).stdout
        assert workspaces(d)[f"{me}/default"]["over"] is False


def test_a_job_that_needs_no_workspace_never_waits_for_one_over_its_quota(
        tmp_path: Path) -> None:
    """``--no-workspace``: no ROTA_WORKSPACE, and its workspace's quota does not hold it,
    also after a restart (the queue is then read from the store, without the specs)."""
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    plain = "import os; print('workspace:', os.environ.get('ROTA_WORKSPACE'))"
    gate = "import os, time; [time.sleep(0.05) for _ in range(2400) if not os.path.exists('go')]"
    with running_daemon(home, SMALL_QUOTA) as d:
        fill_over_quota(d, work)
        held = run(d, work, READ)
        free = run(d, work, plain, "--no-workspace")
        assert ended(d, free)["state"] == "completed"
        assert "workspace: None" in d.cli("logs", str(free)).stdout
        first = run(d, work, gate, "--no-workspace")
        then = run(d, work, plain, "--no-workspace", "--after", str(first))
        with d.client() as c:
            wait_until(lambda: c.job(first)["state"] == "running", what="the gate to run")
        d.stop()  # `then` waits in the store; `first` goes on under the runner
        d.start()
        (work / "go").touch()
        assert ended(d, first)["state"] == "completed"
        assert ended(d, then)["state"] == "completed", d.cli("why", str(then)).stdout
        with d.client() as c:
            assert c.job(held)["state"] == "pending"  # the quota still holds the others
        assert "over its quota" in d.cli("why", str(held)).stdout


def test_cleanup_removes_only_what_its_dry_run_listed(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    me = getpass.getuser()
    with running_daemon(tmp_path / "home") as d:
        assert ended(d, run(d, work, WRITE, "--env", "SIZE=10"))["state"] == "completed"
        ws = tmp_path / "home" / "workspaces" / me / "default"
        old = time.time() - 40 * 86400
        files = {"old.txt": True, "deep/er/old.bin": True, "changed-later.txt": True,
                 "fresh.txt": False}
        for rel, aged in files.items():
            path = ws / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rel)
            if aged:
                os.utime(path, (old, old))
        outside = tmp_path / "outside.txt"  # a link to it is never listed nor followed
        outside.write_text("not the workspace's")
        os.utime(outside, (old, old))
        (ws / "link").symlink_to(outside)

        r = d.cli("workspace", "clean", f"{me}/default", "--days", "30", "--json")
        assert r.returncode == 0, r.stderr
        plan = json.loads(r.stdout)
        listed = {f["path"] for f in plan["files"]}
        assert listed == {"old.txt", "deep/er/old.bin", "changed-later.txt"}
        assert plan["count"] == 3 and plan["bytes"] == sum(len(p) for p in listed)
        assert (ws / "old.txt").exists()  # a dry run removes nothing

        (ws / "changed-later.txt").write_text("touched after the dry run")
        late = ws / "aged-after-the-plan.txt"  # as old, but not in the plan
        late.write_text("x")
        os.utime(late, (old, old))
        r = d.cli("workspace", "clean", "--apply", plan["plan"], "--json")
        assert r.returncode == 0, r.stderr
        done = json.loads(r.stdout)
        assert done["removed"] == 2
        assert done["kept"] == ["changed-later.txt: changed since the dry run"]
        left = {p.relative_to(ws).as_posix() for p in ws.rglob("*") if not p.is_dir()}
        assert left == {"changed-later.txt", "fresh.txt", "aged-after-the-plan.txt", "link",
                        "data.bin"}
        assert outside.read_text() == "not the workspace's"
        r = d.cli("workspace", "clean", "--apply", plan["plan"])  # once only
        assert r.returncode != 0 and "no cleanup plan" in r.stderr
        r = d.cli("workspace", "clean", "nobody/default")
        assert r.returncode != 0
