"""`rota metrics` tells a running job's time left, and for one that ended how it ended."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from rota.cli.ml import ended_text, metrics_table, progress_text
from rota_testing import DaemonProcess, wait_until

RUNNING = {"fraction": 0.45, "step": 450, "total_steps": 1000, "rate": 14.8, "eta_s": 5}


def render(table: object) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(table)
    return out.getvalue()


def test_a_job_that_ended_shows_how_long_it_ran_and_no_eta() -> None:
    done = {"state": "completed", "started_at": 1000.0, "ended_at": 1133.0}
    assert ended_text(done) == "completed in 2m13s"
    assert progress_text({**RUNNING, "fraction": 1.0, "step": 1000},
                         ended_text(done)) == "100%, step 1000/1000, completed in 2m13s"
    failed = {"state": "failed", "started_at": 1000.0, "ended_at": 1042.4}
    assert progress_text(RUNNING, ended_text(failed)) == \
        "45%, step 450/1000, failed after 42s"
    assert ended_text({"state": "timeout", "started_at": 0.0, "ended_at": 3700.0}) == \
        "timed out after 1h01m"
    assert ended_text({"state": "cancelled", "started_at": None, "ended_at": 5.0}) == \
        "cancelled"
    assert progress_text(None, "completed in 3s") == "completed in 3s"
    # not ended: the time left as before
    assert ended_text({"state": "running", "started_at": 1000.0, "ended_at": None}) is None
    assert progress_text(RUNNING) == "45%, step 450/1000, 14.8 steps/s, ETA 5s"
    data = {"id": 3, "series": {"loss": [[1000, 0.5, 1133.0, 1]]}, "progress": RUNNING}
    text = render(metrics_table(data, done))
    assert "job 3: 45%, step 450/1000, completed in 2m13s" in text and "ETA" not in text
    assert "ETA 5s" in render(metrics_table(data, {"state": "running"}))
    assert metrics_table({**data, "series": {}}, failed) == \
        "job 3: no metrics yet (45%, step 450/1000, failed after 42s)"


def test_rota_metrics_after_the_job_ended(daemon: DaemonProcess, tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import sys, time
        for i in range(1, 5):
            sys.stderr.write(f"\\r{i * 25}%|##| {i}/4 [00:0{i}<00:05, 1.00it/s, loss={1 / i}]")
            sys.stderr.flush()
            time.sleep(0.3)
        print()
    """)
    jid = daemon.submit("--gpus", "0", "--", sys.executable, "-u", "-c", script)

    def ended() -> bool:
        with daemon.client() as c:
            return bool(c.job(jid)["state"] == "completed")

    wait_until(ended, timeout=60, what="the job to end")
    r = daemon.cli("metrics", str(jid))
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert "completed in" in head and "ETA" not in head, r.stdout
    assert "step 4/4" in head
