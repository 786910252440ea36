"""JobSpec: validation errors that name the field, a stable dedup hash, secrets masked."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from rota.core.spec import JobSpec, parse_spec
from rota.errors import InvalidSpec, RotaError

GIB = 1 << 30


def spec(**fields: Any) -> JobSpec:
    return parse_spec({"command": ["python", "train.py"], **fields})


def error_of(**fields: Any) -> InvalidSpec:
    with pytest.raises(InvalidSpec) as info:
        parse_spec({"command": ["python", "train.py"], **fields})
    assert isinstance(info.value, RotaError)
    return info.value


# -- good specs -------------------------------------------------------------------------------


def test_a_minimal_spec_gets_the_defaults() -> None:
    s = spec()
    assert s.command == ["python", "train.py"]
    assert (s.gpus, s.priority, s.shell, s.whole_gpus) == (1.0, 0, False, 1)


def test_human_units_are_read() -> None:
    s = spec(gpu_mem="20G", time_limit="1h30m", allowed_gpus="0-2,5", gpus=2)
    assert s.gpu_mem == 20 * GIB
    assert s.time_limit == 5400
    assert s.allowed_gpus == [0, 1, 2, 5]


def test_fractions_of_one_gpu_and_cpu_only_are_allowed() -> None:
    assert spec(gpus=0.5).whole_gpus == 0
    assert spec(gpus=0).whole_gpus == 0


def test_a_shell_job_is_one_script_string() -> None:
    assert spec(command=["echo hi && sleep 1"], shell=True).shell


# -- errors name the field --------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "field"), [
    ({"command": []}, "command"),
    ({"command": [""]}, "command"),
    ({"command": ["  "]}, "command"),
    ({"command": ["python", "a\x00b"]}, "command"),
    ({"gpu_mem": "lots"}, "gpu_mem"),
    ({"gpu_mem": "20Q"}, "gpu_mem"),
    ({"gpu_mem": -1}, "gpu_mem"),
    ({"env": {"1BAD": "x"}}, "env"),
    ({"env": {"A-B": "x"}}, "env"),
    ({"bogus": 1}, "bogus"),
    ({"gpus": -1}, "gpus"),
    ({"priority": "high"}, "priority"),
    ({"time_limit": "soon"}, "time_limit"),
    ({"time_limit": float("inf")}, "time_limit"),  # no limit is None; databases refuse inf
    ({"retry_backoff": float("nan")}, "retry_backoff"),
    ({"allowed_gpus": "0-x"}, "allowed_gpus"),
    ({"allowed_gpus": [-1]}, "allowed_gpus"),
    ({"session": "byobu"}, "session"),
    ({"files": {"etc/a.yaml": "x"}}, "files"),
    ({"files": {"/etc/../a.yaml": "x"}}, "files"),
    ({"files": {"/etc/a.yaml": "x" * 1_100_000}}, "files"),
    ({"model": "runs:/a b"}, "model"),
    ({"model_dir": "models"}, "model_dir"),
    ({"gpu_type": "A100 80GB"}, "gpu_type"),
    ({"gpu_type": ""}, "gpu_type"),
])
def test_a_field_error_names_the_field(fields: dict[str, Any], field: str) -> None:
    err = error_of(**fields)
    assert err.field == field
    assert field in str(err)


@pytest.mark.parametrize(("fields", "words"), [
    ({"gpus": 1.5}, ["gpus", "1.5", "whole"]),
    ({"command": ["echo", "hi"], "shell": True}, ["shell", "one script string"]),
    ({"gpus": 4, "allowed_gpus": "0-1"}, ["gpus=4", "2 GPUs allowed"]),
    ({"env": {"A": "1"}, "secret_env": ["TOKEN"]}, ["secret_env", "TOKEN"]),
    ({"retry_backoff": 60, "retry_backoff_max": 10}, ["retry_backoff_max"]),
])
def test_an_error_between_fields_names_them(fields: dict[str, Any], words: list[str]) -> None:
    message = str(error_of(**fields))
    for w in words:
        assert w in message


def test_a_fraction_of_one_gpu_with_fewer_allowed_gpus_is_fine() -> None:
    assert spec(gpus=0.5, allowed_gpus=[3]).allowed_gpus == [3]


def test_a_gpu_type_is_kept_as_given() -> None:
    assert spec(gpu_type="A100").gpu_type == "A100"
    assert spec(gpu_type="NVIDIA-A100-SXM4-80GB", gpus=0.5).gpu_type == "NVIDIA-A100-SXM4-80GB"
    assert spec(gpu_type="rtx_4090.v2").gpu_type == "rtx_4090.v2"
    assert spec().gpu_type is None


@pytest.mark.parametrize("bad", ["A100 80GB", "a100;rm", "-A100", "A100-", "A" * 64, "Ä100",
                                 "a/b", ""])
def test_a_gpu_type_is_letters_digits_and_dashes_dots_underscores(bad: str) -> None:
    err = error_of(gpu_type=bad)
    assert err.field == "gpu_type"
    assert "1-63 letters, digits, '-', '_' and '.'" in str(err), str(err)


def test_a_gpu_type_without_gpus_is_refused_in_a_sentence() -> None:
    message = str(error_of(gpu_type="A100", gpus=0))
    assert "gpu_type 'A100' names a kind of GPU but gpus=0 asks for none" in message
    assert "give gpus (e.g. 1), or drop gpu_type" in message


def test_an_unknown_field_is_named() -> None:
    err = error_of(gpu=2)
    assert err.field == "gpu" and "gpu" in str(err)


def test_where_prefixes_the_message() -> None:
    with pytest.raises(InvalidSpec, match=r"^jobs\.yaml:3: gpu_mem"):
        parse_spec({"command": ["x"], "gpu_mem": "lots"}, where="jobs.yaml:3")
    with pytest.raises(InvalidSpec, match=r"^jobs\.yaml:4: env"):
        parse_spec({"command": ["x"], "env": {"1": "x"}}, where="jobs.yaml:4")


def test_every_wrong_field_is_reported_at_once() -> None:
    message = str(error_of(env={"1BAD": "x"}, gpus=-2, bogus=True))
    assert "env" in message and "gpus" in message and "bogus" in message


# -- the dedup hash ---------------------------------------------------------------------------


def test_the_content_hash_is_stable() -> None:
    a, b = spec(gpus=2, env={"A": "1", "B": "2"}), spec(gpus=2, env={"B": "2", "A": "1"})
    assert a.content_hash() == b.content_hash() == a.content_hash()
    assert len(a.content_hash()) == 64


def test_the_content_hash_does_not_change_between_releases() -> None:
    # stored in the database for de-duplication: a change here re-queues duplicates
    payload = {"command": ["echo", "hi"], "shell": False, "gpus": 1.0, "gpu_mem": None,
               "llm": None, "allowed_gpus": None, "conda": None, "cwd": None, "env": {},
               "session": "none", "cuda_arg": False, "priority": 0}
    expected = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    assert expected == "7576cee6683d4724647a06ff0a4c7e3d046155d11eca5d854b9217444eec1e70"
    assert parse_spec({"command": ["echo", "hi"]}).content_hash() == expected


@pytest.mark.parametrize("bookkeeping", [
    {"hold": True}, {"tags": ["sweep", "lr=3e-4"]}, {"name": "my run"},
    {"hold": True, "tags": ["x"], "name": "other"},
])
def test_the_content_hash_ignores_hold_tags_and_name(bookkeeping: dict[str, Any]) -> None:
    assert spec(**bookkeeping).content_hash() == spec().content_hash()


@pytest.mark.parametrize("change", [
    {"command": ["python", "eval.py"]}, {"gpus": 2}, {"gpu_mem": "10G"},
    {"env": {"SEED": "1"}}, {"allowed_gpus": [1]}, {"priority": 3}, {"cwd": "/data"},
    {"gpu_type": "A100"},
])
def test_the_content_hash_sees_what_runs_and_where(change: dict[str, Any]) -> None:
    assert spec(**change).content_hash() != spec().content_hash()


def test_the_same_gpu_set_written_two_ways_hashes_the_same() -> None:
    assert spec(allowed_gpus="2,0-1").content_hash() == \
        spec(allowed_gpus=[1, 2, 0, 2]).content_hash()


# -- secrets ----------------------------------------------------------------------------------


def test_redacted_masks_secret_env_values() -> None:
    s = spec(env={"HF_TOKEN": "hf_s3cr3t", "SEED": "7"}, secret_env=["HF_TOKEN"])
    shown = s.redacted()
    assert shown["env"] == {"HF_TOKEN": "***", "SEED": "7"}
    assert "hf_s3cr3t" not in repr(shown)
    assert s.env["HF_TOKEN"] == "hf_s3cr3t"  # the spec itself keeps the value to run with


def test_redacted_keeps_everything_else() -> None:
    s = spec(env={"K": "v"}, secret_env=["K"], gpus=0.5, tags=["a"])
    shown = s.redacted()
    assert shown["gpus"] == 0.5 and shown["tags"] == ["a"] and shown["secret_env"] == ["K"]
    assert shown["command"] == ["python", "train.py"]


def test_tags_and_project_are_checked() -> None:
    ok = parse_spec({"command": ["x"], "tags": ["lr=3e-4", "sweep/1"], "project": "llm-7b"})
    assert ok.tags == ["lr=3e-4", "sweep/1"] and ok.project == "llm-7b"
    for bad, field in (({"tags": ["a,b"]}, "tags"), ({"tags": ["two words"]}, "tags"),
                       ({"tags": [""]}, "tags"), ({"project": "no spaces"}, "project"),
                       ({"project": "x" * 101}, "project")):
        with pytest.raises(InvalidSpec) as e:
            parse_spec({"command": ["x"], **bad})
        assert e.value.field is not None and e.value.field.startswith(field)


def test_files_and_a_model_are_kept_as_given() -> None:
    spec = parse_spec({"command": ["eval"], "files": {"/etc/eval/config.yaml": "tasks: [a]\n"},
                       "model": "runs:/0123abcd/model"})
    assert spec.files == {"/etc/eval/config.yaml": "tasks: [a]\n"}
    assert (spec.model, spec.model_dir) == ("runs:/0123abcd/model", "/models")


# -- input that could stall the daemon or fake what terminals show ---------------------------


@pytest.mark.parametrize("value", ["0-2000000", "0-99999999999999999999", "1024", [5000], 4096])
def test_gpu_indices_are_bounded_before_a_range_is_expanded(value: Any) -> None:
    e = error_of(allowed_gpus=value)
    assert e.field == "allowed_gpus"
    assert "1023" in str(e)


def test_a_gpu_set_of_too_many_parts_is_refused() -> None:
    assert "parts" in str(error_of(allowed_gpus=",".join(["0-1023"] * 2000)))
    assert spec(allowed_gpus="0-1023").allowed_gpus == list(range(1024))


@pytest.mark.parametrize(("fields", "field"), [
    ({"name": "ok\x1b[2J\x1b[Hfake row"}, "name"),
    ({"name": "tab\there"}, "name"),
    ({"name": "del\x7f"}, "name"),
    ({"name": "c1\x9b31m"}, "name"),
    ({"name": "bidi\u202eevil"}, "name"),
    ({"tags": ["fine", "x\x1b[31m"]}, "tags"),
    ({"env": {"A": "x\x00y"}}, "env"),
    ({"env": {"A=B": "1"}}, "env"),
    ({"env": {"A\x00": "1"}}, "env"),
    ({"cwd": "/tmp/\x00"}, "cwd"),
])
def test_control_characters_and_nul_bytes_are_refused(fields: dict[str, Any], field: str) -> None:
    assert error_of(**fields).field == field


def test_a_command_past_one_argument_s_limit_is_refused_with_the_size() -> None:
    e = error_of(command=["python", "-c", "x" * 200_000])
    assert e.field == "command" and "131072" in str(e)


def test_argv_and_env_past_what_a_launch_carries_are_refused() -> None:
    env = {f"V{i}": "y" * 100_000 for i in range(12)}
    e = error_of(env=env)
    assert "command and env take" in str(e) and "983040" in str(e)
    with pytest.raises(InvalidSpec, match="V0: more than 131072"):
        parse_spec({"command": ["x"], "env": {"V0": "y" * 140_000}})


def test_a_stored_spec_is_read_back_without_the_checks_added_since() -> None:
    old = {"command": ["x"], "name": "made\x1b[1mbefore", "metric_patterns": [r"(?P<v>a)\1"]}
    assert JobSpec.stored(old).name == "made\x1b[1mbefore"
