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


# --- the queue in fair-share order (order_queue) ------------------------------------------
from rota.core.fairshare import (  # noqa: E402
    Accounts,
    Standing,
    account_usage,
    decayed_gpu_seconds,
    order_queue,
    passed_by,
    priority_of,
)
from rota.core.snapshot import PendingJob  # noqa: E402
from rota.core.usage import UsageRecord  # noqa: E402


def _job(i: int, user: str, project: str | None = None, priority: int = 0,
         submitted: float = 0.0, milli: int = 1000) -> PendingJob:
    return PendingJob(i, priority, i, milli, user=user, project=project, submitted=submitted)


def _standing(used: dict[str, float], shares: dict[str, float]) -> Standing:
    return Standing.of(Accounts(used, {}), shares, {})


def test_a_later_job_of_a_user_under_their_share_goes_first() -> None:
    standing = _standing({"ann": 100.0, "bob": 0.0}, {"ann": 1, "bob": 1})
    queue = [_job(1, "ann"), _job(2, "ann"), _job(3, "bob")]
    assert [j.id for j in order_queue(queue, standing, Weights(), now=0.0)] == [3, 1, 2]


def test_without_usage_the_order_is_priority_then_submission() -> None:
    standing = _standing({}, {})
    queue = [_job(1, "ann", priority=5), _job(2, "bob"), _job(3, "ann")]
    assert [j.id for j in order_queue(queue, standing, Weights(), now=0.0)] == [2, 3, 1]


def test_order_matches_the_factors_rota_priority_shows() -> None:
    standing = _standing({"ann": 30.0, "bob": 10.0}, {"ann": 2, "bob": 1})
    queue = [_job(1, "ann", submitted=0.0), _job(2, "bob", submitted=3 * DAY, milli=500)]
    w = Weights(size=10.0)
    got = order_queue(queue, standing, w, now=4 * DAY, largest_milli=2000)
    totals = [priority_of(j, standing, w, 4 * DAY, 2000).total for j in got]
    assert totals == sorted(totals, reverse=True)


@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0.1, 10), st.floats(0.1, 10))
def test_an_owner_over_their_share_sorts_behind_one_under(
        used_a: float, used_b: float, share_a: float, share_b: float) -> None:
    """Same priority and age: whoever used less of their share runs first."""
    standing = _standing({"a": used_a, "b": used_b}, {"a": share_a, "b": share_b})
    over_a = standing.users["a"].effective_share
    over_b = standing.users["b"].effective_share
    first = order_queue([_job(1, "a"), _job(2, "b")], standing, Weights(), now=0.0)[0]
    if over_a < over_b - 1e-9:
        assert first.id == 1
    elif over_b < over_a - 1e-9:
        assert first.id == 2


def test_a_project_over_its_share_pulls_its_members_back() -> None:
    standing = Standing.of(Accounts({"ann": 5.0, "bob": 5.0}, {"vision": 10.0}),
                           {}, {"vision": 1, "nlp": 1})
    queue = [_job(1, "ann", "vision"), _job(2, "bob", "nlp")]
    assert [j.id for j in order_queue(queue, standing, Weights(), now=0.0)] == [2, 1]


def test_decayed_gpu_seconds_is_the_integral_of_the_decay() -> None:
    h = 3600.0
    # one GPU for one half-life that ended now: H/ln2 * (1 - 1/2)
    assert decayed_gpu_seconds(1.0, 0.0, h, h, h) == pytest.approx(h / math.log(2) / 2)
    # short runs barely decay
    assert decayed_gpu_seconds(2.0, 100.0, 101.0, 101.0, h) == pytest.approx(2.0, rel=1e-3)
    assert decayed_gpu_seconds(1.0, 5.0, 4.0, 10.0, h) == 0.0


def test_account_usage_sums_users_and_projects_and_counts_running_ones_to_now() -> None:
    recs = [UsageRecord(1, 1, "ann", "vision", None, "local", 1.0, 0.0, 10.0),
            UsageRecord(2, 1, "bob", None, None, "local", 2.0, 0.0, None)]
    acc = account_usage(recs, now=10.0, half_life=1e9)
    assert acc.users == pytest.approx({"ann": 10.0, "bob": 20.0})
    assert acc.projects == pytest.approx({"vision": 10.0})


def test_passed_by_names_the_first_later_job_of_an_owner_under_their_share() -> None:
    standing = _standing({"ann": 100.0, "bob": 1.0}, {})
    mine = _job(1, "ann")
    ahead = [_job(5, "bob"), _job(3, "bob"), _job(0, "bob"), _job(2, "ann")]
    got = passed_by(mine, ahead, standing)
    assert got is not None and got.id == 3
    assert passed_by(_job(9, "bob"), [_job(10, "ann")], standing) is None  # ann is over


def test_ended_usage_kept_and_decayed_equals_summing_every_run_afresh() -> None:
    from typing import NamedTuple

    from rota.core.fairshare import EndedUsage

    class R(NamedTuple):
        user: str
        project: str | None
        gpus: float
        started_at: float
        ended_at: float | None

    runs = [R("a", "p", 2, 0, 100), R("b", None, 1, 50, 400), R("a", None, 0.5, 300, 900)]
    kept = EndedUsage(half_life=600)
    for r in sorted(runs, key=lambda r: r.ended_at or 0):  # added as each ends
        assert r.ended_at is not None
        kept.advance(r.ended_at)
        kept.add(r, r.ended_at)
    kept.advance(2000)
    live = R("b", None, 1, 1500, None)
    got = kept.with_running([live], 2000)
    want = account_usage([*runs, live], 2000, 600)
    assert got.users.keys() == want.users.keys() and got.projects == pytest.approx(
        want.projects)
    for u in want.users:
        assert got.users[u] == pytest.approx(want.users[u])


def test_gpu_weights_match_the_longest_key_in_the_gpus_name() -> None:
    from rota.core.usage import gpu_weight

    weights = {"A100": 1.5, "A100 80GB": 2.0, "h100": 3.0}
    assert gpu_weight("NVIDIA A100-SXM4-40GB", weights) == 1.5
    assert gpu_weight("NVIDIA A100 80GB PCIe", weights) == 2.0
    assert gpu_weight("NVIDIA H100 80GB HBM3", weights) == 3.0  # case aside
    assert gpu_weight("Tesla T4", weights) == 1.0
    assert gpu_weight(None, weights) == 1.0
