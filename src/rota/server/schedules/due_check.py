"""A daemon collaborator that submits work when it falls due (evaluation schedules,
pipelines' rounds): a look every TICK_S on a timer of its own, through the same intake as
any submit. One failure is logged and the next look still comes."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from rota.server.intake import IntakePort

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from rota.core.lifecycle import JobState
    from rota.server.intake import Intake
    from rota.server.jobs.running import Running


class DuePort(IntakePort, Protocol):
    """What a due check needs of the daemon (which is one): intake's port, and its timers,
    batches (one transaction), running jobs, cancelling, and whether its memory is to be
    trusted (``diverged``: not until it has taken its work up again from the store)."""

    @property
    def diverged(self) -> bool: ...

    @property
    def running(self) -> dict[int, Running]: ...
    def later(self, delay: float, fn: Callable[[], None]) -> None: ...
    def batch(self) -> AbstractContextManager[None]: ...
    def cancel(self, job_id: int) -> JobState: ...

TICK_S = 1.0  # how often due work is looked at: it starts within this of its time


class DueCheck:
    #: what is checked, for the log ("evaluation schedules")
    what = "due work"

    def __init__(self, daemon: DuePort) -> None:
        self.d = daemon
        self._intake: Intake | None = None

    def start(self) -> None:
        self.d.later(TICK_S, self._tick)

    def _tick(self) -> None:
        try:
            if not self.d.diverged:  # memory is not to be trusted until taken up again
                self.check(self.d.clock())
        except Exception:  # one bad item must not stop the others' next turn
            logging.getLogger("rota.due_check").exception("checking %s failed", self.what)
        self.d.later(TICK_S, self._tick)

    @property
    def intake(self) -> Intake:
        if self._intake is None:  # the same checks as any submit (made once, on first use)
            from rota.server.intake import Intake

            self._intake = Intake(self.d)
        return self._intake

    def check(self, now: float) -> None:
        raise NotImplementedError
