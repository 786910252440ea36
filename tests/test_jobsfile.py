"""The watched jobs file: line format, YAML, the `rota add` writer and the watcher."""

from __future__ import annotations

import os
import shlex
from pathlib import Path, PurePath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.errors import InvalidSpec
from rota.jobsfile import (
    JobsFileError,
    JobsFileParse,
    JobsFileWatcher,
    fmt_for_path,
    format_jobs_line,
    parse_jobs_text,
)


def csv(text: str) -> JobsFileParse:
    return parse_jobs_text(text, fmt="csv", source="jobs.txt")


def yml(text: str) -> JobsFileParse:
    return parse_jobs_text(text, fmt="yaml", source="jobs.yaml")


def one_error(parse: JobsFileParse) -> str:
    assert len(parse.errors) == 1, parse.errors
    return str(parse.errors[0])  # source:line: message


# --- line format: good paths ---------------------------------------------------------------

def test_python_script_line() -> None:
    p = csv("1,train.py,torch,--lr 0.1 --epochs 3,0-3\n")
    assert p.errors == []
    (e,) = p.entries
    assert e.line == 1
    assert e.spec.command == ["python", "train.py", "--lr", "0.1", "--epochs", "3"]
    assert e.spec.priority == 1
    assert e.spec.conda == "torch"
    assert e.spec.allowed_gpus == [0, 1, 2, 3]
    assert e.spec.gpus == 1.0
    assert e.spec.name == "train.py"
    assert e.key == e.spec.content_hash()


def test_shell_script_and_binary_and_empty_fields() -> None:
    p = csv("2,jobs/run.sh,,,\n3,/usr/bin/tool,,-v\n")
    assert p.errors == []
    sh, tool = p.entries
    assert sh.spec.command == ["bash", "jobs/run.sh"]
    assert sh.spec.name == "run.sh"
    assert sh.spec.conda is None
    assert sh.spec.allowed_gpus is None
    assert tool.spec.command == ["/usr/bin/tool", "-v"]
    assert tool.line == 2


def test_allowed_gpus_is_the_rest_of_the_line() -> None:
    (e,) = csv("1,train.py,env,--x 1,4,5,6,7").entries
    assert e.spec.allowed_gpus == [4, 5, 6, 7]
    assert e.spec.command == ["python", "train.py", "--x", "1"]


def test_comments_blank_lines_and_crlf_are_skipped() -> None:
    p = csv("# priority,script,...\n\n   \n  # indented comment\r\n5,a.py,,,\r\n")
    assert p.errors == []
    assert [(e.line, e.spec.priority) for e in p.entries] == [(5, 5)]
    assert p.entries[0].spec.allowed_gpus is None


def test_negative_priority_and_spaces_around_fields() -> None:
    (e,) = csv("  -3 , train.py , env ,  --a b , 1-2 ").entries
    assert e.spec.priority == -3
    assert e.spec.conda == "env"
    assert e.spec.command == ["python", "train.py", "--a", "b"]
    assert e.spec.allowed_gpus == [1, 2]


def test_quoted_arguments_keep_their_commas() -> None:
    (e,) = csv('1,train.py,env,"--tags a,b --lr 0.1",4,5').entries
    assert e.spec.command == ["python", "train.py", "--tags", "a,b", "--lr", "0.1"]
    assert e.spec.allowed_gpus == [4, 5]


def test_doubled_quote_inside_a_quoted_field() -> None:
    (e,) = csv('1,train.py,,"--msg ""hello, world""",').entries
    assert e.spec.command == ["python", "train.py", "--msg", "hello, world"]


def test_shell_quotes_inside_unquoted_arguments_protect_commas() -> None:
    (e,) = csv('1,train.py,,--msg "hi, there" --n 2,0').entries
    assert e.spec.command == ["python", "train.py", "--msg", "hi, there", "--n", "2"]
    assert e.spec.allowed_gpus == [0]


def test_quoted_script_and_quoted_gpu_list() -> None:
    (e,) = csv('1,"my,dir/a.sh",,,"0,2"').entries
    assert e.spec.command == ["bash", "my,dir/a.sh"]
    assert e.spec.allowed_gpus == [0, 2]


