"""Workspaces whose home is a bucket (``[storage] workspace_url``), on a real S3-protocol
server (moto's), through daemons and the CLI a person uses: what a job leaves in its
workspace reaches the bucket when it ends, as plain objects; a fresh copy (its folder and
index gone, or another daemon with another home) brings it back before its next job
starts, and a job that follows another machine's sees that machine's files; a job whose
workspace cannot be brought waits with the trouble as its reason; and what a job wrote
while its daemon was SIGKILLed reaches the bucket after the restart.

Skipped without boto3 and moto unless the run requires them (ROTA_REQUIRE_TORCH)."""

from __future__ import annotations

import getpass
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota_testing import (
    DaemonProcess,
    kill_job_processes,
    moto_s3,
    patience,
    running_daemon,
    s3_client,
    wait_until,
)

BUCKET = "rota-ws"
WRITE = ("import os, sys; w = os.environ['ROTA_WORKSPACE']; name, text = sys.argv[1:3]; "
         "os.makedirs(os.path.dirname(os.path.join(w, name)), exist_ok=True); "
         "open(os.path.join(w, name), 'w').write(text); print('wrote', name, 'in', w)")
READ = ("import os, sys; w = os.environ['ROTA_WORKSPACE']; "
        "print('found', repr(open(os.path.join(w, sys.argv[1])).read()))")
# runs until the file `go` appears in its folder, then writes to its workspace
LATE = ("import os, time; [time.sleep(0.05) for _ in range(2400) if not os.path.exists('go')]"
        "; open(os.path.join(os.environ['ROTA_WORKSPACE'], 'late.txt'), 'w').write('late')")


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from moto_s3(tmp_path_factory, BUCKET)


@pytest.fixture
def s3(aws: dict[str, str]) -> Any:
    return s3_client(aws)


def toml(prefix: str, bucket: str = BUCKET) -> str:
    return f'[storage]\nworkspace_url = "s3://{bucket}/{prefix}"\n'


def submit(d: DaemonProcess, work: Path, script: str, *args: str) -> int:
    return d.submit("--gpus", "0", "--", sys.executable, "-c", script, *args, cwd=work)


def ended(d: DaemonProcess, job: int) -> dict[str, Any]:
    with d.client() as c:
        got: dict[str, Any] = c.wait(job, timeout=patience(60))
    return got


def body(s3: Any, key: str) -> bytes | None:
    try:
        data: bytes = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    return data


def test_a_workspace_goes_to_its_bucket_and_comes_back_to_a_fresh_copy(
        tmp_path: Path, aws: dict[str, str], s3: Any) -> None:
    work = tmp_path / "work"
    work.mkdir()
    me = getpass.getuser()
    home, other_home = tmp_path / "home", tmp_path / "other"
    home.mkdir()
    other_home.mkdir()
    base = f"team/{me}/default"
    with running_daemon(home, toml("team"), env=aws) as d:
        first = submit(d, work, WRITE, "a.txt", "from job one")
        assert ended(d, first)["state"] == "completed", d.cli("logs", str(first)).stdout
        wait_until(lambda: body(s3, f"{base}/a.txt") == b"from job one",
                   what="a.txt in the bucket")
        ws = home / "workspaces" / me / "default"
        assert (ws / "a.txt").read_text() == "from job one"  # the copy here stays
        assert (home / "workspaces" / ".sync" / me / "default.json").is_file()
        assert f"{me}/default" in {w["name"] for w in _workspaces(d)}  # (.sync is none)
        [sync] = [w["sync"] for w in _workspaces(d) if w["name"] == f"{me}/default"]
        assert sync["url"] == f"s3://{BUCKET}/{base}" and sync["state"] == "synced", sync
        assert sync["synced_at"] is not None and "error" not in sync
        shown = d.cli("workspace").stdout
        assert f"synced (s3://{BUCKET}/{base}), last synced " in shown, shown

        # a fresh machine's copy: neither the folder nor its index
        shutil.rmtree(ws)
        (home / "workspaces" / ".sync" / me / "default.json").unlink()
        second = submit(d, work, READ, "a.txt")
        assert ended(d, second)["state"] == "completed", d.cli("logs", str(second)).stdout
        assert "found 'from job one'" in d.cli("logs", str(second)).stdout

        # another daemon (another home, the same bucket): brings it, and what its job
        # writes there comes here before this daemon's next job of the workspace
        with running_daemon(other_home, toml("team"), env=aws) as other:
            third = submit(other, work, WRITE, "sub/b.txt", "from the other machine")
            assert ended(other, third)["state"] == "completed"
            read = submit(other, work, READ, "a.txt")
            assert ended(other, read)["state"] == "completed"
            assert "found 'from job one'" in other.cli("logs", str(read)).stdout
        wait_until(lambda: body(s3, f"{base}/sub/b.txt") == b"from the other machine",
                   what="sub/b.txt in the bucket")
        fourth = submit(d, work, READ, "sub/b.txt")
        assert ended(d, fourth)["state"] == "completed", d.cli("logs", str(fourth)).stdout
        assert "found 'from the other machine'" in d.cli("logs", str(fourth)).stdout

        # a project is a workspace of its own, under its own prefix
        fifth = d.submit("--gpus", "0", "--project", "vision", "--", sys.executable, "-c",
                         WRITE, "v.txt", "vision", cwd=work)
        assert ended(d, fifth)["state"] == "completed"
        wait_until(lambda: body(s3, f"team/{me}/vision/v.txt") == b"vision",
                   what="v.txt in the bucket")
        assert body(s3, f"{base}/v.txt") is None


