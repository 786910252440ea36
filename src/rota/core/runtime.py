"""Expected run times: a job's time limit, else a prediction from the history of its name.

The prediction is the 90th percentile (nearest rank) of the run times of the newest
``HISTORY`` completed runs of the same name: a high quantile rather than the mean, so that
a backfilled job rarely outlives the shadow time it was let in on; the newest runs only, so
a name whose work grows is followed. No history (or no name): no prediction.

Pure: the daemon (rota.server.jobs.run_times) reads the history from its store, the simulator
keeps it as its trace's jobs complete (``History``); both predict with ``predict``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

HISTORY = 20
QUANTILE = 0.9


def predict(run_times: Sequence[float]) -> float | None:
    """The QUANTILE-th run time (nearest rank) of a history; None for none."""
    if not run_times:
        return None
    ordered = sorted(run_times)
    return ordered[max(0, math.ceil(QUANTILE * len(ordered)) - 1)]


def expected(time_limit: float | None, predicted: float | None) -> float | None:
    """Seconds a job is expected to run: its time limit, else the prediction."""
    return time_limit if time_limit is not None else predicted


class History:
    """The newest HISTORY completed run times of each name, kept in memory (the simulator's
    stand-in for the store's ``completed_run_times``); predictions cached until a name's
    history changes."""

    def __init__(self) -> None:
        self._runs: dict[str, deque[float]] = {}
        self._cache: dict[str, float | None] = {}

    def completed(self, name: str, run_time: float) -> None:
        if not name:
            return
        runs = self._runs.get(name)
        if runs is None:
            runs = self._runs[name] = deque(maxlen=HISTORY)
        runs.append(run_time)
        self._cache.pop(name, None)

    def predicted(self, name: str) -> float | None:
        if not name:
            return None
        if name not in self._cache:
            self._cache[name] = predict(self._runs.get(name, ()))
        return self._cache[name]