@pytest.mark.parametrize(("args", "llm"), [("--llm qwen2.5-7b --lr 1", "qwen2.5-7b"),
                                           ("--llm=Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"),
                                           ("--lr 1", None)])
def test_llm_argument_sets_spec_llm(args: str, llm: str | None) -> None:
    (e,) = csv(f"1,serve.py,,{args},").entries
    assert e.spec.llm == llm
    assert e.spec.gpus == 1.0


def test_identical_lines_share_a_key_and_name_is_not_in_it() -> None:
    a, b, c = csv("1,a.py,,--x 1,\n1,a.py,,--x 1,\n1,a.py,,--x 2,\n").entries
    assert a.key == b.key != c.key


# --- line format: errors ---------------------------------------------------------------------

def test_commas_in_arguments_give_a_clear_error_with_a_hint() -> None:
    msg = one_error(csv("1,train.py,env,--lr 0.1,--x 2,0-3\n"))
    assert msg.startswith("jobs.txt:1: ")
    assert "allowed_gpus '--x 2,0-3' is not a GPU list" in msg
    assert "if the arguments contain commas, put them in double quotes" in msg


def test_unbalanced_single_quote_from_a_comma_split_gets_the_hint() -> None:
    msg = one_error(csv("1,train.py,env,--msg 'a, b',0\n"))
    assert msg.startswith("jobs.txt:1: arguments: cannot split")
    assert "double quotes" in msg


def test_quoting_error_in_arguments_names_the_field() -> None:
    p = csv("1,train.py,env,--msg 'oops\n")
    assert p.errors[0].line == 1
    assert "arguments: cannot split" in p.errors[0].message
    assert "No closing quotation" in p.errors[0].message


@pytest.mark.parametrize(("line", "expected"), [
    ("x,train.py,,,", "jobs.txt:1: priority: 'x' is not a whole number"),
    ("1.5,train.py,,,", "priority: '1.5' is not a whole number"),
    (",train.py,,,", "priority: '' is not a whole number"),
    ("1,,env,,", "jobs.txt:1: script_path is empty"),
    ("1,train.py", "expected priority,script_path,conda_env,arguments,allowed_gpus; found 2"),
    ("1,train.py,env,,3-1", "jobs.txt:1: allowed_gpus: range '3-1' runs backwards"),
    ('1,"train.py,,,', "script_path: a double quote is not closed"),
    ('1,train.py,,--m "a,', "arguments: a double quote is not closed"),
    ('1,train.py,,"--x 1" --y,', "arguments: text after the closing double quote ('--y')"),
    ("1,train.py,,--llm,", "arguments: --llm needs a model name"),
    ("1,train.py,,--llm=,", "arguments: --llm needs a model name"),
    ("9999999,train.py,,,", "priority: Input should be less than or equal to 1000000"),
])
def test_line_errors_name_the_field(line: str, expected: str) -> None:
    p = csv(line)
    assert p.entries == []
    assert expected in one_error(p)
    assert p.errors[0].line == 1


def test_one_bad_line_keeps_the_rest() -> None:
    text = "\n".join([
        "1,a.py,,,",
        "oops,b.py,,,",
        "3,c.py,,--lr 0.1,--x 2,0-3",
        "# comment",
        "4,d.sh,,,0",
    ])
    p = csv(text)
    assert [(e.line, e.spec.name) for e in p.entries] == [(1, "a.py"), (5, "d.sh")]
    assert [e.line for e in p.errors] == [2, 3]
    assert str(p.errors[0]).startswith("jobs.txt:2: priority")
    assert p.errors[1].message.startswith("allowed_gpus")  # the place is in .line
    assert p.errors[1].source == "jobs.txt"


def test_error_text() -> None:
    assert str(JobsFileError(3, "bad", "jobs.txt")) == "jobs.txt:3: bad"
    assert str(JobsFileError(3, "bad")) == "line 3: bad"
    assert str(JobsFileError(0, "bad", "jobs.txt")) == "jobs.txt: bad"
    assert str(JobsFileError(0, "bad")) == "bad"


