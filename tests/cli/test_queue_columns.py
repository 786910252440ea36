"""`rota queue` lines up its reason column (--wide included) and tells every rate in one
unit (issue 38: 's/step' beside 'steps/s' in one listing)."""

from __future__ import annotations

from typing import Any, cast

from rich.console import Console

from rota.answers import JobAnswer
from rota.cli.ml_text import progress_text, rate_unit
from rota.cli.queue_view import queue_lines


def running(job_id: int, tags: list[str], rate: float) -> JobAnswer:
    job = {"id": job_id, "name": f"train-{job_id}", "command": ["python", "train.py"],
           "user": "ann", "state": "running", "priority": 0, "gpus": 1.0, "gpu_mem": None,
           "created_at": 0.0, "started_at": 10.0, "ended_at": None, "attempts": 1,
           "exit_code": None, "end_reason": None, "source": "cli", "session": "none",
           "time_limit": None, "project": None, "pool": None, "tags": tags,
           "gpu_indices": [job_id], "idle_since": None,
           "progress": {"step": 10, "total_steps": 100, "fraction": 0.1, "rate": rate,
                        "eta_s": 60.0}}
    return cast(JobAnswer, job)


def _text(jobs: list[JobAnswer], **kw: Any) -> list[str]:
    console = Console(width=400, record=True)
    console.print(queue_lines(jobs, width=400, **kw))
    return console.export_text().splitlines()


def test_the_reason_column_starts_at_one_place_with_wide() -> None:
    jobs = [running(1, ["a"], 2.0), running(2, ["a-much-longer-tag", "b"], 3.0)]
    lines = _text(jobs, wide=True)
    head = next(line for line in lines if "reason / progress" in line)
    at = head.index("reason / progress")
    rows = [line for line in lines if "train-" in line]
    assert len(rows) == 2 and all(row[at:].startswith("10%") for row in rows), lines


def test_one_listing_says_every_rate_in_one_unit() -> None:
    fast, slow = running(1, [], 14.8), running(2, [], 0.4)  # 14.8 steps/s, 2.5 s/step
    rows = [line for line in _text([fast, slow]) if "train-" in line]
    assert "0.0676 s/step" in rows[0] and "2.5 s/step" in rows[1], rows
    assert not any("steps/s" in row for row in rows)
    rows = [line for line in _text([fast, running(2, [], 3.0)]) if "train-" in line]
    assert "14.8 steps/s" in rows[0] and "3 steps/s" in rows[1], rows
    assert rate_unit([None, {"rate": None}]) is None  # type: ignore[list-item]
    assert progress_text(fast["progress"]) == "10%, step 10/100, 14.8 steps/s, ETA 1m00s"
