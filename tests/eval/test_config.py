"""An evaluation config read by load_text: every bad field at once, each with its full path
and its line, unit-parsed fields (memory, durations) included."""

from __future__ import annotations

import textwrap

import pytest

from rota.eval.config import ConfigErrors, load_text

BAD = textwrap.dedent("""\
    version: 1
    name: tiny
    model: {uri: /models/tiny}
    harness:
      kind: lm-eval
      tasks: [arc_easy, "two words"]
    compute:
      gpus: many
      gpu_mem: -3
      memory: 12 apples
      time_limit: soon
    """)


def test_every_bad_field_is_named_with_its_path_and_line_units_included() -> None:
    with pytest.raises(ConfigErrors) as got:
        load_text(BAD, where="e.yaml")
    assert got.value.problems == [
        "e.yaml:6: harness.tasks.1: 'two words' has a space in it: write it as one word (a "
        "name or a path without spaces)",
        "e.yaml:8: compute.gpus: Input should be a valid number, unable to parse string as "
        "a number",
        "e.yaml:9: compute.gpu_mem: memory cannot be negative",
        "e.yaml:10: compute.memory: cannot read '12 apples' as a memory size (GiB unless a "
        "unit is given: 20, 20G, 512M)",
        "e.yaml:11: compute.time_limit: cannot read 'soon' as a duration (like 2h, 30m, "
        "1h30m, 90s)",
    ]


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("memory", "0", "compute.memory: Input should be greater than 0"),
    ("time_limit", "-5m", "compute.time_limit: cannot read '-5m' as a duration"),
    ("time_limit", 0, "compute.time_limit: Input should be greater than 0"),
    ("gpu_mem", "20X", "compute.gpu_mem: cannot read '20X' as a memory size"),
])
def test_a_bad_unit_alone_is_named_by_its_path(field: str, value: object,
                                               problem: str) -> None:
    text = BAD.split("compute:")[0].replace('"two words"', "hellaswag") + \
        f"compute: {{{field}: {value}}}\ntracking: {{tags: {{creator: a, lifecycle: b}}}}\n"
    with pytest.raises(ConfigErrors) as got:
        load_text(text)
    [only] = got.value.problems
    assert only.startswith(problem), only


def test_good_units_are_read() -> None:
    text = BAD.split("compute:")[0].replace('"two words"', "hellaswag") + \
        "compute: {gpu_mem: 20G, memory: 1.5, time_limit: 1h30m}\n" \
        "tracking: {tags: {creator: a, lifecycle: b}}\n"
    c = load_text(text).compute
    assert (c.gpu_mem, c.memory, c.time_limit) == (20 << 30, 3 << 29, 5400.0)


# --- limits a harness cannot honour are refused, never dropped --------------------------
ALL_LIMITS = ("{max_instances: 5, num_fewshot: 2, batch_size: 4, dtype: bfloat16, "
              "max_length: 512}")


def harness_config(kind: str, limits: str, tasks: str = "[mmlu:subject=anatomy]") -> str:
    return textwrap.dedent(f"""\
        version: 1
        name: tiny
        model: {{uri: /models/tiny}}
        harness:
          kind: {kind}
          tasks: {tasks}
          limits: {limits}
        tracking: {{tags: {{creator: a, lifecycle: b}}}}
        """)


def test_lm_eval_honours_every_limit() -> None:
    limits = load_text(harness_config("lm-eval", ALL_LIMITS)).harness.limits
    assert limits.asked() == ["max_instances", "num_fewshot", "batch_size", "dtype",
                              "max_length"]


@pytest.mark.parametrize(("kind", "limit", "problem"), [
    ("helm", "batch_size: 8", "harness.limits.batch_size: the helm harness does not take a "
                              "batch size (helm-run sends the model one request at a time "
                              "and has no batch size)"),
    ("helm", "dtype: float16", "harness.limits.dtype: the helm harness does not take a dtype "
                               "(HELM loads a Hugging Face model as its model deployment "
                               "says, not as helm-run is told: leave dtype auto)"),
    ("helm", "max_length: 2048", "harness.limits.max_length: the helm harness does not take "
                                 "a maximum length (HELM takes the context length"),
    ("heldout", "num_fewshot: 0", "harness.limits.num_fewshot: the heldout harness does not "
                                  "take a few-shot count (held-out loss scores each example "
                                  "on its own, with no examples before it)"),
])
def test_a_limit_the_harness_cannot_honour_is_refused_by_its_path_and_line(
        kind: str, limit: str, problem: str) -> None:
    text = harness_config(kind, "").replace("limits: \n", f"limits:\n    {limit}\n")
    with pytest.raises(ConfigErrors) as got:
        load_text(text, where="e.yaml")
    [only] = got.value.problems
    assert only.startswith(f"e.yaml:8: {problem}"), only


def test_every_refused_limit_is_named_with_the_other_errors() -> None:
    text = harness_config("helm", ALL_LIMITS, tasks="[boolq, two words]") \
        + "compute: {gpus: many}\n"
    with pytest.raises(ConfigErrors) as got:
        load_text(text, where="e.yaml")
    assert [p.split(" (")[0] for p in got.value.problems] == [
        "e.yaml:6: harness.tasks.1: 'two words' has a space in it: write it as one word",
        "e.yaml:7: harness.limits.batch_size: the helm harness does not take a batch size",
        "e.yaml:7: harness.limits.dtype: the helm harness does not take a dtype",
        "e.yaml:7: harness.limits.max_length: the helm harness does not take a maximum "
        "length",
        "e.yaml:9: compute.gpus: Input should be a valid number, unable to parse string as "
        "a number",
    ]


