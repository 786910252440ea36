"""Each harness's argv and its reading of real harness output (vendored: data/SOURCES.md)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from eval_testing import HELM_GROUPS, LM_EVAL_RESULTS, config

from rota.eval.harnesses import HARNESSES, EvalFailed, Target, get
from rota.eval.harnesses.base import number, snake
from rota.eval.harnesses.helm import summary_metrics
from rota.eval.run import reason

MATH = ["math_perturbed_full", "math_rephrased_full"]


def test_every_kind_the_config_allows_has_a_harness() -> None:
    from rota.eval.config import HARNESSES as KINDS

    assert set(HARNESSES) == set(KINDS)
    with pytest.raises(EvalFailed, match="no harness 'nope'"):
        get("nope")


def test_lm_eval_argv_carries_the_limits_adapter_and_task_folder(tmp_path: Path) -> None:
    cfg = config(harness={"kind": "lm-eval", "tasks": ["arc_easy", "hellaswag"],
                          "task_dir": "/tasks", "args": {"device": "cuda:0"},
                          "limits": {"batch_size": 4, "num_fewshot": 5, "max_instances": 100,
                                     "dtype": "bfloat16", "max_length": 2048}})
    [argv] = get("lm-eval").steps(cfg, Target("/m/base", "/m/lora", tmp_path))
    assert argv[:4] == [sys.executable, "-m", "lm_eval", "run"]
    opts = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert opts == {"--model": "hf", "--tasks": "arc_easy,hellaswag", "--batch_size": "4",
                    "--model_args": "pretrained=/m/base,dtype=bfloat16,max_length=2048,"
                                    "peft=/m/lora",
                    "--output_path": str(tmp_path), "--num_fewshot": "5", "--limit": "100",
                    "--include_path": "/tasks", "--device": "cuda:0"}
    with pytest.raises(EvalFailed, match="comma"):
        get("lm-eval").steps(cfg, Target("/m/a,b", None, tmp_path))


def test_lm_eval_results_are_read_with_readable_names(tmp_path: Path) -> None:
    shutil.copytree(LM_EVAL_RESULTS, tmp_path, dirs_exist_ok=True)
    got = get("lm-eval").parse(config(harness={"kind": "lm-eval", "tasks": MATH}), tmp_path)
    assert got == {"math_perturbed_full/exact_match": 0.0,
                   "math_perturbed_full/exact_match_stderr": 0.0,
                   "math_rephrased_full/exact_match": 0.0004,
                   "math_rephrased_full/exact_match_stderr": 0.0002828144211304471}


def test_lm_eval_filters_name_the_metric_and_strings_are_skipped(tmp_path: Path) -> None:
    [src] = LM_EVAL_RESULTS.glob("*/results_*.json")
    data = json.loads(src.read_text())
    data["results"]["math_perturbed_full"].update(
        {"exact_match,strict-match": 0.5, "exact_match_stderr,strict-match": "N/A"})
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / src.name).write_text(json.dumps(data))
    got = get("lm-eval").parse(config(harness={"kind": "lm-eval", "tasks": MATH}), tmp_path)
    assert got["math_perturbed_full/exact_match/strict-match"] == 0.5
    assert not any("N/A" in k or k.endswith("/alias") for k in got)
    assert "math_perturbed_full/exact_match_stderr/strict-match" not in got


def test_lm_eval_without_a_results_file_or_a_task_fails(tmp_path: Path) -> None:
    cfg = config(harness={"kind": "lm-eval", "tasks": [*MATH, "arc_easy"]})
    with pytest.raises(EvalFailed, match=r"no results file \(results_\*\.json\)"):
        get("lm-eval").parse(cfg, tmp_path)
    shutil.copytree(LM_EVAL_RESULTS, tmp_path, dirs_exist_ok=True)
    with pytest.raises(EvalFailed, match="no results for task arc_easy"):
        get("lm-eval").parse(cfg, tmp_path)


def test_helm_runs_then_summarizes_the_config_suite(tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    cfg = config(name="rel-1", harness={"kind": "helm", "limits": {"max_instances": 10},
                                        "tasks": ["mmlu:subject=anatomy", "boolq",
                                                  "narrative_qa:model=openai/gpt2"]})
    run, summarize = get("helm").steps(cfg, Target(str(model), None, tmp_path / "out"))
    assert Path(run[0]).name == "helm-run" and Path(summarize[0]).name == "helm-summarize"
    entries = run[run.index("--run-entries") + 1:run.index("--suite")]
    assert entries == ["mmlu:subject=anatomy,model=huggingface/my-model",
                       "boolq:model=huggingface/my-model", "narrative_qa:model=openai/gpt2"]
    assert run[run.index("--enable-local-huggingface-models") + 1] == str(model)
    assert run[run.index("--max-eval-instances") + 1] == "10"
    assert summarize[1:] == ["--suite", "rel-1", "--output-path", str(tmp_path / "out")]
    hub = get("helm").steps(cfg, Target("org/name", None, tmp_path))[0]
    assert hub[hub.index("--enable-huggingface-models") + 1] == "org/name"
    with pytest.raises(EvalFailed, match="adapter"):
        get("helm").steps(cfg, Target(str(model), "/lora", tmp_path))


def test_helm_takes_the_few_shot_count_as_each_run_entrys_max_train_instances(
        tmp_path: Path) -> None:
    cfg = config(harness={"kind": "helm", "limits": {"num_fewshot": 3},
                          "tasks": ["mmlu:subject=anatomy", "boolq:model=openai/gpt2"]})
    run = get("helm").steps(cfg, Target("org/name", None, tmp_path))[0]
    assert run[run.index("--run-entries") + 1:run.index("--suite")] == [
        "mmlu:subject=anatomy,model=org/name,max_train_instances=3",
        "boolq:model=openai/gpt2,max_train_instances=3"]
    assert "--max-eval-instances" not in run


def test_helm_summary_tables_of_a_real_run_become_metrics() -> None:
    got = summary_metrics(HELM_GROUPS)
    # mmlu.json: one table titled "subject: philosophy"; narrative_qa.json: untitled
    assert got["subject_philosophy/em"] == pytest.approx(1 / 9)
    assert got["subject_philosophy/em_robustness"] == pytest.approx(1 / 9)
    assert got["subject_philosophy/num_eval"] == 9.0
    assert got["subject_philosophy/num_prompt_tokens"] == pytest.approx(350.4444444)
    assert got["narrative_qa/f1"] == pytest.approx(0.17424242424242425)
    assert "subject_philosophy/ece_10_bin" not in got  # an empty cell is no metric
    assert len(got) == 18  # every numeric cell (9 a table), nothing else


def test_helm_tables_without_numbers_give_no_metrics(tmp_path: Path) -> None:
    for path in HELM_GROUPS.glob("*.json"):
        tables = json.loads(path.read_text())
        for t in tables:
            t["rows"] = []
        (tmp_path / path.name).write_text(json.dumps(tables))
    assert summary_metrics(tmp_path) == {}
    with pytest.raises(EvalFailed, match="no summary tables"):
        summary_metrics(tmp_path / "missing")


def test_helm_tables_of_several_models_name_the_row(tmp_path: Path) -> None:
    tables = json.loads((HELM_GROUPS / "mmlu.json").read_text())
    tables[0]["rows"].append([{"value": "Other (7B)"}, {"value": 0.5}])
    (tmp_path / "mmlu.json").write_text(json.dumps(tables))
    got = summary_metrics(tmp_path)
    assert got["subject_philosophy/other_7b/em"] == 0.5
    assert got["subject_philosophy/gpt_2_1_5b/em"] == pytest.approx(1 / 9)


def test_heldout_runs_the_template_once_per_file(tmp_path: Path) -> None:
    cfg = config(harness={"kind": "heldout", "tasks": ["/d/a.jsonl", "/e/b.jsonl"],
                          "limits": {"batch_size": 2, "max_length": 256}})
    steps = get("heldout").steps(cfg, Target("/m", "/lora", tmp_path))
    assert [s[s.index("--out") + 1] for s in steps] == [str(tmp_path / "a"),
                                                       str(tmp_path / "b")]
    assert steps[0][3] == "rota.templates.eval_heldout"
    assert steps[0][steps[0].index("--adapter") + 1] == "/lora"
    assert steps[1][steps[1].index("--max-len") + 1] == "256"
    assert "--dtype" not in steps[0] and "--max-examples" not in steps[0]  # auto, all
    limited = config(harness={"kind": "heldout", "tasks": ["/d/a.jsonl"],
                              "limits": {"dtype": "float16", "max_instances": 50}})
    [argv] = get("heldout").steps(limited, Target("/m", None, tmp_path))
    assert argv[argv.index("--dtype") + 1] == "float16"
    assert argv[argv.index("--max-examples") + 1] == "50"
    with pytest.raises(EvalFailed, match="no results for a"):
        get("heldout").parse(cfg, tmp_path)
    same = config(harness={"kind": "heldout", "tasks": ["/d/a.jsonl", "/e/a.jsonl"]})
    with pytest.raises(EvalFailed, match="two data files are named a"):
        get("heldout").steps(same, Target("/m", None, tmp_path))


def test_heldout_counts_the_examples_it_scored_and_those_it_left_out(tmp_path: Path) -> None:
    cfg = config(harness={"kind": "heldout", "tasks": ["/d/a.jsonl"]})
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(
        {"eval_loss": 2.5, "perplexity": 12.18, "eval_tokens": 300, "examples": 7,
         "left_out": 3, "dtype": "float32", "seconds": 1.5}))
    assert get("heldout").parse(cfg, tmp_path) == {
        "a/eval_loss": 2.5, "a/perplexity": 12.18, "a/eval_tokens": 300, "a/examples": 7,
        "a/left_out": 3}


def test_names_and_numbers() -> None:
    assert snake("MMLU - EM (Robustness)") == "mmlu_em_robustness"
    assert snake("# prompt tokens") == "num_prompt_tokens"
    assert [number(v) for v in (1, 0.5, True, "1", float("nan"), None)] == \
        [1.0, 0.5, None, None, None, None]


def test_the_reason_of_a_failed_program_is_its_last_exception_line() -> None:
    tail = (b"Traceback (most recent call last):\n  File \"x\", line 1\n"
            b"ValueError: Tasks not found: nope\r\n2026 INFO done\n")
    assert reason(tail) == "ValueError: Tasks not found: nope"
    assert reason(b"just this\n\n") == "just this"
    assert reason(b"") == "it printed nothing"
