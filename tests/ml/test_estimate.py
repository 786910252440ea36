"""GPU needs of ``--llm MODEL`` jobs: llm_config.json, sizes from names, the memory formula."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rota.errors import InvalidSpec
from rota.ml.estimate import (
    GIB,
    LlmTable,
    estimate_llm,
    estimate_memory,
    params_from_name,
)

GB = 10**9
EMPTY = LlmTable()


# --- params_from_name ----------------------------------------------------------------------

@pytest.mark.parametrize(("name", "params"), [
    ("qwen2.5-7b", 7e9),
    ("llama-3.1-70b-instruct", 70e9),
    ("mistral-7b-v0.1", 7e9),
    ("phi-2.7b", 2.7e9),
    ("gemma-2-2b", 2e9),
    ("Qwen/Qwen2.5-0.5B-Instruct", 0.5e9),
    ("mixtral-8x7b", 46.7e9),
    ("Mixtral-8x22B-Instruct-v0.1", 141e9),
    ("bert-base-110m", 110e6),
    ("bloom-7b1", 7.1e9),
    ("bloom-1b7", 1.7e9),
    ("Meta-Llama-3-8B-Instruct", 8e9),
    ("qwen2.5:14b", 14e9),
    ("deepseek-coder-6.7b-base", 6.7e9),
    ("t5_11b", 11e9),
    ("some-1t-model", 1e12),
    # common models whose names have no size: their published counts
    ("gpt2", 124e6),
    ("openai-community/gpt2-xl", 1.558e9),
    ("google-bert/bert-base-uncased", 110e6),
])
def test_params_from_name(name: str, params: float) -> None:
    got = params_from_name(name)
    assert got == pytest.approx(params)


def test_unknown_moe_uses_the_shared_weight_factor() -> None:
    assert params_from_name("toy-4x2b") == pytest.approx(4 * 2e9 * 0.83)


@pytest.mark.parametrize("name", ["qwen2.5", "llama-3.1", "gpt2-finetuned", "v0.1",
                                  "phi-3-mini-4k-instruct", "mistral-large", "", "128k"])
def test_versions_and_context_lengths_are_not_sizes(name: str) -> None:
    assert params_from_name(name) is None


# --- estimate_memory -----------------------------------------------------------------------

def test_7b_bf16_inference_is_about_17_gb() -> None:
    need = estimate_memory(7e9)
    assert 16 * GB <= need <= 17 * GB
    assert need == 16_800_000_000


def test_7b_full_fine_tune_is_about_134_gb() -> None:
    assert estimate_memory(7e9, mode="full") == pytest.approx(134.4 * GB)
    assert estimate_memory(7e9, mode="full", dtype="fp32") == estimate_memory(7e9, mode="full")


@pytest.mark.parametrize(("dtype", "mode", "expected"), [
    ("fp32", "inference", 7e9 * 4 * 1.2),
    ("fp16", "inference", 7e9 * 2 * 1.2),
    ("int8", "inference", 7e9 * 1 * 1.2),
    ("int4", "inference", 7e9 * 0.5 * 1.2),
    ("BF16", "lora", 7e9 * 2 * 1.3),
    ("bf16", "qlora", 7e9 * 0.5 * 1.3 + GIB),
])
def test_estimate_memory_formula(dtype: str, mode: str, expected: float) -> None:
    assert estimate_memory(7e9, dtype=dtype, mode=mode) == pytest.approx(expected, abs=1)


def test_modes_are_ordered_as_expected() -> None:
    q, i, lo, f = (estimate_memory(7e9, mode=m) for m in ("qlora", "inference", "lora", "full"))
    assert q < i < lo < f


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"params": 0}, "params"),
    ({"params": -1}, "params"),
    ({"params": float("nan")}, "params"),
    ({"params": 7e9, "dtype": "fp64"}, "dtype"),
    ({"params": 7e9, "mode": "pretrain"}, "mode"),
])
def test_estimate_memory_errors(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        estimate_memory(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


# --- estimate_llm --------------------------------------------------------------------------

def test_7b_on_a_24gb_gpu_takes_three_quarters() -> None:
    est = estimate_llm("qwen2.5-7b", table=EMPTY, gpu_memory=24 * GB)
    assert est.gpus == 0.75
    assert est.gpu_mem == 16_800_000_000
    assert est.source == "model name"
    # in GiB, as --gpu-mem reads it (16.8e9 bytes, GPUs of 24e9 bytes)
    assert est.explanation == ("qwen2.5-7b: 7.0B params x 2 B (bf16) x 1.2 (inference) "
                               "= 15.6 GiB -> 0.75 of a 22.4 GiB GPU")


def test_small_model_gets_at_least_a_quarter() -> None:
    est = estimate_llm("bert-base-110m", table=EMPTY, gpu_memory=80 * GIB)
    assert est.gpus == 0.25
    assert est.gpu_mem == estimate_memory(110e6)


def test_fraction_rounds_up_exactly_at_the_boundary() -> None:
    need = estimate_memory(7e9)
    assert estimate_llm("x-7b", table=EMPTY, gpu_memory=need * 2).gpus == 0.5
    assert estimate_llm("x-7b", table=EMPTY, gpu_memory=need * 2 - 1).gpus == 0.75
    assert estimate_llm("x-7b", table=EMPTY, gpu_memory=need).gpus == 1.0


def test_70b_inference_needs_several_80gb_gpus() -> None:
    est = estimate_llm("llama-3.1-70b-instruct", table=EMPTY, gpu_memory=80 * GIB)
    assert est.gpus == 3.0
    assert est.gpu_mem is None
    assert "3 GPUs" in est.explanation and "156.5 GiB" in est.explanation


def test_7b_full_fine_tune_spans_whole_gpus() -> None:
    est = estimate_llm("qwen2.5-7b", table=EMPTY, gpu_memory=80 * GIB, mode="full")
    assert est.gpus == 2.0 and est.gpu_mem is None
    assert "125.2 GiB" in est.explanation
    est = estimate_llm("qwen2.5-7b", table=EMPTY, gpu_memory=24 * GIB, mode="qlora")
    assert est.gpus == 0.25 and "qlora" in est.explanation


def test_table_entry_wins_case_insensitively() -> None:
    table = LlmTable.from_dict({"default_requirement": 1.0,
                                "models": {"Qwen2.5-7B-Inst": 0.5, "big-70b": 4}})
    est = estimate_llm("qwen2.5-7b-INST", table=table, gpu_memory=24 * GB)
    assert (est.gpus, est.gpu_mem, est.source) == (0.5, None, "llm_config.json")
    assert "llm_config.json" in est.explanation
    assert estimate_llm("big-70b", table=table, gpu_memory=80 * GB).gpus == 4.0
    # An org prefix still matches the bare name.
    assert table.lookup("Alibaba/qwen2.5-7b-inst") == 0.5


def test_unknown_size_uses_the_default_requirement() -> None:
    table = LlmTable.from_dict({"default_requirement": 1, "models": {}})
    est = estimate_llm("mystery-model", table=table, gpu_memory=24 * GB)
    assert (est.gpus, est.gpu_mem, est.source) == (1.0, None, "default_requirement")


def test_unknown_size_without_default_is_a_clear_error() -> None:
    with pytest.raises(InvalidSpec) as info:
        estimate_llm("mystery-model", table=EMPTY, gpu_memory=24 * GB)
    assert str(info.value) == ("cannot tell the size of model 'mystery-model': add it to "
                               "llm_config.json or pass --gpus")
    assert info.value.field == "llm"


@pytest.mark.parametrize(("model", "gpu_memory", "field"), [
    ("", 24 * GB, "llm"),
    ("  ", 24 * GB, "llm"),
    ("x-7b", 0, "gpu_memory"),
])
def test_estimate_llm_bad_arguments(model: str, gpu_memory: int, field: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        estimate_llm(model, table=EMPTY, gpu_memory=gpu_memory)
    assert info.value.field == field


# --- LlmTable.load -------------------------------------------------------------------------

def test_load_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "llm_config.json"
    path.write_text(json.dumps({"default_requirement": 1.0,
                                "models": {"qwen2.5-7b-inst": 1.0, "qwen2.5-3b-inst": 0.5}}))
    table = LlmTable.load(path)
    assert table.default_requirement == 1.0
    assert table.lookup("QWEN2.5-3B-INST") == 0.5
    assert table.lookup("nope") is None
    est = estimate_llm("qwen2.5-3b-inst", table=table, gpu_memory=24 * GB)
    assert str(path) in est.explanation


def test_missing_file_is_an_empty_table(tmp_path: Path) -> None:
    table = LlmTable.load(tmp_path / "absent.json")
    assert table.models == {} and table.default_requirement is None


def test_only_models_is_fine() -> None:
    assert LlmTable.from_dict({"models": {"a": 0.25}}).default_requirement is None
    assert LlmTable.from_dict({}).models == {}


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "not valid JSON: Expecting property name enclosed in double quotes at line 1"),
    ("[1, 2]", "expected a JSON object with 'models', got list"),
    ('{"model": {}}', "unknown key(s) ['model']"),
    ('{"models": [1]}', "'models' must be an object of name -> GPUs, got list"),
    ('{"models": {"a": "one"}}', "models.a: expected a number of GPUs, got 'one'"),
    ('{"models": {"a": true}}', "models.a: expected a number of GPUs, got True"),
    ('{"models": {"a": 0}}', "models.a: the number of GPUs must be positive, got 0"),
    ('{"models": {"a": 1.5}}', "models.a: 1.5 GPUs: more than one GPU must be a whole number"),
    ('{"models": {" ": 1}}', "models: empty model name"),
    ('{"default_requirement": "x"}', "default_requirement: expected a number of GPUs"),
])
def test_malformed_file_names_file_and_problem(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / "llm_config.json"
    path.write_text(content)
    with pytest.raises(InvalidSpec) as info:
        LlmTable.load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert why in str(info.value)
