"""Whether a job can ever run on a machine (rota.core.feasibility): the words intake's
refusal and the scheduler's reason share."""

from __future__ import annotations

from rota.core.feasibility import never_runnable, never_typed, type_scope, typed_gpus

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


# --- a GPU type (rota.core.feasibility.never_typed, type_scope) -----------------------------

NAMES = {0: "NVIDIA A100-SXM4-80GB", 1: "NVIDIA A100-SXM4-80GB", 2: "Tesla T4",
         3: "NVIDIA H100 80GB HBM3"}


def test_a_type_is_a_part_of_the_name_in_any_case() -> None:
    assert typed_gpus("A100", NAMES) == {0, 1}
    assert typed_gpus("a100-sxm4", NAMES) == {0, 1}
    assert typed_gpus("t4", NAMES) == {2}
    assert typed_gpus("80GB", NAMES) == {0, 1, 3}
    assert typed_gpus("V100", NAMES) == frozenset()
    assert type_scope("A100", [1, 2], NAMES) == {1}
    assert type_scope("H100", None, NAMES) == {3}


def test_a_type_that_fits_is_fine() -> None:
    assert never_typed("A100", 2000, None, NAMES) is None
    assert never_typed("A100", 500, [1, 2], NAMES) is None
    assert never_typed("t4", 1000, None, NAMES) is None


def test_no_gpu_of_the_type_names_the_gpus_there_are() -> None:
    assert never_typed("V100", 1000, None, NAMES) == (
        "no GPU here is of type V100 (a part of the GPU's name, any case): this machine has "
        "2 x NVIDIA A100-SXM4-80GB, 1 x Tesla T4, 1 x NVIDIA H100 80GB HBM3")
    assert never_typed("A100", 1000, None, {}) == (
        "no GPU here is of type A100 (a part of the GPU's name, any case): this machine has "
        "no GPUs")


def test_the_type_among_the_allowed_gpus() -> None:
    assert never_typed("A100", 1000, [2, 3], NAMES) == (
        "none of its allowed GPUs {2-3} is of type A100: GPUs {0-1} are "
        "(2 x NVIDIA A100-SXM4-80GB)")
    assert never_typed("A100", 2000, [1, 2, 3], NAMES) == (
        "needs 2 whole GPUs of type A100 but only 1 of its allowed GPUs is of that type (GPU 1)")
    assert never_typed("H100", 2000, None, NAMES) == (
        "needs 2 whole GPUs of type H100 but only 1 here is of that type (GPU 3)")
