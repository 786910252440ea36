"""What happens to a job after its attempt ends: one pure decision, applied by the daemon.

The daemon gathers the facts (how the process ended, why Rota was stopping it, whether it
died of GPU out-of-memory and what a bigger request would be, what checkpoint it left) and
``decide`` says what comes next: complete, fail, retry at a time, retry with more memory,
queue again, timed out, cancelled. No I/O and no clock here (``now`` comes in), so the
simulator replays the very same decisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from rota.core.snapshot import MILLI
from rota.units import format_duration, format_memory


class StopReason(StrEnum):
    """Why Rota is stopping a job (its ``stopping:<reason>`` event names it)."""

    CANCEL = "cancel"
    TIMEOUT = "timeout"
    PREEMPT = "preempt"
    REQUEUE = "requeue"
    GPU_LOST = "gpu_lost"
    IDLE = "idle"  # its GPUs stayed idle ([idle] action = "stop"): queued again, held

    @property
    def runs_again(self) -> bool:
        """Whether the job waits in the queue again once it has stopped."""
        return self in (StopReason.PREEMPT, StopReason.REQUEUE, StopReason.GPU_LOST,
                        StopReason.IDLE)


def stop_text(why: str, stop_signal: str, kill_after: float) -> str:
    """The ``stopping:<reason>`` event's text: why, then what is sent and when."""
    return f"{why}; sent {stop_signal}, then SIGKILL {_duration(kill_after)} later"


def time_limit_text(limit: float) -> str:
    return f"time limit of {_duration(limit)} reached"


def _duration(seconds: float) -> str:
    """Whole seconds and up as people write them; a fraction of a second as it is."""
    seconds = max(0.0, seconds)
    return format_duration(seconds) if seconds >= 1 else f"{seconds:.1g}s"


#: how long an attempt that could not start for its dependencies waits before the next
#: (its dependency may have ended meanwhile without Rota having read that end yet)
WAIT_AGAIN_S = 2.0
#: launches of one job lost in a row to a passing trouble (``NeverStarted.passing``) after
#: which the job fails: a trouble that comes back every time (a runner that dies on this
#: job's launch, a broken executor) is no passing one, and would loop forever
LOST_LAUNCHES_MAX = 5
#: the longest wait before a job whose launch was lost is tried again (the wait doubles
#: from WAIT_AGAIN_S with each loss in a row)
LOST_WAIT_MAX_S = 60.0


# --- facts ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Exited:
    """The attempt's process ended: its exit code, or the signal that killed it."""

    code: int | None
    signal: int | None = None
    why: str = ""  # how it ended when not by itself (its engine ended it: NODE_FAIL)
    said: str = ""  # why the job itself said it failed (rota.job.fail_reason), if it did

    @property
    def how(self) -> str:
        if self.why:
            return self.why
        if self.code is not None:
            how = f"exit code {self.code}"
        elif self.signal is not None:
            how = f"killed by signal {self.signal}"
        else:  # an engine that ended it (a cancel there) without a code or a signal
            how = "ended with no exit code or signal recorded"
        return f"{how}: {self.said}" if self.said else how


