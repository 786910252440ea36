"""A job that says why it fails (rota.job.fail_reason, then a non-zero exit): the reason is
in its end (the job's end_reason, `rota why`, the attempt's record) on a real daemon; a
later attempt that says nothing is not given an earlier attempt's reason."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota_testing import DaemonProcess, running_daemon

SAYS = ("import sys\nfrom rota import job\n"
        "print('loading the eval set', flush=True)\n"
        "job.fail_reason('the eval set is empty (0 rows in data/test.jsonl)')\n"
        "sys.exit(3)\n")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with running_daemon(tmp_path_factory.mktemp("fail-reason")) as d:
        yield d


def test_the_reason_a_job_gives_is_its_end_reason(daemon: DaemonProcess) -> None:
    with daemon.client() as c:
        job_id = int(c.submit([{"command": [sys.executable, "-c", SAYS], "gpus": 0}])[0]["id"])
        assert c.wait(job_id, timeout=60)["exit_code"] == 3
        ended = c.job(job_id)
        reason = "exit code 3: the eval set is empty (0 rows in data/test.jsonl)"
        assert ended["state"] == "failed" and ended["end_reason"] == reason
        why = c.why(job_id)["message"]
        assert why.startswith("failed at ") and "exit code 3" in why, why
        assert why.endswith("s: the eval set is empty (0 rows in data/test.jsonl)"), why
        assert why.count("exit code 3") == 1, why  # not "exit code 3: exit code 3:"
        assert c.events(job_id)[-1]["message"] == reason
    cli = daemon.cli("why", str(job_id))
    assert cli.returncode == 0 and "the eval set is empty" in cli.stdout, cli.stderr
    shown = " ".join(daemon.cli("show", str(job_id)).stdout.split())  # folded at 80
    assert re.search(r"#1 CPU .* exit 3 failed, local pid \d+, the eval set is empty \(0 "
                     r"rows in data/test\.jsonl\)", shown), shown  # the attempt's line too


def test_a_later_attempt_that_says_nothing_keeps_no_earlier_reason(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    """The first attempt says why and fails; the retry fails without a word: the job's end
    is the retry's bare exit code, the first attempt keeps its own reason."""
    flag = tmp_path / "tried"
    program = (f"import os, sys\nfrom rota import job\nflag = {str(flag)!r}\n"
               "if not os.path.exists(flag):\n"
               "    open(flag, 'w').close()\n"
               "    job.fail_reason('first try: no GPU memory left')\n"
               "sys.exit(1)\n")
    with daemon.client() as c:
        job_id = int(c.submit([{"command": [sys.executable, "-c", program], "gpus": 0,
                                "retries": 1, "retry_backoff": 0}])[0]["id"])
        assert c.wait(job_id, timeout=60)["state"] == "failed"
        assert c.job(job_id)["end_reason"] == "exit code 1"
        ends = [e["message"] for e in c.events(job_id) if e["kind"] in ("requeued", "failed")]
    assert ends == ["exit code 1: first try: no GPU memory left; retry 1/1 in 0s",
                    "exit code 1"]