def _workspaces(d: DaemonProcess) -> list[dict[str, Any]]:
    import json

    r = d.cli("workspace", "--json")
    assert r.returncode == 0, r.stderr
    got: list[dict[str, Any]] = json.loads(r.stdout)["workspaces"]
    return got


def test_a_job_waits_with_the_reason_while_its_workspace_cannot_be_brought(
        tmp_path: Path, aws: dict[str, str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    me = getpass.getuser()
    (tmp_path / "home").mkdir()
    with running_daemon(tmp_path / "home", toml("ws", bucket="no-such-bucket"),
                        env=aws) as d:
        job = submit(d, work, WRITE, "a.txt", "never")
        want = (f"waits for its workspace {me}/default to be brought from "
                f"s3://no-such-bucket/ws/{me}/default")

        def troubled() -> str | None:
            why = d.cli("why", str(job)).stdout
            return why if "NoSuchBucket" in why else None

        why = wait_until(troubled, what="the trouble as the job's reason")
        assert want in why, why
        assert "tried again in" in why, why
        with d.client() as c:
            assert c.job(job)["state"] == "pending"
        # a job of the same workspace that needs none does not wait for it
        free = d.submit("--gpus", "0", "--no-workspace", "--", sys.executable, "-c",
                        "import os; print('workspace:', os.environ.get('ROTA_WORKSPACE'))",
                        cwd=work)
        assert ended(d, free)["state"] == "completed"
        assert "workspace: None" in d.cli("logs", str(free)).stdout
        assert not (tmp_path / "home" / "workspaces" / me / "default" / "a.txt").exists()
        [sync] = [w["sync"] for w in _workspaces(d) if w["name"] == f"{me}/default"]
        assert sync["state"] == "failed" and "NoSuchBucket" in sync["error"], sync
        assert 0 < sync["retry_in"] <= 300, sync  # (a missing bucket: tried in 5 minutes)
        assert "NoSuchBucket" in d.cli("workspace").stdout


def test_what_a_job_wrote_while_its_daemon_was_killed_reaches_the_bucket_after_restart(
        tmp_path: Path, aws: dict[str, str], s3: Any) -> None:
    work = tmp_path / "work"
    work.mkdir()
    me = getpass.getuser()
    home = tmp_path / "home"
    home.mkdir()
    (home / "rota.toml").write_text(toml("killed"))
    d = DaemonProcess(home, extra_env=aws).start()
    try:
        job = submit(d, work, LATE)
        deadline = time.monotonic() + patience(60)
        while True:
            with d.client() as c:
                state = c.job(job)["state"]
            if state == "running":
                break
            assert state in ("pending", "starting"), state
            assert time.monotonic() < deadline, d.cli("why", str(job)).stdout
            time.sleep(0.05)
        d.kill()  # no sync up can happen: the daemon is gone when the job ends
        (work / "go").touch()
        late = home / "workspaces" / me / "default" / "late.txt"
        wait_until(lambda: late.exists(), what="the job to write late.txt")
        time.sleep(0.5)  # (its end, journalled by the runner while no daemon runs)
        assert body(s3, f"killed/{me}/default/late.txt") is None
        d.start()
        assert ended(d, job)["state"] == "completed"
        wait_until(lambda: body(s3, f"killed/{me}/default/late.txt") == b"late",
                   what="late.txt in the bucket after the restart")
    finally:
        d.stop()
        kill_job_processes(home)


def test_a_cleanup_of_a_bucket_workspace_removes_its_objects_at_once(
        tmp_path: Path, aws: dict[str, str], s3: Any) -> None:
    """What a cleanup removes from this machine's copy leaves the bucket right after (no
    job of it runs here), and only that: the bucket is the workspace's home."""
    import json

    work = tmp_path / "work"
    work.mkdir()
    me = getpass.getuser()
    (tmp_path / "home").mkdir()
    with running_daemon(tmp_path / "home", toml("clean"), env=aws) as d:
        for name in ("old.txt", "fresh.txt"):
            assert ended(d, submit(d, work, WRITE, name, name))["state"] == "completed"
        base = f"clean/{me}/default"
        wait_until(lambda: body(s3, f"{base}/fresh.txt") == b"fresh.txt",
                   what="fresh.txt in the bucket")
        ws = tmp_path / "home" / "workspaces" / me / "default"
        old = time.time() - 40 * 86400
        os.utime(ws / "old.txt", (old, old))
        plan = json.loads(d.cli("workspace", "clean", f"{me}/default", "--json").stdout)
        assert [f["path"] for f in plan["files"]] == ["old.txt"]
        assert body(s3, f"{base}/old.txt") == b"old.txt"  # a dry run removes nothing
        r = d.cli("workspace", "clean", "--apply", plan["plan"], "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["removed"] == 1, r.stderr
        wait_until(lambda: body(s3, f"{base}/old.txt") is None,
                   what="old.txt gone from the bucket")
        assert body(s3, f"{base}/fresh.txt") == b"fresh.txt"
