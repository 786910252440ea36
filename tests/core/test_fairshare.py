"""Fair share and multifactor priority (rota.core.fairshare): Slurm's formulas, pure."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.core.fairshare import (
    Usage,
    Weights,
    combined,
    decay,
    factor,
    fair_shares,
    job_factors,
)

DAY = 86_400.0


def test_usage_halves_every_half_life() -> None:
    u = Usage(100.0, at=0.0)
    assert u.decayed(7 * DAY).gpu_seconds == pytest.approx(50.0)
    assert u.decayed(14 * DAY).gpu_seconds == pytest.approx(25.0)
    assert u.decayed(-5.0) == u  # never seen from before it was brought up to date
    assert decay(3600.0, half_life=3600.0) == 0.5


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 30 * DAY)), max_size=8))
def test_charges_add_up_the_same_in_any_order(charges: list[tuple[float, float]]) -> None:
    """Usage charged as attempts end, in whatever order their ends are learnt, equals the
    sum of each charge decayed by its own age."""
    now = 31 * DAY
    forward, backward = Usage(), Usage()
    for gs, t in charges:
        forward = forward.charged(gs, t, now)
    for gs, t in reversed(charges):
        backward = backward.charged(gs, t, now)
    want = sum(gs * 0.5 ** ((now - t) / (7 * DAY)) for gs, t in charges)
    assert forward.gpu_seconds == pytest.approx(want, rel=1e-9, abs=1e-6)
    assert backward.gpu_seconds == pytest.approx(want, rel=1e-9, abs=1e-6)


def test_a_bad_charge_or_half_life_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="GPU-seconds"):
        Usage().charged(-1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="half-life"):
        decay(1.0, half_life=0.0)


def test_the_classic_factor_rewards_whoever_used_less_than_their_share() -> None:
    got = fair_shares({"alice": 1, "bob": 1}, {"alice": 300.0, "bob": 100.0, "carol": 0.0})
    # three accounts, a third of the shares each; alice used 3/4 of everything
    assert got["alice"].norm_shares == pytest.approx(1 / 3)
    assert got["alice"].factor == pytest.approx(2 ** (-0.75 * 3))
    assert got["carol"].factor == 1.0  # used nothing
    assert got["carol"].factor > got["bob"].factor > got["alice"].factor
    assert factor(0.5, 0.5) == 0.5  # used exactly its share
    assert factor(0.2, 0.0) == 0.0  # no share at all
    assert got["alice"].effective_share == pytest.approx(0.75 * 3)
    with pytest.raises(ValueError, match="share of bob"):
        fair_shares({"bob": -1}, {})


def test_two_users_flooding_the_queue_get_gpu_hours_in_their_shares() -> None:
    """A day of hour-long one-GPU jobs from two users who always have work waiting, on 8
    GPUs: each free GPU goes to the job with the higher priority. Alice's share is 2,
    bob's 1: their GPU-hours end within 10 % of 2:1."""
    shares, weights = {"alice": 2.0, "bob": 1.0}, Weights(age=0.0)
    usage = {"alice": Usage(), "bob": Usage()}
    hours = {"alice": 0, "bob": 0}
    for hour in range(24):
        now = hour * 3600.0
        for _ in range(8):  # fill the GPUs for this hour, one at a time
            fs = fair_shares(shares, {a: u.decayed(now).gpu_seconds for a, u in usage.items()})
            best = max(shares, key=lambda a: (job_factors(
                priority=0, age_s=0.0, gpus_milli=1000, largest_milli=8000,
                fair_share=combined(fs[a], None), weights=weights).total, a))
            usage[best] = usage[best].charged(3600.0, now + 1800.0, now)
            hours[best] += 1
    assert sum(hours.values()) == 24 * 8
    assert hours["alice"] / hours["bob"] == pytest.approx(2.0, rel=0.10)


def test_job_factors_are_each_within_zero_and_one_and_weighted() -> None:
    w = Weights(priority=1000, age=100, size=10, fair_share=1000)
    urgent = job_factors(priority=-1_000_000, age_s=14 * DAY, gpus_milli=8000,
                         largest_milli=8000, fair_share=1.0, weights=w)
    assert (urgent.priority, urgent.age, urgent.size, urgent.fair_share) == (1, 1, 1, 1)
    assert urgent.total == 2110
    plain = job_factors(priority=0, age_s=3.5 * DAY, gpus_milli=500, largest_milli=8000,
                        fair_share=0.5, weights=w)
    assert plain.priority == 0.5 and plain.age == 0.5 and plain.size == 500 / 8000
    assert plain.total == pytest.approx(500 + 50 + 10 * 500 / 8000 + 500)
    small = job_factors(priority=0, age_s=0, gpus_milli=500, largest_milli=8000,
                        fair_share=0.5, weights=Weights(size=10, favor_small=True))
    assert small.size == 1 - 500 / 8000
    with pytest.raises(ValueError, match="weight age"):
        Weights(age=-1)


def test_a_jobs_factor_combines_its_users_and_its_projects() -> None:
    fs = fair_shares({}, {"alice": 0.0, "vision": 900.0, "nlp": 100.0, "bob": 100.0})
    assert combined(None, None) == 1.0
    assert combined(fs["alice"], None) == fs["alice"].factor
    both = combined(fs["alice"], fs["vision"])
    assert both == pytest.approx(math.sqrt(fs["alice"].factor * fs["vision"].factor))
    assert fs["vision"].factor < both < fs["alice"].factor