def test_fmt_for_path() -> None:
    assert fmt_for_path("jobs.txt") == "csv"
    assert fmt_for_path("jobs.csv") == "csv"
    assert fmt_for_path("jobs") == "csv"
    assert fmt_for_path(Path("x/jobs.YAML")) == "yaml"
    assert fmt_for_path("jobs.yml") == "yaml"


# --- the `rota add` writer ---------------------------------------------------------------------

def test_format_jobs_line_plain() -> None:
    assert format_jobs_line(1, "train.py", "env", ["--lr", "0.1"], "0-3") == \
        "1,train.py,env,--lr 0.1,0-3"
    assert format_jobs_line(2, "a.sh", None, [], None) == "2,a.sh,,,"


def test_format_jobs_line_quotes_commas_and_quotes() -> None:
    line = format_jobs_line(1, "train.py", "env", ["--tags", "a,b", 'say "x"', "it's"],
                            "4,5,6,7")
    assert line.endswith(",4-7")
    (e,) = csv(line).entries
    assert e.spec.command == ["python", "train.py", "--tags", "a,b", 'say "x"', "it's"]
    assert e.spec.allowed_gpus == [4, 5, 6, 7]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"arguments": ["a\nb"]}, "arguments"),
    ({"script": "a\rb.py"}, "script_path"),
    ({"script": "  "}, "script_path"),
    ({"allowed_gpus": "x"}, "allowed_gpus"),
    ({"priority": 10**9}, "priority"),
    ({"arguments": ["--llm"]}, "arguments"),
])
def test_format_jobs_line_rejects_what_cannot_be_read_back(kwargs: dict[str, object],
                                                            field: str) -> None:
    args: dict[str, object] = {"priority": 1, "script": "t.py", "conda": None,
                               "arguments": [], "allowed_gpus": None, **kwargs}
    with pytest.raises(InvalidSpec) as info:
        format_jobs_line(**args)  # type: ignore[arg-type]
    assert info.value.field == field


_TEXT = st.text(st.characters(exclude_characters="\n\r\x00", codec="utf-8"))
#: a script's file name becomes the job's name, where control and bidi characters are
#: refused (core.spec): those get an error on their line, not a job
_NAME_TEXT = st.text(st.characters(exclude_categories=("Cc", "Cf"), codec="utf-8"))
_ARG = st.one_of(_TEXT, st.sampled_from(["", ",", '"', "'", "a b", '""', "a,b", " x ", "#",
                                         "\\", "$HOME", "--cuda", "1,2", "'\"'", "\t"]))


def _expected_argv(script: str, args: list[str]) -> list[str]:
    if script.endswith(".py"):
        return ["python", script, *args]
    if script.endswith(".sh"):
        return ["bash", script, *args]
    return [script, *args]


@settings(max_examples=300, deadline=None)
@given(priority=st.integers(-1_000_000, 1_000_000),
       script=st.one_of(_NAME_TEXT, st.sampled_from(["t.py", "a,b.sh", '"q".py', " s p.py "]))
       .filter(lambda s: bool(s.strip())),
       conda=st.one_of(st.none(), _TEXT, st.sampled_from(["env", "a,b", '"', " "])),
       arguments=st.lists(_ARG, max_size=6)
       .filter(lambda a: not any(x.startswith("--llm") for x in a)),
       gpus=st.one_of(st.none(), st.sets(st.integers(0, 15), min_size=1)))
def test_format_then_parse_round_trips(priority: int, script: str, conda: str | None,
                                       arguments: list[str], gpus: set[int] | None) -> None:
    allowed = ",".join(str(g) for g in sorted(gpus)) if gpus else None
    line = format_jobs_line(priority, script, conda, arguments, allowed)
    assert "\n" not in line
    p = csv(line)
    assert p.errors == [], (line, p.errors)
    (e,) = p.entries
    assert e.spec.command == _expected_argv(script, arguments)
    assert e.spec.priority == priority
    assert e.spec.conda == (conda or None)
    assert e.spec.allowed_gpus == (sorted(gpus) if gpus else None)
    assert e.spec.name == (PurePath(script).name[:200] or None)
    # The line reads back the same inside a file, between other lines.
    p2 = csv(f"# header\n{line}\n1,x.py,,,\n")
    assert p2.entries[0].key == e.key and p2.entries[0].line == 2


