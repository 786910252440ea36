"""The answers about fair share, priorities, tiers and the usage report (see rota.answers)."""

from typing import Literal, TypedDict


class ShareAnswer(TypedDict):
    """One user or project as ``rota share`` shows it (rota.core.fairshare.FairShare)."""

    kind: Literal["user", "project"]
    name: str
    shares: float  # as an admin set them (1 when none did)
    norm_shares: float  # its part of all shares, 0..1
    usage_gpu_hours: float  # decayed with the half-life
    norm_usage: float  # its part of everyone's decayed usage, 0..1
    effective: float  # norm_usage / norm_shares: 1 = used exactly its share
    factor: float  # 2 ** (-effective), 0..1
    gpu_hours_day: float  # GPU-hours used in the last 24 h (not decayed)
    gpu_hours_week: float  # in the last 7 days


class SharesAnswer(TypedDict):
    """GET /v1/shares: every user and project with a share set or some usage."""

    fair_share: bool  # whether the queue is ordered by it ([priority] fair_share)
    half_life: float  # seconds
    accounts: list[ShareAnswer]


class FactorAnswer(TypedDict):
    name: Literal["priority", "age", "size", "fair_share"]
    factor: float  # 0..1
    weight: float
    weighted: float  # factor x weight


class PriorityAnswer(TypedDict):
    """GET /v1/jobs/{id}/priority: a waiting job's factors and their sum, as sprio shows."""

    id: int
    user: str
    project: str | None
    fair_share: bool  # whether the queue is ordered by the sum ([priority] fair_share)
    factors: list[FactorAnswer]
    total: float

class TierAnswer(TypedDict):
    """A tier (rota.core.tiers.Tier): None where it sets no limit."""

    name: str
    price: float  # per GPU-hour
    gpu_type: str | None
    gpu_mem: int | None  # bytes on each GPU
    gpus: float | None  # most GPUs a job may use
    cpus: float | None
    memory: int | None  # bytes
    time_limit: float | None  # seconds: the longest a job on it may give
    description: str


class TiersAnswer(TypedDict):
    """GET /v1/tiers: every tier, cheapest first."""

    tiers: list[TierAnswer]
    default_prices: bool  # Rota's shipped tiers and prices: rota.toml declares none


class ReportRowAnswer(TypedDict):
    group: str  # the user, project, pool or tier; "-": none
    bucket: str  # 2026-11-28, 2026-W48 (ISO week), 2026-11
    start: float  # the bucket's first second, epoch (UTC)
    gpu_hours: float
    cost: float
    wasted_gpu_hours: float  # of gpu_hours, held on idle GPUs (docs/policy.md, Idle GPUs)


class ReportTotalAnswer(TypedDict):
    group: str
    gpu_hours: float
    cost: float
    wasted_gpu_hours: float


class ReportAnswer(TypedDict):
    """GET /v1/report: GPU-hours and cost per group and period bucket."""

    by: Literal["user", "project", "pool", "tier"]
    period: Literal["day", "week", "month"]
    since: float
    until: float
    now: float
    user: str | None  # the caller's own usage only; None: everyone's (an admin)
    rows: list[ReportRowAnswer]
    totals: list[ReportTotalAnswer]
    default_prices: bool  # costs at Rota's shipped prices: nobody here set any
