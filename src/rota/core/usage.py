"""What attempts used: GPU-seconds and money, as a read model over the attempts.

Accounting never keeps a counter of its own that could drift from the records: every
figure (fair-share usage, quotas, budgets, reports) is summed from the attempts' recorded
starts and ends, each clipped to the window asked about. A running attempt counts up to
``now``. Pure: the store reads the records, the clock comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import NamedTuple, TypeVar

K = TypeVar("K", bound=Hashable)


class UsageRecord(NamedTuple):
    """One attempt, as accounting sees it (``Store.usage`` reads them)."""

    job_id: int
    attempt: int  # its number within the job, from 1
    user: str
    project: str | None
    pool: str | None  # None: this machine
    backend: str
    gpus: float  # GPUs it held (0.25 = a quarter of one)
    started_at: float
    ended_at: float | None  # None: still running
    tier: str | None = None
    price: float | None = None  # per GPU-hour, fixed when the attempt started
    idle_seconds: float = 0.0  # GPU-seconds it held idle GPUs (rota.core.idle), as stored
    gpu_type: str | None = None  # "NVIDIA H100 80GB HBM3"; None: not known
    attempt_id: int = 0  # its row in the store (what is read again later); 0: not stored


def gpu_weight(gpu_type: str | None, weights: Mapping[str, float]) -> float:
    """How much a GPU-second of this kind counts (fair share): the weight of the longest
    key found in its name, case aside ({"H100": 2, "A100": 1.5}); 1 for any other kind."""
    if not weights or not gpu_type:
        return 1.0
    name = gpu_type.lower()
    found = [k for k in weights if k.lower() in name]
    return weights[max(found, key=len)] if found else 1.0


def weighted(records: Iterable[UsageRecord], weights: Mapping[str, float]
             ) -> list[UsageRecord]:
    """The records with their GPUs counted at their kind's weight."""
    if not weights:
        return list(records)
    return [r._replace(gpus=r.gpus * gpu_weight(r.gpu_type, weights)) for r in records]


def overlap(record: UsageRecord, since: float, until: float, now: float) -> float:
    """Seconds of ``record``'s run inside [since, until); a running one counts up to now."""
    end = record.ended_at if record.ended_at is not None else now
    return max(0.0, min(end, until) - max(record.started_at, since))


def gpu_seconds(record: UsageRecord, since: float, until: float, now: float) -> float:
    return record.gpus * overlap(record, since, until, now)


def cost(record: UsageRecord, since: float, until: float, now: float) -> float:
    """Money spent inside the window: GPU-hours x the price fixed at the attempt's start."""
    if not record.price:
        return 0.0
    return gpu_seconds(record, since, until, now) / 3600.0 * record.price


def totals(records: Iterable[UsageRecord], key: Callable[[UsageRecord], K],
                        since: float, until: float, now: float
                        ) -> dict[K, tuple[float, float]]:
    """(GPU-seconds, cost) inside the window, summed by ``key``."""
    out: dict[K, tuple[float, float]] = {}
    for r in records:
        seconds = gpu_seconds(r, since, until, now)
        if not seconds:
            continue
        k = key(r)
        used, spent = out.get(k, (0.0, 0.0))
        out[k] = (used + seconds, spent + (seconds / 3600.0 * r.price if r.price else 0.0))
    return out