@dataclass(frozen=True, slots=True)
class NeverStarted:
    """The attempt's launch failed, or its engine dropped it unstarted: no process ever
    existed. ``waits``: because a job it depends on has not completed (it was handed to
    its engine to wait there), which is no failure of this job's. ``passing``: because
    what starts it was lost mid-request (the local runner killed), no failure of this
    job's either."""

    why: str
    waits: bool = False
    passing: bool = False

    @property
    def code(self) -> None:
        return None

    @property
    def how(self) -> str:
        return f"launch failed: {self.why}"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The newest valid checkpoint an attempt left (for the record of a stopped one)."""

    path: str
    step: int | None = None

    def text(self) -> str:
        return self.path + (f" (step {self.step})" if self.step is not None else "")


@dataclass(frozen=True, slots=True)
class OomFacts:
    """The attempt died of GPU out-of-memory; ``bigger`` is the larger request some allowed
    GPU can hold (share in thousandths, bytes per GPU), None when none can."""

    retried_before: bool  # once only: a second out-of-memory is a failure like any other
    bigger: tuple[int, int] | None
    peak: int  # the most memory it held on one GPU


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retries: int = 0
    backoff: float = 10.0
    backoff_max: float = 600.0

    def delay(self, failures: int) -> float:
        """Exponential backoff before retry number ``failures`` (1-based), capped."""
        return min(self.backoff * 2 ** (failures - 1), self.backoff_max)


@dataclass(frozen=True, slots=True)
class AttemptFacts:
    """What the decision needs to know of the ended attempt and its job."""

    stop: StopReason | None  # why Rota was stopping it; None: it ended by itself
    failures: int  # failed attempts before this one
    policy: RetryPolicy
    gpus: tuple[int, ...] = ()
    milli: int = MILLI  # share of each GPU, in thousandths
    gpu_mem: int | None = None  # what it asked per GPU
    time_limit: float | None = None
    oom: OomFacts | None = None
    checkpointing: bool = False  # it has a checkpoint_dir or reported one
    checkpoint: Checkpoint | None = None  # the newest valid one this attempt left
    lost_before: int = 0  # launches lost in a row just before this one (NeverStarted.passing)


# --- outcomes -------------------------------------------------------------------------------
#: the outcome recorded for an attempt whose launch was lost (``NeverStarted.passing``): how
#: the losses in a row are counted from the store, so a daemon restart keeps the count
LOST = "launch_lost"


@dataclass(frozen=True, slots=True)
class Complete:
    message: str
    record = "completed"


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str
    failures: int
    record = "failed"


@dataclass(frozen=True, slots=True)
class RetryAt:
    at: float
    reason: str
    failures: int
    record = "failed"


@dataclass(frozen=True, slots=True)
class RetryWithMoreMemory:
    gpus_milli: int  # the job's new GPU need (whole GPUs x 1000, or its share)
    gpu_mem: int  # bytes per GPU
    reason: str  # the transition's message
    note: str  # what the oom_retry event says
    record = "failed"


@dataclass(frozen=True, slots=True)
class Requeue:
    reason: str
    record: str  # "preempted" | "requeued" | "not_started" | LOST: the attempt's outcome
    resume_from: str | None = None  # the checkpoint the next attempt is expected to use
    not_before: float | None = None  # it may start again from then on
    held: bool = False  # queued again held: it waits for `rota release`


@dataclass(frozen=True, slots=True)
class TimedOut:
    reason: str
    record = "timeout"


@dataclass(frozen=True, slots=True)
class Cancelled:
    reason: str
    end_reason: str
    record = "cancelled"


Outcome = Complete | Fail | RetryAt | RetryWithMoreMemory | Requeue | TimedOut | Cancelled


def ends_in_failure(stop: StopReason | None, end: Exited | NeverStarted) -> bool:
    """Whether ``decide`` treats the end as a failure (and reads ``AttemptFacts.oom``)."""
    if isinstance(end, NeverStarted):
        return stop is not StopReason.CANCEL and not end.waits and not end.passing
    return stop is None and end.code != 0


def decide(facts: AttemptFacts, end: Exited | NeverStarted, now: float) -> Outcome:
    """The job's next step after its attempt ended (see the module docstring)."""
    how = end.how
    if ends_in_failure(facts.stop, end):
        return after_failure(facts, how, now)
    if isinstance(end, NeverStarted) and facts.stop is StopReason.CANCEL:
        return Cancelled(f"cancelled (its launch failed: {end.why})",
                         end_reason="cancelled by request")
    if isinstance(end, NeverStarted) and end.passing:
        return after_lost_launch(facts, end, now)
    if isinstance(end, NeverStarted):  # waits: the dependency gate decides again
        return Requeue(f"not started: {end.why}; it waits again for the jobs it depends on",
                       record="not_started", not_before=now + WAIT_AGAIN_S)
    if facts.stop is StopReason.CANCEL:
        return Cancelled(f"cancelled ({how})", end_reason=f"cancelled ({how})")
    if facts.stop is StopReason.TIMEOUT:
        # asked to stop up to its grace before the limit (stopper): not "reached"
        return TimedOut(f"stopped by its time limit of {_duration(facts.time_limit or 0)} "
                        f"({how})")
    if facts.stop is StopReason.PREEMPT:
        return Requeue(f"preempted ({how}){_saved_text(facts)}; queued again in its place",
                       record="preempted",
                       resume_from=facts.checkpoint.path if facts.checkpoint else None)
    if facts.stop is StopReason.IDLE:
        return Requeue(f"stopped for idle GPUs ({how}){_saved_text(facts)}; held in its "
                       "place until `rota release`", record="idle_stopped",
                       resume_from=facts.checkpoint.path if facts.checkpoint else None,
                       held=True)
    if facts.stop in (StopReason.GPU_LOST, StopReason.REQUEUE):
        why = "its GPU was lost" if facts.stop is StopReason.GPU_LOST else "requeued by request"
        return Requeue(f"{why} ({how}); queued again", record="requeued")
    return Complete(how)


