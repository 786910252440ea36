"""Parameter sweeps: parsing ``key=values`` and expanding a spec over the grid."""

from __future__ import annotations

import pytest

from rota.core.spec import JobSpec
from rota.core.sweep import MAX_COMBINATIONS, expand_sweep, parse_sweep_arg
from rota.errors import InvalidSpec


def a_job(*command: str, **fields: object) -> JobSpec:
    return JobSpec.model_validate({"command": list(command), **fields})


# --- parse_sweep_arg -----------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("lr=1e-3,3e-4", ("lr", ["1e-3", "3e-4"])),
    ("lr=1e-3", ("lr", ["1e-3"])),
    (" lr = 1e-3 , 3e-4 ", ("lr", ["1e-3", "3e-4"])),
    ("seed=1..5", ("seed", ["1", "2", "3", "4", "5"])),
    ("seed=0..10..2", ("seed", ["0", "2", "4", "6", "8", "10"])),
    ("seed=0..9..4", ("seed", ["0", "4", "8"])),
    ("seed=-2..1", ("seed", ["-2", "-1", "0", "1"])),
    ("seed=3..3", ("seed", ["3"])),
    ("seed=1..3,10", ("seed", ["1", "2", "3", "10"])),
    ("model=gpt2,../ckpt/x", ("model", ["gpt2", "../ckpt/x"])),
    ("warmup-steps=0,100", ("warmup-steps", ["0", "100"])),
    ("opt.lr=0.1", ("opt.lr", ["0.1"])),
    ("flag=a=b", ("flag", ["a=b"])),
])
def test_parse_sweep_arg(text: str, expected: tuple[str, list[str]]) -> None:
    assert parse_sweep_arg(text) == expected


