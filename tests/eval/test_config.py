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
        "e.yaml:6: harness.tasks.1: String should match pattern '^[^\\s,]+$'",
        "e.yaml:8: compute.gpus: Input should be a valid number, unable to parse string as "
        "a number",
        "e.yaml:9: compute.gpu_mem: memory cannot be negative",
        "e.yaml:10: compute.memory: cannot read '12 apples' as a memory size (GiB unless a "
        "unit is given: 20, 20G, 512M)",
        "e.yaml:11: compute.time_limit: cannot read 'soon' as a duration (like 2h, 30m, "
        "1h30m, 90s)",
        "e.yaml:1: tracking: missing",
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