def test_round_trip_of_shell_metacharacters_stays_argv() -> None:
    args = ["; rm -rf /", "$(id)", "`x`", "a|b"]
    (e,) = csv(format_jobs_line(1, "t.py", None, args, None)).entries
    assert e.spec.command == ["python", "t.py", *args]
    assert shlex.join(args) in format_jobs_line(1, "t.py", None, args, None)


# --- YAML ----------------------------------------------------------------------------------

def test_yaml_single_mapping() -> None:
    p = yml("command: [python, train.py]\ngpus: 0.5\nname: t\n")
    assert p.errors == []
    (e,) = p.entries
    assert (e.line, e.spec.command, e.spec.gpus, e.spec.name) == \
        (1, ["python", "train.py"], 0.5, "t")
    assert e.key == e.spec.content_hash()


def test_yaml_list_and_string_command() -> None:
    p = yml("- command: python a.py --x 'a b'\n- command: [b]\n  allowed_gpus: 0-1\n")
    assert p.errors == []
    a, b = p.entries
    assert a.spec.command == ["python", "a.py", "--x", "a b"]
    assert (b.line, b.spec.allowed_gpus) == (2, [0, 1])


def test_yaml_shell_command_string_stays_one_script() -> None:
    (e,) = yml("command: echo $HOME && ls\nshell: true\n").entries
    assert e.spec.command == ["echo $HOME && ls"] and e.spec.shell


def test_yaml_jobs_key_with_errors_naming_item_and_line() -> None:
    text = """\
jobs:
  - command: [python, a.py]
    gpus: 1
  - command: [python, b.py]
    gpus: 1.5
  - command: [python, c.py]
    priority: 3
  - 42
  - command: [python, e.py]
    gpus: 2
    allowed_gpus: [0]
  - name: no-command
"""
    p = yml(text)
    assert [(e.line, e.spec.command[1]) for e in p.entries] == [(2, "a.py"), (6, "c.py")]
    msgs = {e.line: str(e) for e in p.errors}
    assert sorted(msgs) == [4, 8, 9, 12]
    assert msgs[4].startswith("jobs.yaml:4: job 2: ")
    assert "more than one GPU must be a whole number" in msgs[4]
    assert msgs[8] == "jobs.yaml:8: job 4: expected a mapping of spec fields, got int"
    assert msgs[9].startswith("jobs.yaml:9: job 5: ")
    assert "only 1 GPUs allowed" in msgs[9]
    assert msgs[12].startswith("jobs.yaml:12: job 6: command: ")


def test_yaml_field_error_points_at_the_field_line() -> None:
    text = "- command: [a]\n- command: [b]\n  name: x\n  gpus: lots\n"
    p = yml(text)
    assert [e.line for e in p.entries] == [1]
    (err,) = p.errors
    assert err.line == 4
    assert err.message.startswith("job 2 (from line 2): gpus: ")
    assert str(err).startswith("jobs.yaml:4: job 2 (from line 2): gpus: ")


def test_yaml_unknown_field_is_named() -> None:
    msg = one_error(yml("command: [a]\ngpu: 2\n"))
    assert msg.startswith("jobs.yaml:2: job 1 (from line 1): gpu: ")


def test_yaml_gpu_mem_bare_number_is_gib_as_on_the_command_line() -> None:
    got = yml("- {command: a, gpu_mem: 20}\n- {command: b, gpu_mem: 1.5}\n"
              "- {command: c, gpu_mem: '512M'}\n- {command: d, gpu_mem: '20'}\n"
              "- {command: e, gpu_mem: 1000B}\n")
    assert not got.errors
    assert [e.spec.gpu_mem for e in got.entries] == [20 << 30, 3 << 29, 512 << 20, 20 << 30,
                                                     1000]
    bad = yml("- command: a\n  gpu_mem: -2\n")
    assert bad.errors[0].line == 2 and "gpu_mem" in bad.errors[0].message


