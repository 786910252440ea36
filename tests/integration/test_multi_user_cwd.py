"""A job's working directory on a root daemon (issue 36): entered as the job's account,
never with the daemon's rights. A folder the account may not enter is refused with the
reason, in the job's log, and the command never runs.

Run as root with real Unix accounts (see test_multi_user.py, whose helpers these are).
An account of its own, so that these tests and the others may run side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_multi_user import _log, _wait_end, rota_as

from rota_testing import DaemonProcess, kill_job_processes, unix_accounts

CORA = "rtu-cora"


@pytest.fixture(scope="module")
def account() -> Iterator[int]:
    with unix_accounts(CORA) as uids:
        yield uids[CORA]


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rota-muc-", dir="/tmp"))
    os.chmod(path, 0o755)  # others pass through to the socket (pytest's tmp_path is 0700)
    yield path
    kill_job_processes(path / "home")
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(account: int, base: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(base / "home", extra_env={"ROTA_SHARED_ACCOUNT": "false"}).start()
    yield d
    d.stop()


def _submit(d: DaemonProcess, cwd: Path, *argv: str) -> int:
    r = rota_as(CORA, d.home, "submit", "--json", "--gpus", "0", "--cwd", str(cwd), "--",
                *argv)
    assert r.returncode == 0, r.stdout + r.stderr
    return int(json.loads(r.stdout)["jobs"][0]["id"])


def test_a_folder_the_account_cannot_enter_is_refused_at_submit_with_the_reason(
        daemon: DaemonProcess, account: int, base: Path) -> None:
    secret = base / "root-only-at-submit"
    secret.mkdir(mode=0o700)  # root's: the daemon could enter it, the account cannot
    r = rota_as(CORA, daemon.home, "submit", "--json", "--gpus", "0", "--cwd", str(secret),
                "--", "true")
    assert r.returncode != 0
    said = r.stdout + r.stderr
    assert f"cwd: '{secret}' is not a directory that {CORA} can enter" in said, said
    with daemon.client() as c:  # nothing was stored
        assert [j for j in c.jobs(limit=100) if j["user"] == CORA] == []


def test_a_folder_closed_after_the_submit_is_refused_and_the_command_never_runs(
        daemon: DaemonProcess, account: int, base: Path) -> None:
    secret = base / "root-only"
    secret.mkdir()
    os.chmod(secret, 0o755)  # open at the submit (whatever the umask)...
    ran = base / "ran"
    ran.mkdir(mode=0o777)
    os.chmod(ran, 0o777)
    first = rota_as(CORA, daemon.home, "submit", "--json", "--hold", "--gpus", "0", "--",
                    "true")  # it waits for this one, held until the folder is closed
    assert first.returncode == 0, first.stdout + first.stderr
    blocker = json.loads(first.stdout)["jobs"][0]["id"]
    r = rota_as(CORA, daemon.home, "submit", "--json", "--after", str(blocker), "--gpus",
                "0", "--cwd", str(secret), "--", "sh", "-c",
                f"pwd > {ran}/pwd; ls > {ran}/ls")
    assert r.returncode == 0, r.stdout + r.stderr
    job = int(json.loads(r.stdout)["jobs"][0]["id"])
    os.chmod(secret, 0o700)  # ...root's alone by its start: a root runner could enter it
    released = rota_as(CORA, daemon.home, "release", str(blocker))
    assert released.returncode == 0, released.stdout + released.stderr
    end = _wait_end(daemon, job)
    assert (end["state"], end["exit_code"]) == ("failed", 126), end
    log = _log(daemon, job)
    assert (f"rota: cannot enter the working directory '{secret}': Permission denied "
            f"(as {CORA})") in log, log
    assert not list(ran.iterdir())  # the command never ran


def test_a_folder_the_account_may_enter_is_its_working_directory(
        daemon: DaemonProcess, account: int, base: Path) -> None:
    own = base / "cora-work"
    own.mkdir(mode=0o700)
    os.chown(own, account, account)  # the account's own 0700 folder
    job = _submit(daemon, own, "sh", "-c", "pwd; id -u")
    end = _wait_end(daemon, job)
    assert (end["state"], end["exit_code"]) == ("completed", 0), end
    assert _log(daemon, job).split()[-2:] == [str(own), str(account)]
