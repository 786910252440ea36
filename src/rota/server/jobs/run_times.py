"""Predicted run times from the history of finished jobs, for backfill and start estimates.

A job's expected run time is its time limit; without one, a prediction from the jobs of the
same name that completed before it (rota.core.runtime.predict, the simulator's predictor
too). This module keeps the store reads: predictions are cached per name for ``ttl``
seconds, and the names of many jobs (a submit's, a restart's queue) are read together
(:meth:`RunTimes.prefetch`), so neither a pass nor an intake queries the store per job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rota.core.runtime import HISTORY, QUANTILE, expected, predict
from rota.store.repo import Store

__all__ = ["HISTORY", "QUANTILE", "RunTimes", "predict"]

#: past this many cached names, those older than the ttl are dropped at the next prefetch
#: (a stream of uniquely named jobs would otherwise grow the cache for good)
PRUNE_OVER = 50_000


class RunTimes:
    def __init__(self, store: Store, clock: Callable[[], float], ttl: float = 300.0) -> None:
        self.store, self.clock, self.ttl = store, clock, ttl
        self._cache: dict[str, tuple[float, float | None]] = {}  # name -> (read at, value)

    def predicted(self, name: str | None) -> float | None:
        if not name:
            return None
        hit = self._cache.get(name)
        if hit is None or self.clock() - hit[0] >= self.ttl:
            self.prefetch((name,))
            hit = self._cache[name]
        return hit[1]

    def prefetch(self, names: Iterable[str | None]) -> None:
        """Read the history of every name not cached (or cached too long ago) at once."""
        now = self.clock()
        cache = self._cache
        wanted = {n for n in names if n and (n not in cache or now - cache[n][0] >= self.ttl)}
        if not wanted:
            return
        if len(cache) > PRUNE_OVER:
            for n in [n for n, (at, _) in cache.items() if now - at >= self.ttl]:
                del cache[n]
        found = self.store.completed_run_times_of(wanted, last=HISTORY)
        for n in wanted:
            cache[n] = (now, predict(found.get(n, ())))

    def predicted_many(self, names: Iterable[str | None]) -> dict[str, float | None]:
        """:meth:`predicted` of each name (read together)."""
        wanted = [n for n in names if n]
        self.prefetch(wanted)
        return {n: self._cache[n][1] for n in wanted}

    def expected(self, time_limit: float | None, name: str | None) -> float | None:
        """Seconds a job is expected to run: its time limit, else the prediction."""
        return expected(time_limit, self.predicted(name))

    def forget(self, name: str | None) -> None:
        """A job of this name ended: the next look-up reads its history afresh."""
        if name:
            self._cache.pop(name, None)
