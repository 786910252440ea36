"""Predicted run times from the history of finished jobs, for backfill and start estimates.

A job's expected run time is its time limit; without one, a prediction from the jobs of the
same name that completed before it: the 90th percentile (nearest rank) of the run times of
the newest ``HISTORY`` completed attempts. A high quantile rather than the mean, so that a
backfilled job rarely outlives the shadow time it was let in on; the newest runs only, so a
name whose work grows is followed. No history (or no name): no prediction. Predictions are
cached per name for ``ttl`` seconds: a pass never queries the store per job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rota.store.repo import Store

HISTORY = 20
QUANTILE = 0.9


def predict(run_times: Sequence[float]) -> float | None:
    """The QUANTILE-th run time (nearest rank) of a history; None for none."""
    if not run_times:
        return None
    ordered = sorted(run_times)
    return ordered[max(0, math.ceil(QUANTILE * len(ordered)) - 1)]


class RunTimes:
    def __init__(self, store: Store, clock: Callable[[], float], ttl: float = 300.0) -> None:
        self.store, self.clock, self.ttl = store, clock, ttl
        self._cache: dict[str, tuple[float, float | None]] = {}  # name -> (read at, value)

    def predicted(self, name: str | None) -> float | None:
        if not name:
            return None
        now = self.clock()
        hit = self._cache.get(name)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        value = predict(self.store.completed_run_times(name, last=HISTORY))
        self._cache[name] = (now, value)
        return value

    def expected(self, time_limit: float | None, name: str | None) -> float | None:
        """Seconds a job is expected to run: its time limit, else the prediction."""
        return time_limit if time_limit is not None else self.predicted(name)

    def forget(self, name: str | None) -> None:
        """A job of this name ended: the next look-up reads its history afresh."""
        if name:
            self._cache.pop(name, None)
