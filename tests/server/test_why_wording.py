"""`rota why` for jobs that do not wait: what a running job does and how an ended one
ended, as a person would say it (rota.server.api.views.why_view)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rota.server.api.views import span_text, why_view

NOON = datetime(2024, 5, 1, 12, 3).timestamp()


def _view(**kw: Any) -> dict[str, Any]:
    base = {"id": 7, "state": "running", "gpu_indices": [], "started_at": NOON,
            "ended_at": None, "exit_code": None, "end_reason": None}
    return {**base, **kw}


def test_a_running_job_says_where_and_since_when() -> None:
    assert why_view(_view(), NOON + 60)["message"] == "runs on the CPU only since 12:03"
    assert why_view(_view(gpu_indices=[0]), NOON + 60)["message"] == \
        "runs on GPU 0 since 12:03"
    assert why_view(_view(gpu_indices=[0, 2, 3]), NOON)["message"] == \
        "runs on GPUs 0, 2 and 3 since 12:03"


def test_an_ended_job_says_when_how_and_after_how_long() -> None:
    done = _view(state="completed", ended_at=NOON + 130, exit_code=0,
                 end_reason="exited with code 0")
    w = why_view(done, NOON + 3600)
    assert w == {"id": 7, "state": "completed", "code": "completed",
                 "message": "completed at 12:05 with exit code 0 after 2m 10s"}
    failed = _view(state="failed", ended_at=NOON + 5, exit_code=3, end_reason="exit code 3")
    assert why_view(failed, NOON + 10)["message"] == "failed at 12:03 with exit code 3 after 5s"
    said = {**failed, "end_reason": "exit code 3: the eval set is empty"}
    assert why_view(said, NOON + 10)["message"] == \
        "failed at 12:03 with exit code 3 after 5s: the eval set is empty"
    never = _view(state="cancelled", started_at=None, ended_at=NOON,
                  end_reason="cancelled by request")
    assert why_view(never, NOON)["message"] == "cancelled at 12:03: cancelled by request"


def test_another_days_time_carries_its_date() -> None:
    w = why_view(_view(state="completed", ended_at=NOON, exit_code=0), NOON + 2 * 86400)
    assert w["message"].startswith("completed at 2024-05-01 12:03")


def test_a_waiting_job_gives_its_reason() -> None:
    w = why_view(_view(state="pending", started_at=None,
                       reason={"code": "resources", "message": "waits for 1 whole GPU"}), NOON)
    assert w == {"id": 7, "state": "pending", "code": "resources",
                 "message": "waits for 1 whole GPU"}


def test_spans() -> None:
    assert [span_text(s) for s in (0, 59.6, 130, 3 * 3600 + 300, 2 * 86400 + 4 * 3600)] == \
        ["0s", "1m 00s", "2m 10s", "3h 05m", "2d 4h"]


def test_a_waiting_job_with_a_start_estimate_says_when_it_may_start() -> None:
    from datetime import UTC

    at = datetime(2024, 5, 1, 14, 5, tzinfo=UTC).timestamp()
    waiting = _view(state="pending", started_at=None,
                    reason={"code": "resources", "message": "waits for 1 whole GPU"},
                    estimated_start=at)
    w = why_view(waiting, at - 600)
    assert w["estimated_start"] == at
    assert w["message"] == ("waits for 1 whole GPU; may start around 14:05 UTC (estimate "
                            "from time limits / predicted run times)")
    unknown = {**waiting, "estimated_start": None}
    w = why_view(unknown, at)
    assert w["estimated_start"] is None and w["message"] == "waits for 1 whole GPU"
