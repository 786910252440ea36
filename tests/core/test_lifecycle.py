"""The one transition table: allowed moves pass, others raise, terminal states are final."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.core.lifecycle import TERMINAL, TRANSITIONS, JobState, check_transition
from rota.errors import Conflict, IllegalTransition, RotaError

S = JobState
ALLOWED = [(src, dst) for src, dsts in TRANSITIONS.items() for dst in sorted(dsts)]
ILLEGAL = [(src, dst) for src in JobState for dst in JobState if dst not in TRANSITIONS[src]]


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(JobState)


def test_terminal_states_are_the_ones_with_no_way_out() -> None:
    assert {s for s in JobState if not TRANSITIONS[s]} == TERMINAL
    assert {S.COMPLETED, S.FAILED, S.TIMEOUT, S.CANCELLED} == TERMINAL
    assert all(s.terminal for s in TERMINAL)
    assert not any(s.terminal for s in set(JobState) - TERMINAL)


def test_active_states_hold_gpus() -> None:
    assert {s for s in JobState if s.active} == {S.STARTING, S.RUNNING, S.PREEMPTED}


def test_every_state_can_reach_a_terminal_state() -> None:
    reach = set(TERMINAL)
    while True:
        more = {s for s in JobState if TRANSITIONS[s] & reach} - reach
        if not more:
            break
        reach |= more
    assert reach == set(JobState)


@pytest.mark.parametrize(("src", "dst"), ALLOWED, ids=lambda s: s.value)
def test_an_allowed_transition_passes(src: JobState, dst: JobState) -> None:
    check_transition(1, src, dst)


@pytest.mark.parametrize(("src", "dst"), ILLEGAL, ids=lambda s: s.value)
def test_an_illegal_transition_raises_an_error_naming_job_and_states(src: JobState,
                                                                    dst: JobState) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(42, src, dst)
    err = info.value
    assert isinstance(err, RotaError) and isinstance(err, Conflict)
    assert not isinstance(err, AssertionError)
    assert (err.job_id, err.src, err.dst) == (42, src.value, dst.value)
    message = str(err)
    assert "42" in message and src.value in message and dst.value in message
    assert message.index(src.value) < message.rindex(dst.value)


def test_an_illegal_transition_is_a_conflict_for_the_api() -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(7, S.COMPLETED, S.RUNNING)
    assert info.value.http_status == 409


def test_an_illegal_transition_without_a_job_id_still_explains_itself() -> None:
    with pytest.raises(IllegalTransition, match=r"cancelled.*pending"):
        check_transition(None, S.CANCELLED, S.PENDING)


def test_staying_in_the_same_state_is_not_a_transition() -> None:
    for s in JobState:
        with pytest.raises(IllegalTransition):
            check_transition(1, s, s)


@pytest.mark.parametrize(("src", "dst"), [
    (S.PENDING, S.STARTING), (S.STARTING, S.RUNNING), (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.PREEMPTED), (S.PREEMPTED, S.PENDING), (S.STARTING, S.PENDING),
    (S.RUNNING, S.PENDING), (S.HELD, S.PENDING), (S.PENDING, S.HELD),
])
def test_the_paths_of_a_jobs_life_are_allowed(src: JobState, dst: JobState) -> None:
    check_transition(1, src, dst)


@pytest.mark.parametrize(("src", "dst"), [
    (S.PENDING, S.RUNNING), (S.HELD, S.STARTING), (S.PENDING, S.COMPLETED),
    (S.PREEMPTED, S.RUNNING),
])
def test_shortcuts_are_not(src: JobState, dst: JobState) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(1, src, dst)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(JobState)), st.lists(st.sampled_from(list(JobState)), max_size=30))
def test_once_terminal_every_further_transition_raises(start: JobState,
                                                      moves: list[JobState]) -> None:
    state = start
    for dst in moves:
        was_terminal = state.terminal
        try:
            check_transition(1, state, dst)
        except IllegalTransition:
            assert dst not in TRANSITIONS[state]
            continue
        assert not was_terminal, f"left terminal state {state} for {dst}"
        assert dst in TRANSITIONS[state]
        state = dst
    if start.terminal:
        assert state is start