def test_what_a_harness_honours_or_leaves_to_itself_is_accepted() -> None:
    helm = load_text(harness_config("helm", "{max_instances: 10, num_fewshot: 0, dtype: auto, "
                                            "max_length: null}")).harness.limits
    assert helm.asked() == ["max_instances", "num_fewshot"]
    assert load_text(harness_config("helm", "{}")).harness.limits.asked() == []
    heldout = harness_config("heldout", "{max_instances: 10, batch_size: 2, dtype: float16, "
                                        "max_length: 256}", tasks="[a.jsonl]")
    assert len(load_text(heldout).harness.limits.asked()) == 4


def test_a_helm_run_entry_with_its_own_few_shot_count_refuses_a_second_one() -> None:
    tasks = "[boolq, 'mmlu:max_train_instances=5']"
    with pytest.raises(ConfigErrors) as got:
        load_text(harness_config("helm", "{num_fewshot: 0}", tasks=tasks))
    assert got.value.problems == [
        "harness.limits.num_fewshot: the run entry mmlu:max_train_instances=5 sets its "
        "own few-shot count (max_train_instances): give it in one place"]
    assert load_text(harness_config("helm", "{}", tasks=tasks)).harness.tasks[1].endswith("=5")


def test_every_harness_declares_limits_the_config_has_and_names_them() -> None:
    from rota.eval.config import Limits
    from rota.eval.harnesses import HARNESSES

    assert set(Limits.NOUNS) == set(Limits.model_fields)
    for harness in HARNESSES.values():
        assert harness.honours <= set(Limits.model_fields), harness.kind
        assert set(harness.instead) <= set(Limits.model_fields) - harness.honours, harness.kind


def test_a_comma_splits_an_lm_eval_task_but_belongs_to_a_helm_run_entry() -> None:
    text = textwrap.dedent("""\
        version: 1
        name: tiny
        model: {{uri: /models/tiny}}
        harness:
          kind: {kind}
          tasks: [arc_easy, "mmlu:subject=anatomy,model=tiny"]
        tracking: {{tags: {{creator: a, lifecycle: b}}}}
        """)
    with pytest.raises(ConfigErrors) as got:
        load_text(text.format(kind="lm-eval"), where="e.yaml")
    assert got.value.problems == [
        "e.yaml:6: harness.tasks.1: 'mmlu:subject=anatomy,model=tiny': an lm-eval task has "
        "no comma (lm-eval reads its tasks as one comma-separated list): write each task "
        "as an item of its own"]
    cfg = load_text(text.format(kind="helm"), where="e.yaml")
    assert cfg.harness.tasks == ["arc_easy", "mmlu:subject=anatomy,model=tiny"]


# --- what a newcomer writes first ---------------------------------------------------------
NEWCOMER = textwrap.dedent("""\
    version: 1
    name: tiny
    model: {uri: ./tiny-llama}
    harness: {kind: lm-eval, tasks: [arc_easy]}
    """)


def test_tracking_is_optional() -> None:
    assert load_text(NEWCOMER).tracking is None
    tracked = load_text(NEWCOMER + "tracking: {experiment: evals}\n").tracking
    assert tracked is not None and tracked.tags.creator is None


def test_a_wrong_version_is_named_at_its_own_line_and_a_quoted_one_is_read() -> None:
    with pytest.raises(ConfigErrors) as got:
        load_text("name: tiny\n" + NEWCOMER.replace("version: 1", "version: 2"),
                  where="e.yaml")
    assert got.value.problems == [
        "e.yaml:2: version: this Rota reads evaluation configs of version 1, not 2"]
    assert load_text(NEWCOMER.replace("version: 1", 'version: "1"')).version == 1


@pytest.mark.parametrize(("line", "problem"), [
    ("trackng: {experiment: x}", "e.yaml:5: trackng: unknown key: did you mean tracking? "
                                 "the keys here are compute, harness, model, name, tracking, "
                                 "version"),
    ("compute: {gpu: 1}", "e.yaml:5: compute.gpu: unknown key: did you mean gpus? the keys "
                          "here are cpus, gpu_mem, gpu_type, gpus, image, memory, pool, "
                          "priority, time_limit"),
    ("compute: {zzz: 1}", "e.yaml:5: compute.zzz: unknown key: the keys here are cpus, "),
])
def test_an_unknown_key_gets_the_key_it_likely_meant(line: str, problem: str) -> None:
    with pytest.raises(ConfigErrors) as got:
        load_text(NEWCOMER + line + "\n", where="e.yaml")
    [only] = got.value.problems
    assert only.startswith(problem), only


def test_problems_are_objects_too() -> None:
    with pytest.raises(ConfigErrors) as got:
        load_text(NEWCOMER.replace("[arc_easy]", "[arc easy]"), where="e.yaml")
    [only] = got.value.items
    assert only.as_json() == {
        "path": "harness.tasks.0", "line": 4,
        "message": "'arc easy' has a space in it: write it as one word (a name or a path "
                   "without spaces)"}
