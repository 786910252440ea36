"""Idle allocated GPUs: which running jobs hold a GPU that does nothing.

A job is *idle* once a GPU it holds has stayed under ``IdleRule.threshold`` utilisation
for ``IdleRule.after_s`` seconds in a row (any one of its GPUs is enough: a job that
keeps 7 of 8 GPUs busy still wastes the eighth). Utilisation is what the driver reports
for the whole GPU, so a GPU shared by fractional jobs is idle only when the whole GPU is
idle: one job's share of it cannot be told apart from its neighbours'.

Wasted GPU-seconds count only stretches that reached ``after_s`` (a short pause to load
data or save a checkpoint is not waste); once one has, it counts from its first idle
sample, times the job's share of the GPU (1 for a whole GPU, 0.5 for half of one).

Pure: samples and ``now`` come in, a new ``JobIdle`` goes out; the daemon keeps one per
running job and feeds it each GPU reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_THRESHOLD = 0.05
DEFAULT_AFTER_S = 15 * 60.0


@dataclass(frozen=True, slots=True)
class IdleRule:
    """When a held GPU counts as idle: under ``threshold`` (0..1) for ``after_s`` seconds."""

    threshold: float = DEFAULT_THRESHOLD
    after_s: float = DEFAULT_AFTER_S


@dataclass(frozen=True, slots=True)
class JobIdle:
    """One running job's idle record.

    ``under``: per GPU it holds, since when that GPU has been under the threshold (absent:
    it was busy, or not read, at the last sample). ``counted``: per GPU in a stretch that
    reached ``after_s``, up to when its waste is already in ``idle_seconds``.
    """

    under: Mapping[int, float] = field(default_factory=dict)
    counted: Mapping[int, float] = field(default_factory=dict)
    idle_seconds: float = 0.0  # wasted GPU-seconds, times the job's share of each GPU


def observe(state: JobIdle, gpus: tuple[int, ...], utilization: Mapping[int, float],
            now: float, rule: IdleRule, share: float = 1.0) -> JobIdle:
    """``state`` after one reading at ``now``: ``utilization`` per GPU index (0..1) for the
    GPUs read; a held GPU missing from it (vanished, not read) starts its stretch anew,
    since nothing is known of the time between."""
    under: dict[int, float] = {}
    counted: dict[int, float] = {}
    wasted = state.idle_seconds
    for i in gpus:
        util = utilization.get(i)
        if util is None or util >= rule.threshold:
            continue
        since = state.under.get(i, now)
        under[i] = since
        if now - since >= rule.after_s:
            upto = state.counted.get(i, since)
            wasted += max(0.0, now - upto) * share
            counted[i] = now
    return JobIdle(under, counted, wasted)


def idle_gpus(state: JobIdle, now: float, rule: IdleRule) -> list[int]:
    """The job's GPUs that have been idle long enough to flag it, in index order."""
    return sorted(i for i, since in state.under.items() if now - since >= rule.after_s)


def idle_since(state: JobIdle, now: float, rule: IdleRule) -> float | None:
    """Since when the job's longest-idle GPU has been under the threshold, when that is at
    least ``after_s`` ago (the job is flagged); None while it is not flagged."""
    flagged = [state.under[i] for i in idle_gpus(state, now, rule)]
    return min(flagged) if flagged else None


def idle_text(gpus: list[int], since: float, now: float, threshold: float) -> str:
    """'its GPU 2 has been under 5 % for 17 min' (minutes; seconds under one)."""
    which = f"GPU {gpus[0]}" if len(gpus) == 1 else \
        "GPUs " + ", ".join(map(str, gpus[:-1])) + f" and {gpus[-1]}"
    verb = "has" if len(gpus) == 1 else "have"
    span = max(0.0, now - since)
    length = f"{span / 60:.0f} min" if span >= 60 else f"{span:.0f} s"
    return f"its {which} {verb} been under {threshold * 100:g} % for {length}"
