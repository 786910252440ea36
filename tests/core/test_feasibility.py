"""Whether a job can ever run on a machine (rota.core.feasibility): the words intake's
refusal and the scheduler's reason share."""

from __future__ import annotations

from rota.core.feasibility import never_runnable

G = 1 << 30
FOUR = {0: 24 * G, 1: 24 * G, 2: 24 * G, 3: 80 * G}


def test_jobs_that_fit_somewhere_are_runnable() -> None:
    assert never_runnable(0, None, None, {}) is None  # CPU only runs anywhere
    assert never_runnable(4000, None, None, FOUR) is None
    assert never_runnable(500, 80 * G, None, FOUR) is None
    assert never_runnable(2000, 20 * G, [1, 2], FOUR) is None


def test_too_many_gpus_says_how_many_exist() -> None:
    assert never_runnable(8000, None, None, FOUR) == \
        "needs 8 whole GPUs but only 4 GPUs exist"
    assert never_runnable(3000, None, [0, 1], FOUR) == \
        "needs 3 whole GPUs but only 2 allowed GPUs {0-1} exist"
    assert never_runnable(1000, None, None, {}) == \
        "needs 1 whole GPU but this machine has no GPUs"


def test_allowed_gpus_that_do_not_exist() -> None:
    assert never_runnable(1000, None, [7, 9], FOUR) == \
        "needs 1 whole GPU but none of its allowed GPUs {7,9} exist on this machine"


def test_more_memory_than_any_gpu_has() -> None:
    why = never_runnable(1000, 100 * G, None, FOUR)
    assert why is not None and why.startswith("needs 100") and "the largest of its GPUs has 80" \
        in why
    why = never_runnable(2000, 40 * G, None, FOUR)
    assert why is not None and "only 1 of its GPUs has" in why
