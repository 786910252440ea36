"""`rota queue --start`: the 'starts' column (rota.cli.queue_view)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from rota.cli.queue_view import queue_lines, starts_text

NOW = 1_000_000.0


def job(**kw: Any) -> Any:
    base = {"id": 3, "name": "train", "user": "ann", "state": "pending", "priority": 0,
            "gpus": 1.0, "gpu_indices": [], "project": None, "tags": [], "started_at": None,
            "ended_at": None, "created_at": NOW - 5, "end_reason": None, "progress": None}
    return {**base, **kw}


def test_a_start_estimate_is_shown_relative_to_now() -> None:
    assert starts_text(job(estimated_start=NOW + 12 * 60), NOW) == "~in 12m"
    assert starts_text(job(estimated_start=NOW + 3 * 3600), NOW) == "~in 3.0h"
    assert starts_text(job(estimated_start=NOW + 10), NOW) == "~now"
    assert starts_text(job(estimated_start=None), NOW) == "unknown"
    assert starts_text(job(), NOW) == "unknown"
    assert starts_text(job(state="running"), NOW) == "-"


def test_the_starts_column_is_there_only_when_asked_for() -> None:
    def text(**kw: Any) -> str:
        console = Console(width=200, record=True)
        console.print(queue_lines([job(estimated_start=None)], width=200, **kw))
        return console.export_text()
    assert "starts" in text(starts=True) and "unknown" in text(starts=True)
    assert "starts" not in text()