@pytest.mark.parametrize(("text", "why"), [
    ("lr", "expected key=values"),
    ("=1,2", "'' is not a valid key"),
    ("1lr=1", "'1lr' is not a valid key"),
    ("l r=1", "'l r' is not a valid key"),
    ("lr=", "empty value"),
    ("lr=1,,2", "empty value"),
    ("lr=1,", "empty value"),
    ("seed=5..1", "range '5..1' runs backwards"),
    ("seed=0..10..0", "the step of '0..10..0' must be a positive whole number"),
    ("seed=0..10..-2", "the step of '0..10..-2' must be a positive whole number"),
    ("lr=1e-3..1e-1", "'1e-3..1e-1': only whole-number ranges"),
    ("lr=0.1..0.5", "only whole-number ranges"),
    ("seed=1..100000", "has more than 10,000 values"),
    ("seed=1,1", "value '1' appears twice"),
    ("seed=1..3,2", "value '2' appears twice"),
])
def test_parse_sweep_arg_errors_name_the_text(text: str, why: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_sweep_arg(text)
    assert str(info.value).startswith(f"sweep {text!r}: ")
    assert why in str(info.value)
    assert info.value.field == "sweep"


# --- expand_sweep --------------------------------------------------------------------------

def test_cartesian_product_in_key_order_with_placeholders() -> None:
    spec = a_job("python", "train.py", "--lr", "{lr}", "--out", "runs/{lr}-{seed}",
                 name="train", gpus=0.5)
    jobs = expand_sweep(spec, [("lr", ["1e-3", "3e-4"]), ("seed", ["1", "2"])])
    assert [j.name for j in jobs] == ["train[lr=1e-3,seed=1]", "train[lr=1e-3,seed=2]",
                                      "train[lr=3e-4,seed=1]", "train[lr=3e-4,seed=2]"]
    assert jobs[1].command == ["python", "train.py", "--lr", "1e-3", "--out", "runs/1e-3-2"]
    assert all(j.gpus == 0.5 for j in jobs)
    assert len({j.content_hash() for j in jobs}) == 4


def test_unused_key_is_appended_as_an_option() -> None:
    spec = a_job("python", "train.py", "--lr", "{lr}", name="t")
    (job,) = expand_sweep(spec, [("lr", ["0.1"]), ("seed", ["7"])])
    assert job.command == ["python", "train.py", "--lr", "0.1", "--seed", "7"]
    assert job.name == "t[lr=0.1,seed=7]"


def test_name_defaults_to_the_script_the_job_runs() -> None:
    spec = a_job("python", "./scripts/train.py", "--lr", "{lr}", "--epochs", "30")
    jobs = expand_sweep(spec, [("lr", ["1e-3"]), ("seed", ["1", "2"])])
    assert [j.name for j in jobs] == ["train[lr=1e-3,seed=1]", "train[lr=1e-3,seed=2]"]


@pytest.mark.parametrize(("command", "shell", "base"), [
    (["python", "-m", "pkg.evaluate", "--x"], False, "evaluate"),
    (["torchrun", "--nproc_per_node=2", "ft.py"], False, "ft"),
    (["accelerate", "launch", "--config_file", "c.yaml", "t.py"], False, "t"),
    (["bash", "jobs/run.sh"], False, "run"),
    (["echo", "lr={lr}"], False, "echo"),
    (["python3.11 train.py --lr 3 | tee out.txt"], True, "train"),
])
def test_default_base_names(command: list[str], shell: bool, base: str) -> None:
    (job,) = expand_sweep(a_job(*command, shell=shell), [("seed", ["1"])])
    assert job.name == f"{base}[seed=1]"


def test_braces_that_are_not_placeholders_are_left_alone() -> None:
    spec = a_job("python", "t.py", '--cfg={"lr": {lr}}', "{other}")
    (job,) = expand_sweep(spec, [("lr", ["0.1"])])
    assert job.command == ["python", "t.py", '--cfg={"lr": 0.1}', "{other}"]


def test_a_value_containing_a_placeholder_is_not_substituted_again() -> None:
    spec = a_job("run", "{a}", "{b}")
    (job,) = expand_sweep(spec, [("a", ["{b}"]), ("b", ["x"])])
    assert job.command == ["run", "{b}", "x"]


def test_shell_job_values_are_shell_quoted() -> None:
    spec = a_job("python t.py --msg {msg}", shell=True)
    (job,) = expand_sweep(spec, [("msg", ["a; rm -rf /"]), ("seed", ["$(id)"])])
    assert job.command == ["python t.py --msg 'a; rm -rf /' --seed '$(id)'"]
    assert job.shell


def test_other_fields_are_kept() -> None:
    spec = a_job("t", "{x}", priority=3, allowed_gpus="0-1", env={"A": "1"}, tags=["s"])
    (job,) = expand_sweep(spec, [("x", ["1"])])
    assert (job.priority, job.allowed_gpus, job.env, job.tags) == (3, [0, 1], {"A": "1"}, ["s"])


def test_empty_grid_gives_the_spec_itself() -> None:
    spec = a_job("t")
    assert expand_sweep(spec, []) == [spec]


def test_long_names_are_cut_to_the_spec_limit_keeping_the_values() -> None:
    spec = a_job("t", name="n" * 200)
    (job,) = expand_sweep(spec, [("seed", ["1"])])
    assert job.name is not None and len(job.name) == 200
    assert job.name.endswith("[seed=1]")


def test_exactly_the_limit_is_allowed() -> None:
    spec = a_job("t", name="t")
    jobs = expand_sweep(spec, [("a", [str(i) for i in range(100)]),
                               ("b", [str(i) for i in range(100)])])
    assert len(jobs) == MAX_COMBINATIONS


@pytest.mark.parametrize(("grid", "why"), [
    ([("a", ["1"]), ("a", ["2"])], "key 'a' is given twice"),
    ([("a", [])], "key 'a' has no values"),
    ([("a", ["x\x00"])], "a value of 'a' contains a NUL byte"),
    ([("a", [str(i) for i in range(101)]), ("b", [str(i) for i in range(100)])],
     "101 x 100 = 10,100 combinations, more than the limit of 10,000"),
])
def test_expand_sweep_errors(grid: list[tuple[str, list[str]]], why: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        expand_sweep(a_job("t"), grid)
    assert why in str(info.value)
    assert info.value.field == "sweep"
