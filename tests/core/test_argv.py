"""Passing a job its GPUs: ``--cuda`` injection and ``CUDA_VISIBLE_DEVICES``."""

from __future__ import annotations

import pytest

from rota.core.argv import cuda_visible_devices, inject_cuda_arg


@pytest.mark.parametrize(("argv", "gpus", "expected"), [
    (["python", "t.py"], [0, 1], ["python", "t.py", "--cuda", "0,1"]),
    (["python", "t.py", "--lr", "1"], [3], ["python", "t.py", "--lr", "1", "--cuda", "3"]),
    (["python", "t.py", "--cuda", "7", "--lr", "1"], [2],
     ["python", "t.py", "--cuda", "2", "--lr", "1"]),
    (["python", "t.py", "--cuda=7"], [0, 1], ["python", "t.py", "--cuda=0,1"]),
    (["python", "t.py", "--cuda", "7", "--cuda=5"], [1],
     ["python", "t.py", "--cuda", "1", "--cuda=1"]),
    (["python", "t.py", "--cuda"], [4], ["python", "t.py", "--cuda", "4"]),
    (["python", "t.py", "--cuda", "--lr", "1"], [4],
     ["python", "t.py", "--cuda", "4", "--lr", "1"]),
    (["python", "t.py", "--", "x"], [1], ["python", "t.py", "--cuda", "1", "--", "x"]),
    (["python", "t.py", "--", "--cuda", "9"], [1],
     ["python", "t.py", "--cuda", "1", "--", "--cuda", "9"]),
    (["python", "t.py", "--cudax", "1"], [0], ["python", "t.py", "--cudax", "1", "--cuda", "0"]),
    (["--cuda"], [0], ["--cuda", "--cuda", "0"]),  # argv[0] is the program, never an option
])
def test_inject_cuda_arg(argv: list[str], gpus: list[int], expected: list[str]) -> None:
    before = list(argv)
    assert inject_cuda_arg(argv, gpus) == expected
    assert argv == before  # the input is not changed


def test_cpu_only_job_is_left_alone() -> None:
    argv = ["python", "t.py", "--cuda", "0"]
    out = inject_cuda_arg(argv, [])
    assert out == argv and out is not argv


def test_cuda_visible_devices_keeps_order() -> None:
    assert cuda_visible_devices([3, 1]) == "3,1"
    assert cuda_visible_devices([0]) == "0"
    assert cuda_visible_devices([]) == ""


def test_negative_ids_are_a_bug() -> None:
    with pytest.raises(ValueError, match="negative"):
        cuda_visible_devices([-1])
    with pytest.raises(ValueError, match="negative"):
        inject_cuda_arg(["t"], [0, -1])


# --- {checkpoint} ---------------------------------------------------------------------------
from rota.core.argv import substitute_checkpoint  # noqa: E402


@pytest.mark.parametrize(("argv", "path", "want"), [
    (["python", "train.py", "--resume", "{checkpoint}"], "/c/5.pt",
     ["python", "train.py", "--resume", "/c/5.pt"]),
    (["python", "train.py", "--resume={checkpoint}", "--lr", "3"], "/c/5.pt",
     ["python", "train.py", "--resume=/c/5.pt", "--lr", "3"]),
    (["python", "train.py", "--resume", "{checkpoint}", "--lr", "3"], None,
     ["python", "train.py", "--lr", "3"]),
    (["python", "train.py", "--resume={checkpoint}", "--lr", "3"], None,
     ["python", "train.py", "--lr", "3"]),
    (["python", "train.py", "{checkpoint}"], None, ["python", "train.py"]),  # positional
    (["python", "train.py", "--lr=3", "{checkpoint}"], None, ["python", "train.py", "--lr=3"]),
    (["python", "train.py", "--lr", "3"], None, ["python", "train.py", "--lr", "3"]),
    (["python", "train.py", "--lr", "3"], "/c/5.pt", ["python", "train.py", "--lr", "3"]),
])
def test_checkpoint_placeholder(argv: list[str], path: str | None, want: list[str]) -> None:
    assert substitute_checkpoint(argv, path) == want
    assert substitute_checkpoint(argv, path) is not argv
