"""A job of a trace, as the simulator replays it."""

from __future__ import annotations

from typing import NamedTuple


class SimJob(NamedTuple):
    """One job of a trace. Times in seconds from the trace's own origin.

    ``duration`` is how long it runs once started (what it ran in the trace);
    ``time_limit`` cuts it short (TIMEOUT) when smaller.
    """

    id: int
    submit: float
    duration: float
    gpus_milli: int  # as PendingJob counts it: k*1000 whole GPUs, < 1000 a share of one
    gpu_mem: int | None = None  # bytes per GPU
    priority: int = 0  # lower runs first
    user: str = "user"
    project: str | None = None
    name: str = ""
    time_limit: float | None = None

    @property
    def gpus(self) -> float:
        return self.gpus_milli / 1000

    @property
    def runs_for(self) -> float:
        """How long its attempt holds GPUs: its run time, or its time limit if shorter."""
        if self.time_limit is not None and self.time_limit < self.duration:
            return self.time_limit
        return self.duration
