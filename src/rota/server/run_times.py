"""Predicted run times from the history of finished jobs, for backfill and start estimates.

A job's expected run time is its time limit; without one, a prediction from the jobs of the
same name that completed before it (rota.core.runtime.predict, the simulator's predictor
too). This module keeps the store reads: predictions are cached per name for ``ttl``
seconds, so a pass never queries the store per job.
"""

from __future__ import annotations

from collections.abc import Callable

from rota.core.runtime import HISTORY, QUANTILE, expected, predict
from rota.store.repo import Store

__all__ = ["HISTORY", "QUANTILE", "RunTimes", "predict"]


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
        return expected(time_limit, self.predicted(name))

    def forget(self, name: str | None) -> None:
        """A job of this name ended: the next look-up reads its history afresh."""
        if name:
            self._cache.pop(name, None)
