"""When a pipeline's next round is due (pure: the time and the random draw come in).

After a good round (accepted or rejected: it ran) the wait is drawn as the Gradients
Scheduler draws it, so its users keep their rhythm; after a failed round the wait doubles
with each failure in a row (never a new paid training every minute).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

from rota.pipeline.config import OnFailure, RunIntervals


def next_run(after: float, iv: RunIntervals, rng: random.Random) -> tuple[float, str]:
    """The next round's time after a good round that ended at ``after``, and how it was
    drawn: whole days in [min_days, max(min_days, max_days)] plus whole hours in
    [min_hours, max(min_hours, max_hours)]."""
    days = rng.randint(iv.min_days, max(iv.min_days, iv.max_days))
    hours = rng.randint(iv.min_hours, max(iv.min_hours, iv.max_hours))
    at = after + days * 86400 + hours * 3600
    window = f"{_span(iv.min_days, iv.max_days, 'd')} + {_span(iv.min_hours, iv.max_hours, 'h')}"
    return at, (f"drawn in run_intervals ({window}): {days}d {hours}h after the last good "
                f"round ended {when(after)}")


def retry_at(failed_at: float, failures: int, policy: OnFailure) -> tuple[float, str]:
    """The next try after the ``failures``-th failed round in a row (1 for the first)."""
    wait = min(policy.backoff * 2 ** max(failures - 1, 0), policy.max_backoff)
    return failed_at + wait, (f"backing off after {failures} failed round"
                              f"{'s' if failures != 1 else ''} in a row: "
                              f"{_duration(wait)} after {when(failed_at)}")


def when(ts: float) -> str:
    return f"{datetime.fromtimestamp(ts, UTC):%Y-%m-%d %H:%M:%S} UTC"


def _span(lo: int, hi: int, unit: str) -> str:
    hi = max(lo, hi)
    return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"


def _duration(seconds: float) -> str:
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            n = seconds / size
            return f"{n:.0f}{unit}" if n == int(n) else f"{n:.1f}{unit}"
    return f"{seconds:.0f}s"
