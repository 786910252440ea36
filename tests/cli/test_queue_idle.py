"""`rota queue` marks a running job whose GPUs stay idle ('idle 17m'), from its answer."""

from __future__ import annotations

from typing import Any, cast

from rota.answers import JobAnswer
from rota.cli.queue_view import idle_mark, queue_lines, short_reason


def running(**kw: Any) -> JobAnswer:
    job = {"id": 7, "name": "train", "command": ["python", "train.py"], "user": "ann",
           "state": "running", "priority": 0, "gpus": 1.0, "gpu_mem": None,
           "created_at": 0.0, "started_at": 10.0, "ended_at": None, "attempts": 1,
           "exit_code": None, "end_reason": None, "source": "cli", "session": "none",
           "time_limit": None, "project": None, "pool": None, "tags": [],
           "gpu_indices": [2], "progress": None, "idle_since": None, **kw}
    return cast(JobAnswer, job)


def test_a_flagged_job_shows_how_long_its_gpu_has_been_idle() -> None:
    job = running(idle_since=1000.0)
    assert idle_mark(job, 1000.0 + 17 * 60) == "idle 17m"
    assert idle_mark(job, 1030.0) == "idle 30s"
    assert short_reason(job, 1000.0 + 17 * 60) == "idle 17m"
    assert idle_mark(running(), 5000.0) == "" and short_reason(running(), 5000.0) == ""


def test_the_mark_is_in_the_queue_table() -> None:
    from rich.console import Console

    console = Console(width=100, record=True)
    console.print(queue_lines([running(idle_since=0.0)], width=100))
    assert "idle " in console.export_text()
    console = Console(width=100, record=True)
    console.print(queue_lines([running()], width=100))
    assert "idle" not in console.export_text()
