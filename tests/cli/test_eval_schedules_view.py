"""`rota eval schedules` as a person reads it at 80 columns (a pipe, a standard terminal):
every column kept, names and triggers whole, why a schedule is off under the table."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from rota.cli.eval import _schedules_table


def _schedule(sid: int, name: str, trigger: str, **kw: Any) -> dict[str, Any]:
    return {"id": sid, "name": name, "trigger": trigger, "every_s": None, "next_at": None,
            "job_id": None, "runs": 0, "last_job": None, "enabled": True,
            "disabled_reason": None, **kw}


def test_at_80_columns_the_trigger_and_the_names_are_kept() -> None:
    data = {"schedules": [
        _schedule(1, "nightly-qwen-arc", "every", every_s=86400, next_at=1.9e9, runs=3,
                  last_job=1234),
        _schedule(12, "checkpoints-llama", "on_checkpoint", job_id=77, runs=12,
                  last_job=1240, enabled=False,
                  disabled_reason="job 77 ended: no more checkpoints will come"),
        _schedule(3, "after-train", "after_job", job_id=12345)]}
    console = Console(width=80, record=True)
    console.print(_schedules_table(data))  # type: ignore[arg-type]
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    assert lines[0].split() == ["id", "name", "trigger", "runs", "last", "job", "enabled"]
    words = text.split()
    for whole in ("nightly-qwen-arc", "checkpoints-llama", "after-train", "1234", "12345"):
        assert whole in words, text
    assert "each new checkpoint" in text and "once after job 12345" in text, text
    assert "12: off: job 77 ended: no more checkpoints will come" in lines, text
