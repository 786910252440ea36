"""A job's log on a root daemon (issue 36): kept under max_log_bytes while the job's
account writes it, read for `rota logs` only as the account's own plain file.

Run as root with real Unix accounts (see test_multi_user.py, whose helpers these are).
An account of its own, so that these tests and the others may run side by side.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_multi_user import _wait_end, rota_as

from rota_testing import DaemonProcess, root_daemon_in_tmp, unix_accounts, wait_until

LOGAN = "rtu-logan"
LIMIT = 1 << 20
#: two bursts of numbered lines ~3 s apart (the daemon reads each job's log every 2 s),
#: then a metric line
BURSTS = r"""
i=0
x=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
burst() {
  n=0
  while [ $n -lt 40000 ]; do printf 'line %07d %s\n' $i $x; i=$((i+1)); n=$((n+1)); done
}
burst
sleep 3
burst
echo "step 9 loss=0.125"
"""


@pytest.fixture(scope="module")
def account() -> Iterator[int]:
    with unix_accounts(LOGAN) as uids:
        yield uids[LOGAN]


@pytest.fixture(scope="module")
def daemon(account: int) -> Iterator[DaemonProcess]:
    with root_daemon_in_tmp("rota-mul-", ROTA_MAX_LOG_BYTES=str(LIMIT)) as d:
        yield d


def _submit(d: DaemonProcess, *argv: str) -> int:
    r = rota_as(LOGAN, d.home, "submit", "--json", "--gpus", "0", "--", *argv)
    assert r.returncode == 0, r.stdout + r.stderr
    return int(json.loads(r.stdout)["jobs"][0]["id"])


def test_a_log_past_the_limit_keeps_head_marker_and_tail(daemon: DaemonProcess,
                                                         account: int) -> None:
    job = _submit(daemon, "sh", "-c", BURSTS)
    end = _wait_end(daemon, job)
    assert end["state"] == "completed", end
    log = daemon.home / "logs" / f"{job}.log"
    assert log.stat().st_uid == account  # the account's own file, bounded all the same
    data = log.read_bytes()
    assert len(data) <= LIMIT + 4096, len(data)  # (it had 5.2 MB written to it)
    assert b"line 0000000 " in data[:200]  # the head
    markers = re.findall(rb"=== rota: \S+ of output left out here \((\d+) bytes; "
                         rb"max_log_bytes = 1M\) ===", data)
    assert len(markers) == 1 and int(markers[0]) > 4 << 20
    assert data.endswith(b"line 0079999 " + b"x" * 54 + b"\nstep 9 loss=0.125\n")  # the tail

    # the metric printed last, after compactions, is read (the reading of an ended job's
    # output may go on after its end)
    def loss() -> list[list[object]]:
        with daemon.client() as c:
            return [p[:2] for p in c.metrics(job)["series"].get("loss", [])]
    wait_until(loss, timeout=10, what="the loss to be read")
    assert loss() == [[9, 0.125]]
    with daemon.client() as c:
        started = float(c.job(job)["started_at"])

    # what `rota logs` shows is the log, escaped; --since cuts it by the (moved) index
    r = rota_as(LOGAN, daemon.home, "logs", str(job))
    assert r.returncode == 0, r.stderr
    assert r.stdout.encode() == data
    r = rota_as(LOGAN, daemon.home, "logs", str(job), "--since", f"@{started + 2.5}")
    assert r.returncode == 0, r.stderr
    assert "line 0000000 " not in r.stdout and r.stdout.endswith("step 9 loss=0.125\n")
    assert len(r.stdout) < LIMIT


def test_a_log_swapped_for_a_link_gives_nothing_of_its_target(daemon: DaemonProcess) -> None:
    job = _submit(daemon, "echo", "hello")
    assert _wait_end(daemon, job)["state"] == "completed"
    log = daemon.home / "logs" / f"{job}.log"
    log.unlink()
    log.symlink_to("/etc/shadow")  # as the job's account would, could it write there
    shadow = Path("/etc/shadow").read_text()
    for args in ((), ("--raw",), ("-f",), ("--since", "@1")):
        r = rota_as(LOGAN, daemon.home, "logs", str(job), *args)
        assert "root:" not in r.stdout + r.stderr and shadow[:40] not in r.stdout, args
    # a fifo in its place blocks no reader either
    log.unlink()
    os.mkfifo(log)
    r = subprocess.run(["timeout", "20", sys.executable, "-m", "rota", "logs", str(job)],
                       env=daemon.env, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout == "", r.stderr