def lost_in_a_row(outcomes: Iterable[str | None]) -> int:
    """How many of the last attempts (their recorded outcomes, oldest first) were launches
    lost in a row."""
    n = 0
    for outcome in outcomes:
        n = n + 1 if outcome == LOST else 0
    return n


def after_lost_launch(facts: AttemptFacts, end: NeverStarted, now: float) -> Outcome:
    """A launch lost to a passing trouble: queued again without charging a retry, after a
    wait that doubles with each loss in a row; the job fails once LOST_LAUNCHES_MAX
    launches in a row were lost (the trouble is not passing)."""
    lost = facts.lost_before + 1
    if lost >= LOST_LAUNCHES_MAX:
        return Fail(f"its launch was lost {lost} times in a row: {end.why}", facts.failures)
    wait = min(WAIT_AGAIN_S * 2 ** (lost - 1), LOST_WAIT_MAX_S)
    again = "queued again" if lost == 1 else \
        f"queued again (lost {lost} times in a row; it fails at {LOST_LAUNCHES_MAX})"
    return Requeue(f"not started: {end.why}; {again}", record=LOST, not_before=now + wait)


def after_failure(facts: AttemptFacts, why: str, now: float) -> Outcome:
    """A failed attempt: once more with more memory after a GPU out-of-memory, else a retry
    after its backoff while retries are left, else the job fails."""
    bigger = _more_memory(facts)
    if bigger is not None:
        gpus_milli, mem, note = bigger
        return RetryWithMoreMemory(gpus_milli, mem, reason=f"{why}; {note}", note=note)
    failures = facts.failures + 1
    if failures <= facts.policy.retries:
        delay = facts.policy.delay(failures)
        return RetryAt(now + delay, f"{why}; retry {failures}/{facts.policy.retries} in "
                                    f"{delay:g}s", failures)
    return Fail(why, failures)


def _more_memory(facts: AttemptFacts) -> tuple[int, int, str] | None:
    oom = facts.oom
    if not facts.gpus or oom is None or oom.retried_before or oom.bigger is None:
        return None
    milli, mem = oom.bigger
    gpus = len(facts.gpus) * MILLI if facts.milli >= MILLI else milli
    asked = format_memory(facts.gpu_mem) if facts.gpu_mem else "no amount"
    note = (f"GPU out of memory (peak {format_memory(oom.peak)} on one GPU, {asked} asked): "
            f"retried once with {format_memory(mem)} per GPU")
    return gpus, mem, note


def _saved_text(facts: AttemptFacts) -> str:
    """What the stopped attempt left to resume from, for its record."""
    if not facts.checkpointing:
        return ""
    if facts.checkpoint is None:
        return "; it saved no checkpoint"
    return f"; last checkpoint {facts.checkpoint.text()}"