def test_yaml_syntax_error_has_a_line() -> None:
    p = yml("- command: [a]\n- command: [b\n- command: [c]\n")
    assert p.entries == []
    (err,) = p.errors
    assert err.line >= 2
    assert str(err).startswith(f"jobs.yaml:{err.line}: YAML: ")


def test_yaml_bad_document_keeps_earlier_documents() -> None:
    p = yml("command: [a]\n---\ncommand: [b]\n---\n- [unclosed\n")
    assert [e.spec.command for e in p.entries] == [["a"], ["b"]]
    assert len(p.errors) == 1 and p.errors[0].line == 5


def test_yaml_duplicate_key_is_an_error_not_a_silent_overwrite() -> None:
    p = yml("- command: [a]\n  gpus: 1\n  gpus: 2\n- command: [b]\n")
    assert [e.spec.command for e in p.entries] == [["b"]]
    assert one_error(p) == "jobs.yaml:3: job 1: key 'gpus' appears twice"


def test_yaml_merge_keys_are_allowed() -> None:
    text = "- &base\n  command: [a]\n  gpus: 0.5\n- <<: *base\n  command: [b]\n"
    p = yml(text)
    assert p.errors == []
    assert [(e.spec.command, e.spec.gpus) for e in p.entries] == [(["a"], 0.5), (["b"], 0.5)]


@pytest.mark.parametrize(("text", "expected"), [
    ("just a string\n", "jobs.yaml:1: expected a job spec mapping, a list of them"),
    ("jobs: 3\n", "jobs.yaml:1: 'jobs' must be a list of specs"),
    ("jobs: []\nextra: 1\n", "jobs.yaml:2: unknown top-level key(s) ['extra'] next to 'jobs'"),
    ("command: python 'a\n", "jobs.yaml:1: job 1: command: cannot split"),
    ("!!python/object:os.system {}\n", "jobs.yaml:1: YAML: "),
])
def test_yaml_shape_errors(text: str, expected: str) -> None:
    assert one_error(yml(text)).startswith(expected)


def test_yaml_empty_inputs() -> None:
    for text in ("", "# nothing\n", "jobs:\n", "jobs: []\n", "~\n"):
        assert yml(text) == JobsFileParse(), text


# --- the watcher -----------------------------------------------------------------------------

def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def test_watcher_missing_file_is_empty_without_error(tmp_path: Path) -> None:
    w = JobsFileWatcher(tmp_path / "jobs.txt")
    assert w.poll() == JobsFileParse()
    assert w.poll() is None


def test_watcher_ignores_unchanged_file_and_picks_up_appends(tmp_path: Path) -> None:
    path = tmp_path / "jobs.txt"
    path.write_text("1,a.py,,,\n")
    w = JobsFileWatcher(path)
    w.RACY_NS = 0  # the file is seconds old in spirit: no racy re-read
    first = w.poll()
    assert first is not None and [e.spec.name for e in first.entries] == ["a.py"]
    assert w.poll() is None
    assert w.poll() is None
    _append(path, "2,b.py,,,\n")
    second = w.poll()
    assert second is not None
    assert [(e.line, e.spec.name) for e in second.entries] == [(1, "a.py"), (2, "b.py")]
    assert second.entries[0].key == first.entries[0].key
    assert w.poll() is None


