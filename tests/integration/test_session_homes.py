"""Two Rota homes of one account share its tmux server: their jobs' sessions never collide."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from rota_testing import DaemonProcess, wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def test_two_homes_run_job_1_in_tmux_side_by_side(tmp_path: Path,
                                                 daemon_factory: type[DaemonProcess]) -> None:
    server = f"rota-test-{uuid.uuid4().hex[:8]}"  # one tmux server, as one account has
    homes = [daemon_factory(home=tmp_path / name,
                            extra_env={"ROTA_TMUX_SOCKET": server}).start()
             for name in ("first", "second")]
    try:
        ids = [d.submit("--session", "tmux", "--", "sh", "-c", "sleep 1; echo ran") for d in homes]
        assert ids == [1, 1]  # the same job number in both homes

        def both_ended() -> bool:
            states = []
            for d, job_id in zip(homes, ids, strict=True):
                with d.client() as c:
                    states.append(c.job(job_id)["state"])
            return all(s in ("completed", "failed") for s in states)
        wait_until(both_ended, timeout=60, what="both tmux jobs to end")
        for d, job_id in zip(homes, ids, strict=True):
            with d.client() as c:
                job = c.job(job_id)
            log = (d.home / "logs" / f"{job_id}.log").read_text()
            assert job["state"] == "completed", log  # not "duplicate session"
            assert "ran" in log
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, check=False)
