"""Idle allocated GPUs (rota.core.idle): samples and a fake clock in, flags and waste out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.core.idle import IdleRule, JobIdle, idle_gpus, idle_since, idle_text, observe

RULE = IdleRule(threshold=0.05, after_s=900.0)


def feed(samples: list[tuple[float, dict[int, float]]], gpus: tuple[int, ...] = (0,),
         share: float = 1.0, rule: IdleRule = RULE) -> JobIdle:
    state = JobIdle()
    for now, utils in samples:
        state = observe(state, gpus, utils, now, rule, share)
    return state


def test_a_gpu_under_the_threshold_for_the_whole_span_flags_the_job() -> None:
    state = feed([(t, {0: 0.01}) for t in range(0, 901, 60)])
    assert idle_since(state, 900.0, RULE) == 0.0
    assert idle_gpus(state, 900.0, RULE) == [0]
    # the whole stretch is waste once it is long enough, not only the part after 15 min
    assert state.idle_seconds == pytest.approx(900.0)


def test_not_flagged_before_the_span_and_nothing_counted_as_waste() -> None:
    state = feed([(t, {0: 0.0}) for t in range(0, 841, 60)])
    assert idle_since(state, 840.0, RULE) is None
    assert state.idle_seconds == 0.0


def test_one_busy_sample_starts_the_stretch_anew() -> None:
    samples = [(t, {0: 0.0}) for t in range(0, 600, 60)] + [(600.0, {0: 0.5})]
    samples += [(t, {0: 0.0}) for t in range(660, 1500, 60)]
    state = feed(samples)
    assert idle_since(state, 1440.0, RULE) is None  # 660 .. 1440 is 13 min
    state = observe(state, (0,), {0: 0.0}, 1560.0, RULE)
    assert idle_since(state, 1560.0, RULE) == 660.0
    assert state.idle_seconds == pytest.approx(900.0)


def test_the_threshold_is_strict_and_any_held_gpu_is_enough() -> None:
    samples = [(t, {0: 0.05, 1: 0.9, 2: 0.0}) for t in range(0, 1000, 100)]
    state = feed(samples, gpus=(0, 1, 2))
    assert idle_gpus(state, 900.0, RULE) == [2]  # 5 % itself is not under 5 %
    assert state.idle_seconds == pytest.approx(900.0)


def test_gpus_the_job_does_not_hold_are_ignored() -> None:
    state = feed([(t, {0: 0.9, 3: 0.0}) for t in range(0, 1000, 100)], gpus=(0,))
    assert idle_since(state, 900.0, RULE) is None


def test_a_gpu_missing_from_a_reading_starts_its_stretch_anew() -> None:
    samples = [(0.0, {0: 0.0}), (500.0, {}), (600.0, {0: 0.0}), (1400.0, {0: 0.0})]
    state = feed(samples)
    assert idle_since(state, 1400.0, RULE) is None  # 600 .. 1400
    state = observe(state, (0,), {0: 0.0}, 1500.0, RULE)
    assert idle_since(state, 1500.0, RULE) == 600.0


def test_a_fractional_job_counts_its_share_of_a_wholly_idle_gpu() -> None:
    state = feed([(t, {0: 0.0}) for t in range(0, 1201, 60)], share=0.5)
    assert idle_since(state, 1200.0, RULE) == 0.0
    assert state.idle_seconds == pytest.approx(600.0)


def test_waste_keeps_adding_only_the_new_time() -> None:
    state = feed([(0.0, {0: 0.0}), (900.0, {0: 0.0}), (1000.0, {0: 0.0}),
                  (1100.0, {0: 0.5}), (1200.0, {0: 0.0})])
    assert state.idle_seconds == pytest.approx(1000.0)
    assert idle_since(state, 1200.0, RULE) is None


@given(st.lists(st.tuples(st.floats(0.1, 200.0), st.floats(0.0, 1.0)), max_size=40))
def test_waste_never_exceeds_the_time_observed(steps: list[tuple[float, float]]) -> None:
    """Wasted GPU-seconds are at most the time between the first and last sample, per GPU,
    and never go down."""
    rule = IdleRule(threshold=0.05, after_s=60.0)
    state, now, last = JobIdle(), 0.0, 0.0
    state = observe(state, (0, 1), {0: 0.0, 1: 0.0}, now, rule)
    for dt, util in steps:
        now += dt
        state = observe(state, (0, 1), {0: util, 1: util / 2}, now, rule)
        assert state.idle_seconds >= last
        last = state.idle_seconds
    assert state.idle_seconds <= 2 * now + 1e-6


def test_idle_text_names_the_gpu_the_threshold_and_the_time() -> None:
    assert idle_text([2], 0.0, 17 * 60.0, 0.05) == "its GPU 2 has been under 5 % for 17 min"
    assert idle_text([0, 1], 0.0, 30.0, 0.1) == \
        "its GPUs 0 and 1 have been under 10 % for 30 s"
