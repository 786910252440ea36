"""Tiers: named shapes of resources with a price per GPU-hour, and which one a job gets.

A tier says what a job on it may ask for (the kind or memory of its GPUs, CPUs, memory,
the longest time limit) and what a GPU-hour on it costs. A job gets the cheapest tier it
fits, or the one it names (an error naming the limit when it does not fit). A job no tier
fits runs untiered at price 0 unless ``tier_required`` refuses it at submit.

A job with no time limit fits only a tier with none: a tier's limit is a promise the job
makes, so "no limit" exceeds every limit. Pure: settings hand the tiers in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rota.errors import InvalidSpec
from rota.units import format_duration, format_memory, parse_duration, parse_memory

NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")


class Tier(BaseModel):
    """One tier as ``[tiers.NAME]`` in rota.toml declares it; None: no limit on that."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    price: float = Field(ge=0, le=1e6, description="per GPU-hour, in the site's currency")
    gpu_type: str | None = Field(default=None, max_length=100,
                                 description="the GPU model it offers (matched to gpu_type)")
    gpu_mem: int | None = Field(default=None, ge=0, description="bytes on each GPU")
    gpus: float | None = Field(default=None, ge=0, description="most GPUs a job may use")
    cpus: float | None = Field(default=None, gt=0)
    memory: int | None = Field(default=None, gt=0, description="bytes of memory")
    time_limit: float | None = Field(default=None, gt=0, description="longest time limit, s")
    description: str = Field(default="", max_length=200)

    @field_validator("gpu_mem", "memory", mode="before")
    @classmethod
    def _mem(cls, v: object) -> object:
        if isinstance(v, str):
            try:
                return parse_memory(v, field="memory")
            except InvalidSpec as e:
                raise ValueError(str(e).removeprefix("memory: ")) from None
        return v

    @field_validator("time_limit", mode="before")
    @classmethod
    def _dur(cls, v: object) -> object:
        if isinstance(v, str):
            try:
                return parse_duration(v)
            except InvalidSpec as e:
                raise ValueError(str(e).removeprefix("time_limit: ")) from None
        return v


class Need(Protocol):
    """What a job asks for (rota.core.spec.JobSpec has these)."""

    @property
    def gpus(self) -> float: ...
    @property
    def gpu_mem(self) -> int | None: ...
    @property
    def gpu_type(self) -> str | None: ...
    @property
    def cpus(self) -> float | None: ...
    @property
    def memory(self) -> int | None: ...
    @property
    def time_limit(self) -> float | None: ...
    @property
    def tier(self) -> str | None: ...


_G = 1 << 30
#: The Crucible platform's planned tiers (docs/policy.md): its CPU and GPU tiers with their
#: memory and timeouts; the GPU ones are the AWS instances it named (g4dn.xlarge: a T4
#: with 16 GB, 4 vCPUs, 16 GiB; g4dn.2xlarge: 8 vCPUs, 32 GiB; g5.2xlarge: an A10G with
#: 24 GB, 8 vCPUs, 32 GiB), priced at those instances' on-demand rate per hour.
CRUCIBLE: dict[str, Tier] = {
    "cpu-small": Tier(price=0.0, gpus=0, cpus=0.5, memory=512 << 20, time_limit=30,
                      description="CPU only: 512 MB, 30 s"),
    "cpu-large": Tier(price=0.0, gpus=0, memory=4 * _G, time_limit=600,
                      description="CPU only: 4 GB, 10 min"),
    "gpu-small": Tier(price=0.526, gpu_type="T4", gpu_mem=16 * _G, cpus=4, memory=16 * _G,
                      time_limit=2 * 3600, description="g4dn.xlarge: T4 16 GB, 2 h"),
    "gpu-medium": Tier(price=0.752, gpu_type="T4", gpu_mem=16 * _G, cpus=8, memory=32 * _G,
                       time_limit=8 * 3600, description="g4dn.2xlarge: T4 16 GB, 8 h"),
    "gpu-large": Tier(price=1.212, gpu_type="A10G", gpu_mem=24 * _G, cpus=8,
                      memory=32 * _G, time_limit=24 * 3600,
                      description="g5.2xlarge: A10G 24 GB, 24 h"),
}


