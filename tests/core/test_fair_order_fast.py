"""order_queue's grouped, stable float-key sort equals the plain sort by (-total, seq)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rota.core.fairshare import (
    Accounts,
    Standing,
    Weights,
    age_term,
    group_constant,
    order_queue,
)
from rota.core.snapshot import PendingJob

USERS = ("ann", "bob", "cy")
PROJECTS = (None, "vision", "nlp")
NOW = 1_000_000.0

_job = st.builds(
    lambda user, project, priority, milli, submitted: (user, project, priority, milli,
                                                       submitted),
    st.sampled_from(USERS), st.sampled_from(PROJECTS),
    st.integers(-2_000_000, 2_000_000) | st.sampled_from([0, 1, 5]),
    st.sampled_from([0, 250, 1000, 2000, 8000]),
    # 0: unknown (no age); far past max_age; within it; in the future
    st.sampled_from([0.0, NOW - 1e7, NOW - 3600.0, NOW, NOW + 10.0])
    | st.floats(NOW - 2e6, NOW + 100.0))
_weights = st.builds(Weights, priority=st.floats(0, 1e4), age=st.floats(0, 1e4),
                     size=st.floats(0, 1e3), fair_share=st.floats(0, 1e4),
                     max_age_s=st.sampled_from([0.0, 3600.0, 7 * 86_400.0]),
                     favor_small=st.booleans())
_usage = st.dictionaries(st.sampled_from(USERS), st.floats(0, 1e7), max_size=3)
_shares = st.dictionaries(st.sampled_from(USERS), st.sampled_from([0.0, 1.0, 2.0, 4.0]),
                          max_size=3)


def _plain(jobs: list[PendingJob], standing: Standing, weights: Weights, now: float,
           scale: int) -> list[PendingJob]:
    """The definition: every job's total worked out alone, sorted by (-total, seq)."""
    def total(j: PendingJob) -> float:
        return (group_constant((j.user, j.project, j.priority, j.gpus_milli), standing,
                               weights, scale) + age_term(j.submitted, now, weights))
    return sorted(jobs, key=lambda j: (-total(j), j.seq))


@settings(max_examples=300, deadline=None)
@given(st.lists(_job, max_size=60), st.permutations(range(60)), _weights, _usage, _shares,
       _usage, st.floats(NOW - 1e6, NOW + 1e6), st.sampled_from([None, 0, 4000, 8000]))
def test_the_fast_order_is_the_plain_sort(rows: list[tuple], perm: list[int],
                                          weights: Weights, users: dict[str, float],
                                          shares: dict[str, float], projects: dict,
                                          now: float, largest: int | None) -> None:
    # seqs unique but not in the order given, nor in submission-time order
    seqs = [p for p in perm if p < len(rows)]
    jobs = [PendingJob(id=100 + n, priority=pr, seq=seqs[n], gpus_milli=m, user=u,
                       project=p, submitted=t)
            for n, (u, p, pr, m, t) in enumerate(rows)]
    standing = Standing.of(Accounts(users, {k: v for k, v in projects.items()}), shares,
                           {"vision": 2.0})
    scale = largest if largest is not None else max((j.gpus_milli for j in jobs), default=0)
    fast = order_queue(jobs, standing, weights, now, largest_milli=largest)
    assert [j.id for j in fast] == [j.id for j in _plain(jobs, standing, weights, now, scale)]


def test_jobs_past_max_age_tie_and_keep_submission_order() -> None:
    weights = Weights(age=100.0, max_age_s=3600.0)
    standing = Standing.of(Accounts({}, {}), {}, {})
    # both past the cap: equal totals, so seq decides though job 2 was submitted earlier
    jobs = [PendingJob(id=1, priority=0, seq=1, gpus_milli=0, user="a", submitted=NOW - 5000),
            PendingJob(id=2, priority=0, seq=2, gpus_milli=0, user="a", submitted=NOW - 9000),
            PendingJob(id=3, priority=0, seq=0, gpus_milli=0, user="a", submitted=NOW - 60)]
    assert [j.id for j in order_queue(jobs, standing, weights, NOW)] == [1, 2, 3]
