"""A pipeline file read by rota.pipeline.config: a Gradients config.yaml accepted as its
users wrote it, Rota's own form, and every bad field named by its path and line; the
pure parts of a round (its time, its back-off, its verdict, its jobs)."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest
import yaml

from rota.eval.config import ConfigErrors
from rota.eval.config import load_text as load_eval
from rota.pipeline import steps, timing
from rota.pipeline.config import OnFailure, RunIntervals, load_text, resolve_paths
from rota.server.schedules.pipelines import verdict

#: a Gradients Scheduler config.yaml (data/gradients-config.yaml) laid out as its example
#: file is: several tasks, one disabled, one without `enabled` (Gradients skips it too),
#: underscores in numbers, optional keys commented out, Hugging Face dataset names
GRADIENTS = (Path(__file__).parent / "data" / "gradients-config.yaml").read_text()


def test_a_gradients_config_yaml_is_accepted_unchanged() -> None:
    got = {c.name: c for c in load_text(GRADIENTS, where="config.yaml")}
    assert list(got) == ["qwen_instruct", "llama_chat", "fixed_sets", "someday"]
    q = got["qwen_instruct"]
    assert (q.format, q.enabled, q.train.where, q.wandb) == ("gradients", True, "gradients",
                                                             True)
    assert q.samples_per_training == 150_000 and q.datasets[0].max_rows == 50_000
    assert q.datasets[1].field_input == "context" and q.datasets[1].max_rows is None
    assert (q.run_intervals.max_days, q.run_intervals.min_hours) == (1, 6)
    assert q.tokenizer_id is None and q.hours_to_complete == 6
    assert q.upload is not None and q.upload.bucket is None  # S3_BUCKET_NAME, as Gradients
    chat = got["llama_chat"]
    assert (chat.enabled, chat.task_type, chat.datasets[0].chat_column) == (
        False, "Chat", "messages")
    assert chat.hours_to_complete == 8 and chat.final_test_size == 0.05  # Gradients' defaults
    assert got["fixed_sets"].task_type == "InstructTextWithFixedDatasets"
    assert got["someday"].enabled is False  # Gradients runs only `enabled: true`
    # the same data config -> the same cache; the seed or the held-out size -> another
    assert q.data_hash() == next(iter(load_text(GRADIENTS))).data_hash()
    other = load_text(GRADIENTS.replace("random_seed: 42", "random_seed: 7"))[0]
    assert other.data_hash() != q.data_hash()


def test_a_bad_gradients_task_is_named_by_task_field_and_line() -> None:
    bad = GRADIENTS.replace("field_output: response", "field_outptu: response") \
        .replace("final_test_size: 0.05", "final_test_size: 1.5") \
        .replace("task_type: Chat", "task_type: Conversation")
    with pytest.raises(ConfigErrors) as got:
        load_text(bad, where="config.yaml")
    assert got.value.problems == [
        "config.yaml:19: qwen_instruct.datasets.1.field_outptu: unknown key: did you mean "
        "field_output? the keys here are chat_assistant_reference, chat_column, "
        "chat_content_field, chat_role_field, chat_user_reference, field_input, "
        "field_instruction, field_output, max_rows, name",
        "config.yaml:25: qwen_instruct.final_test_size: Input should be less than 1",
        "config.yaml:33: llama_chat.task_type: Input should be 'InstructText', 'Chat' or "
        "'InstructTextWithFixedDatasets'",
    ]


def test_an_instruct_task_names_the_column_mapping_it_lacks() -> None:
    text = "t:\n  enabled: true\n  model_repo: m\n  datasets:\n    - name: d\n      " \
           "field_instruction: q\n"
    with pytest.raises(ConfigErrors) as got:
        load_text(text, where="c.yaml")
    assert got.value.problems == ["c.yaml:2: t: InstructText maps each dataset's columns: "
                                  "set datasets.0.field_output"]


ROTA = textwrap.dedent("""\
    version: 1
    name: tiny-refresh
    model_repo: ./models/base
    datasets:
      - {name: ./data/qa.jsonl, field_instruction: question, field_output: answer}
      - {name: s3://corpus/qa/, field_instruction: q, field_output: a}
      - {name: yahma/alpaca-cleaned, field_instruction: instruction, field_output: output}
    samples_per_training: 100
    final_test_size: 0.2
    run_intervals: {min_hours: 2, max_hours: 4}
    train: {where: local, steps: 20, gpus: 0, device: cpu, lora_r: 4}
    merge: {gpus: 0, publish: "./published/{name}-{round}"}
    evaluate: {gpus: 0, margin: 0.05}
    on_failure: {backoff: 10m, max_backoff: 2h}
    """)


def test_rotas_form_and_its_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    [cfg] = load_text(ROTA, where="p.yaml")
    assert (cfg.format, cfg.enabled, cfg.train.where, cfg.upload) == ("rota", True, "local",
                                                                     None)
    assert (cfg.on_failure.backoff, cfg.on_failure.max_backoff) == (600, 7200)
    cfg = resolve_paths(cfg, str(tmp_path))
    assert [d.name for d in cfg.datasets] == [str(tmp_path / "data/qa.jsonl"),
                                              "s3://corpus/qa/", "yahma/alpaca-cleaned"]
    assert cfg.model_repo == str(tmp_path / "models/base")
    assert cfg.merge.publish == str(tmp_path / "published/{name}-{round}")
    assert steps.publish_target(cfg, 3) == str(tmp_path / "published/tiny-refresh-3")


@pytest.mark.parametrize(("change", "problem"), [
    ("version: 1", "p.yaml:1: version: this Rota reads pipeline configs of version 1, not 2"),
    ("train: {where: local,", "p.yaml:1: upload: train.where is gradients, which reads "
                              "each round's data by URL: add an upload section"),
    ("name: tiny-refresh", "p.yaml:2: name: String should match pattern"),
    ("merge: {gpus: 0,", "p.yaml:12: merge.publish: 'hf:just-a-name': a Hugging Face repo "
                         "is hf:OWNER/NAME"),
    ("on_failure: {backoff: 10m,", "p.yaml:14: on_failure.backoff: cannot read 'soon' as a "
                                   "duration"),
])
def test_rotas_form_names_each_bad_field(change: str, problem: str) -> None:
    bad = {"version: 1": "version: 2",
           "train: {where: local,": "train: {where: gradients,",
           "name: tiny-refresh": "name: 'tiny refresh'",
           "merge: {gpus: 0,": "merge: {gpus: 0, publish: 'hf:just-a-name'}\nx_merge: {",
           "on_failure: {backoff: 10m,": "on_failure: {backoff: soon,"}[change]
    text = ROTA.replace(change, bad)
    with pytest.raises(ConfigErrors) as got:
        load_text(text, where="p.yaml")
    assert any(p.startswith(problem) for p in got.value.problems), got.value.problems


def test_not_a_mapping_and_not_yaml_are_said_so() -> None:
    with pytest.raises(ConfigErrors, match="a pipeline config is a mapping"):
        load_text("- a\n- b\n")
    with pytest.raises(ConfigErrors, match=r"c\.yaml:2: not valid YAML"):
        load_text("a: [\n", where="c.yaml")
    with pytest.raises(ConfigErrors, match="t: a Gradients task is a mapping"):
        load_text("t: 3\n")


def test_the_next_round_is_drawn_in_the_window_and_the_same_seed_draws_the_same() -> None:
    iv = RunIntervals(min_days=1, max_days=3, min_hours=2, max_hours=5)
    seen = set()
    for seed in range(300):
        at, why = timing.next_run(1000.0, iv, random.Random(seed))
        wait = at - 1000.0
        assert 86400 + 2 * 3600 <= wait <= 3 * 86400 + 5 * 3600
        assert wait % 3600 == 0  # whole days and hours, as Gradients draws them
        seen.add(wait)
        assert "run_intervals (1-3d + 2-5h)" in why
    assert len(seen) == 3 * 4  # every combination of days and hours comes up
    assert timing.next_run(5.0, iv, random.Random("x")) == \
        timing.next_run(5.0, iv, random.Random("x"))
    # max below min: min (as Gradients' max(min, max))
    at, _ = timing.next_run(0.0, RunIntervals(min_days=2, max_days=1), random.Random(1))
    assert at == 2 * 86400


def test_failures_back_off_doubling_up_to_the_cap() -> None:
    policy = OnFailure(backoff=600, max_backoff=3600)
    waits = [timing.retry_at(0.0, n, policy)[0] for n in range(1, 6)]
    assert waits == [600, 1200, 2400, 3600, 3600]
    assert "after 3 failed rounds in a row: 40min" in timing.retry_at(0.0, 3, policy)[1]


def test_the_verdict_keeps_a_model_only_when_it_is_not_worse_by_more_than_the_margin(
        ) -> None:
    assert verdict(1.00, 1.02, higher_is_better=False, margin=0.0, name="loss").accepted
    assert verdict(1.04, 1.00, higher_is_better=False, margin=0.05, name="loss").accepted
    v = verdict(1.10, 1.00, higher_is_better=False, margin=0.05, name="loss")
    assert not v.accepted and "loss 1.1 against the base's 1 (margin 0.05)" in v.reason
    assert not verdict(0.70, 0.80, higher_is_better=True, margin=0.01, name="acc").accepted
    assert verdict(0.85, 0.80, higher_is_better=True, margin=0.0, name="acc").accepted
    assert verdict(3.0, None, higher_is_better=False, margin=0.0, name="loss").accepted


def _round(text: str, tmp_path: Path, task: int = 0) -> steps.Round:
    cfg = resolve_paths(load_text(text)[task], str(tmp_path))
    return steps.Round(cfg, 2, str(tmp_path / "round-2"), str(tmp_path / "data"), "/py")


def test_each_step_is_an_ordinary_job_in_the_rounds_folder(tmp_path: Path) -> None:
    r = _round(ROTA, tmp_path)
    prep = steps.prep_job(r)
    assert prep["command"][:4] == ["/py", "-u", "-m", "rota.pipeline.prep"]
    assert (prep["cwd"], prep["gpus"], prep["secrets"]) == (r.folder, 0, {})
    assert prep["tags"] == ["pipeline", "pipeline:tiny-refresh", "round:tiny-refresh:2"]
    train = steps.train_job(r, "/models/base", {"files": {"train": "/r/train.jsonl"}})
    argv = train["command"]
    assert argv[argv.index("--model") + 1] == "/models/base"
    assert argv[argv.index("--data") + 1] == "/r/train.jsonl"
    assert argv[argv.index("--lora-r") + 1] == "4" and argv[-2:] == ["--resume",
                                                                    "{checkpoint}"]
    assert (train["name"], train["gpus"], train["cwd"]) == ("tiny-refresh-r2-train", 0,
                                                            r.folder)
    merge = steps.merge_job(r, "/models/base", r.path("train", "adapter"))
    assert merge["command"][merge["command"].index("--publish") + 1] == \
        str(tmp_path / "published/tiny-refresh-2")
    assert "--device" in merge["command"] and merge["retries"] == 2
    text = steps.evaluation_text(r.config, "/m", "/data/heldout.jsonl", "candidate")
    ev = load_eval(text)
    assert (ev.name, ev.model.uri, ev.harness.kind, ev.harness.tasks, ev.compute.gpus) == (
        "tiny-refresh-candidate", "/m", "heldout", ["/data/heldout.jsonl"], 0)


def test_a_gradients_round_takes_its_settings_from_the_users_secrets(
        tmp_path: Path) -> None:
    r = _round(GRADIENTS, tmp_path)
    prep = steps.prep_job(r)
    assert prep["secrets"] == {k: k for k in (
        "S3_COMPATIBLE_ACCESS_KEY", "S3_COMPATIBLE_SECRET_KEY", "S3_BUCKET_NAME",
        "S3_COMPATIBLE_ENDPOINT")}
    train = steps.train_job(r, "Qwen/Qwen2.5-0.5B", {})
    argv = train["command"]
    assert argv[3] == "rota.pipeline.gradients_step" and train["retries"] == 0
    assert argv[argv.index("--task-type") + 1] == "InstructText"
    assert argv[argv.index("--hours-to-complete") + 1] == "6"
    assert train["secrets"] == {"GRADIENTS_API_KEY": "GRADIENTS_API_KEY"}
    merge = steps.merge_job(r, "Qwen/Qwen2.5-0.5B", "miner/lora")
    assert merge["command"][merge["command"].index("--publish") + 1] == \
        "hf:{hf_username}/qwen_instruct-round-2"
    assert "--public" not in merge["command"]  # private unless asked
    assert merge["secrets"] == {"HF_TOKEN": "HF_TOKEN", "HF_USERNAME": "HF_USERNAME"}
    assert yaml.safe_load(prep["env"][steps.CONFIG_ENV])["name"] == "qwen_instruct"


def test_any_evaluation_config_judges_the_merged_model(tmp_path: Path) -> None:
    """``evaluate.config``: the file's harness and limits, its model replaced by the merged
    one (its adapter, if any, dropped with it: the merge holds it), named per round."""
    (tmp_path / "eval.yaml").write_text(textwrap.dedent("""\
        version: 1
        name: suite
        model: {mlflow: {tracking_uri: http://m:5000, run_id: r1, artifact_path: model}}
        harness: {kind: lm-eval, tasks: [arc_easy, hellaswag], limits: {max_instances: 50}}
        compute: {gpus: 1}
        """))
    text = ROTA.replace("evaluate: {gpus: 0, margin: 0.05}",
                        "evaluate: {config: ./eval.yaml, metric: arc_easy/acc, "
                        "higher_is_better: true}")
    r = _round(text, tmp_path)
    assert r.config.evaluate.config == str(tmp_path / "eval.yaml")
    ev = load_eval(steps.evaluation_text(r.config, "/runs/merged", "/h.jsonl", "candidate"))
    assert (ev.name, ev.model.uri, ev.model.mlflow, ev.harness.kind) == (
        "tiny-refresh-candidate", "/runs/merged", None, "lm-eval")
    assert ev.harness.tasks == ["arc_easy", "hellaswag"]
    assert ev.harness.limits.max_instances == 50