def fits(tier: Tier, job: Need) -> bool:
    """Whether ``job`` fits ``tier``: :func:`misfit` is None (without wording why not: a
    submit and a launch each ask this of every tier)."""
    return not (
        (tier.gpus is not None and job.gpus > tier.gpus)
        or (tier.gpu_type and job.gpu_type and job.gpu_type.lower() != tier.gpu_type.lower())
        or (tier.gpu_mem is not None and job.gpu_mem is not None and job.gpu_mem > tier.gpu_mem)
        or (tier.cpus is not None and job.cpus is not None and job.cpus > tier.cpus)
        or (tier.memory is not None and job.memory is not None and job.memory > tier.memory)
        or (tier.time_limit is not None and (job.time_limit or math.inf) > tier.time_limit))


def misfit(tier: Tier, job: Need) -> str | None:
    """Why ``job`` does not fit ``tier`` (the first limit it passes), or None."""
    if tier.gpus is not None and job.gpus > tier.gpus:
        return f"at most {tier.gpus:g} GPUs, the job asks {job.gpus:g}"
    if tier.gpu_type and job.gpu_type and job.gpu_type.lower() != tier.gpu_type.lower():
        return f"its GPUs are {tier.gpu_type}, the job asks {job.gpu_type}"
    if tier.gpu_mem is not None and job.gpu_mem is not None and job.gpu_mem > tier.gpu_mem:
        return (f"{format_memory(tier.gpu_mem)} per GPU, the job asks "
                f"{format_memory(job.gpu_mem)}")
    if tier.cpus is not None and job.cpus is not None and job.cpus > tier.cpus:
        return f"at most {tier.cpus:g} CPUs, the job asks {job.cpus:g}"
    if tier.memory is not None and job.memory is not None and job.memory > tier.memory:
        return f"memory {format_memory(tier.memory)}, the job asks {format_memory(job.memory)}"
    if tier.time_limit is not None and (job.time_limit or math.inf) > tier.time_limit:
        asked = format_duration(job.time_limit) if job.time_limit else "none (no limit)"
        return (f"time limit at most {format_duration(tier.time_limit)}, the job gives "
                f"{asked}")
    return None


def _cost_order(item: tuple[str, Tier]) -> tuple[float, float, float, str]:
    name, t = item
    return (t.price, t.time_limit or math.inf, float(t.memory or math.inf), name)


def choose(tiers: Mapping[str, Tier], job: Need) -> tuple[str, Tier] | None:
    """The tier the job runs on: the one it names (InvalidSpec, field ``tier``, when there
    is none of that name or the job passes one of its limits), else the cheapest it fits
    (ties: the shorter time limit, the less memory, the name); None: it fits none."""
    if job.tier is not None:
        tier = tiers.get(job.tier)
        if tier is None:
            raise InvalidSpec(f"tier: no tier {job.tier!r}; the tiers are "
                              f"{', '.join(sorted(tiers)) or 'none'}", field="tier")
        why = misfit(tier, job)
        if why is not None:
            raise InvalidSpec(f"tier: the job does not fit tier {job.tier}: {why}",
                              field="tier")
        return job.tier, tier
    for name, tier in sorted(tiers.items(), key=_cost_order):
        if fits(tier, job):
            return name, tier
    return None


def no_fit(tiers: Mapping[str, Tier], job: Need) -> str:
    """Why the job fits no tier: each tier's first limit it passes."""
    return "; ".join(f"{name}: {misfit(t, job)}" for name, t in sorted(tiers.items(),
                                                                         key=_cost_order))


def charge(tiers: Mapping[str, Tier], job: Need) -> tuple[str | None, float | None]:
    """(tier, price per GPU-hour) an attempt records when it starts. The tier a job named
    was checked at submit: it keeps it though rota.toml changed since (no price when the
    tier is gone). (None, None): it fits no tier and runs untiered, costing nothing."""
    if job.tier is not None:
        tier = tiers.get(job.tier)
        return job.tier, tier.price if tier is not None else None
    chosen = choose(tiers, job)
    return (chosen[0], chosen[1].price) if chosen is not None else (None, None)


def default_prices(tiers: Mapping[str, Tier]) -> bool:
    """Whether these are Rota's shipped tiers (rota.toml declares none): a cost at their
    prices says so, as nobody here set them."""
    return tiers is CRUCIBLE