def test_watcher_does_not_read_when_stat_is_unchanged(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "jobs.txt"
    path.write_text("1,a.py,,,\n")
    w = JobsFileWatcher(path)
    w.RACY_NS = 0
    assert w.poll() is not None

    def boom(self: Path) -> bytes:
        raise AssertionError("read the file although its stat did not change")

    monkeypatch.setattr(Path, "read_bytes", boom)
    assert w.poll() is None


def test_watcher_touch_without_change_gives_none(tmp_path: Path) -> None:
    path = tmp_path / "jobs.txt"
    path.write_text("1,a.py,,,\n")
    w = JobsFileWatcher(path)
    assert w.poll() is not None
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert w.poll() is None


def test_watcher_sees_same_size_rewrite_within_one_tick(tmp_path: Path) -> None:
    path = tmp_path / "jobs.txt"
    path.write_text("1,a.py,,,\n")
    w = JobsFileWatcher(path)  # the file was written just now: a racy stat
    assert w.poll() is not None
    st = path.stat()
    with path.open("r+") as f:  # same inode, same size
        f.write("2")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime, as if in one tick
    p = w.poll()
    assert p is not None and p.entries[0].spec.priority == 2


def test_watcher_file_removed_and_recreated(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("command: [a]\n")
    w = JobsFileWatcher(path)
    p = w.poll()
    assert p is not None and p.entries[0].spec.command == ["a"]
    path.unlink()
    assert w.poll() == JobsFileParse()
    assert w.poll() is None
    path.write_text("command: [b]\n")
    p = w.poll()
    assert p is not None and p.entries[0].spec.command == ["b"]


def test_watcher_errors_and_undecodable_line_keep_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "jobs.txt"
    path.write_bytes(b"1,a.py,,,\n2,b\xff.py,,,\nbad,c.py,,,\n4,d.py,,,\n")
    p = JobsFileWatcher(path).poll()
    assert p is not None
    assert [e.spec.name for e in p.entries] == ["a.py", "d.py"]
    assert [(e.line, e.message) for e in p.errors] == [
        (2, "not valid UTF-8"), (3, "priority: 'bad' is not a whole number")]
    assert str(p.errors[0]) == f"{path}:2: not valid UTF-8"


def test_watcher_unreadable_path_reports_once(tmp_path: Path) -> None:
    path = tmp_path / "jobs.txt"
    path.mkdir()  # a directory where the file should be: read fails
    w = JobsFileWatcher(path)
    p = w.poll()
    assert p is not None and p.entries == []
    assert len(p.errors) == 1 and p.errors[0].line == 0
    assert str(p.errors[0]).startswith(f"{path}: cannot read: ")
    assert w.poll() is None


# --- lines and files that must not stall or break the reader --------------------------------

def test_an_over_long_line_is_refused_before_it_is_split() -> None:
    """A 300,000-character line held the daemon 4.2 s in shlex; now it is refused by its
    length, and the other lines still count."""
    from rota.jobsfile import LINE_MAX

    p = csv("1,a.py,,,\n2,b.py,,--x " + "y" * 300_000 + ",\n3,c.py,,,\n")
    assert [e.spec.name for e in p.entries] == ["a.py", "c.py"]
    assert one_error(p).startswith("jobs.txt:2: the line has 300,0") and f"{LINE_MAX:,}" in (
        one_error(p))


def test_a_yaml_command_string_is_bounded_too() -> None:
    p = yml("- command: 'echo " + "y" * 200_000 + "'\n- command: [ok]\n")
    assert [e.spec.command for e in p.entries] == [["ok"]]
    assert one_error(p).startswith("jobs.yaml:1: job 1: command: the command has 200,005 ")


def test_a_priority_of_thousands_of_digits_is_an_error_on_its_line() -> None:
    """int() of more than 4,300 digits raises ValueError: the reader broke on it."""
    p = csv("1,a.py,,,\n" + "9" * 5000 + ",b.py,,,\n")
    assert [e.spec.name for e in p.entries] == ["a.py"]
    assert one_error(p) == ("jobs.txt:2: priority: a number of 5,000 digits; priorities run "
                            "from -1000000 to 1000000")
    p = yml("- command: [a]\n- command: [b]\n  priority: " + "9" * 5000 + "\n- command: [c]\n")
    assert [e.spec.command for e in p.entries] == [["a"], ["c"]]
    assert one_error(p).startswith("jobs.yaml:3: job 2: a number of 5,000 digits")


def test_a_byte_order_mark_is_not_part_of_the_first_field() -> None:
    assert csv("\ufeff1,a.py,,,\n").entries[0].spec.priority == 1
    assert yml("\ufeff- command: [a]\n").entries[0].spec.command == ["a"]


BILLION_LAUGHS = """\
- command: [fine]
- a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  command: [echo]
- command: [also-fine]
"""


def test_aliases_that_expand_too_far_are_refused_unexpanded() -> None:
    """The job is refused before anything walks its 10^8 nodes; the others still count."""
    from rota.jobsfile import read_jobs_text

    items, errors = read_jobs_text(BILLION_LAUGHS, fmt="yaml", source="jobs.yaml")
    assert [i.data["command"] for i in items] == [["fine"], ["also-fine"]]
    [e] = errors
    assert str(e).startswith("jobs.yaml:2: job 2: YAML aliases expand this to ")
    assert "at most 100,000 for one job" in str(e)


def test_a_merge_key_bomb_is_refused_too() -> None:
    """``<<: [*a, *a]`` doubles a mapping's keys while PyYAML builds it."""
    levels = ["x0: &x0 {k0: 1, k1: 2}"]
    levels += [f"x{i}: &x{i} {{<<: [*x{i - 1}, *x{i - 1}], k{i + 1}: 1}}" for i in range(1, 40)]
    p = yml("jobs:\n- command: [a]\n" + "\n".join(levels))
    assert p.entries == []  # the bomb is outside the jobs: the document is refused whole
    assert str(p.errors[0]).startswith("jobs.yaml:1: YAML aliases add 10,995,116,277,3"), p.errors


def test_an_alias_to_its_own_node_is_refused() -> None:
    p = yml("- command: [a]\n- &x {command: [b], env: {X: *x}}\n- command: [c]\n")
    assert [e.spec.command for e in p.entries] == [["a"], ["c"]]
    assert "an alias refers to a node that contains it" in one_error(p)


def test_shared_defaults_through_an_alias_still_work() -> None:
    p = yml(
        "- &first {command: [a], gpus: 0.5, priority: 3}\n- {<<: *first, command: [b]}\n")
    assert [(e.spec.command, e.spec.gpus, e.spec.priority) for e in p.entries] == [
        (["a"], 0.5, 3), (["b"], 0.5, 3)]


# --- JSON ------------------------------------------------------------------------------------

def jsn(text: str) -> JobsFileParse:
    return parse_jobs_text(text, fmt="json", source="jobs.json")


def test_json_is_read_as_json() -> None:
    """PyYAML took a trailing comma and read 1e5 as a string."""
    assert fmt_for_path("jobs.JSON") == "json"
    assert one_error(jsn('[{"command": ["a"]},\n {"command": ["b"]},\n]\n')) == (
        "jobs.json:3: JSON: a comma before ']': JSON allows no trailing comma (column 1)")
    p = jsn('[{"command": ["a"], "time_limit": 1e5},\n {"command": "b c"}]')
    assert [(e.line, e.spec.command) for e in p.entries] == [(1, ["a"]), (2, ["b", "c"])]
    assert p.entries[0].spec.time_limit == 1e5


def test_json_jobs_stand_alone_on_their_lines() -> None:
    p = jsn('{"jobs": [\n {"command": ["a"]},\n {"command": ["b"],\n  "command": ["c"]},\n'
            ' {"command": ["d"], "priority": ' + "9" * 5000 + '},\n {"command": ["e"], "x": 1},\n'
            ' {"command": ["f"]}]}')
    assert [(e.line, e.spec.command) for e in p.entries] == [(2, ["a"]), (7, ["f"])]
    assert [str(e) for e in p.errors] == [
        "jobs.json:4: job 2: key 'command' appears twice",
        "jobs.json:5: job 3: a number of 5,000 digits; Python reads at most 4,300 (quote it "
        "to make it a string)",
        "jobs.json:6: job 4: x: Extra inputs are not permitted"]


def test_watcher_strips_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "jobs.txt"
    path.write_bytes("\ufeff1,a.py,,,\n".encode())
    p = JobsFileWatcher(path).poll()
    assert p is not None and p.errors == [] and p.entries[0].spec.priority == 1
