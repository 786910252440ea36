"""The pure run-time predictor (rota.core.runtime) and the simulator's history of it."""

from __future__ import annotations

from rota.core.runtime import HISTORY, History, expected, predict


def test_the_history_predicts_the_p90_of_the_newest_runs_of_a_name() -> None:
    h = History()
    assert h.predicted("train") is None
    for s in range(1, 11):  # 1..10 s: p90 nearest rank = the 9th = 9
        h.completed("train", float(s))
    assert h.predicted("train") == 9.0 == predict([float(s) for s in range(1, 11)])
    for _ in range(HISTORY):  # 20 newer runs of 100 s push the old ones out
        h.completed("train", 100.0)
    assert h.predicted("train") == 100.0
    assert h.predicted("other") is None
    h.completed("", 5.0)  # no name: no history
    assert h.predicted("") is None


def test_a_time_limit_comes_before_a_prediction() -> None:
    assert expected(60.0, 9.0) == 60.0
    assert expected(None, 9.0) == 9.0
    assert expected(None, None) is None
