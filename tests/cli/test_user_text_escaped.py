"""Nothing a user wrote reaches a terminal as anything but text (DESIGN.md invariant 12).

A job whose command, environment, working directory, output files, metric names, fail
reason and checkpoint path all carry a title-setting, screen-clearing, text-reversing
sequence and Rich markup; every read command a colleague may run on it prints none of it
raw (and ``--json`` keeps it exact)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.cli.common import emit, fail, warn
from rota.cli.styled import Line, Lines
from rota.core.job_names import command_name
from rota.printable import printable
from rota_testing import DaemonProcess, wait_until

EVIL = "\x1b]0;PWN\x07\x1b[2J\u202e\x9b[red]x"
#: what may not reach a terminal raw: ESC, BEL, CSI (C1), a bidi override, a carriage return
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")
#: the colour codes the CLI itself writes when colour is on
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _raw_in(text: str) -> list[str]:
    return [c for c in RAW if c in text]


# -- the pieces ------------------------------------------------------------------------------

def test_printable_keeps_only_what_it_is_told() -> None:
    assert printable("a\nb\tc") == "a\\x0ab\\x09c"
    assert printable("a\nb\tc\r\x1b", keep="\n\t") == "a\nb\tc\\x0d\\x1b"
    with pytest.raises(ValueError, match="only control characters"):
        printable("x", keep="a")


def test_a_name_made_from_a_command_is_escaped_and_one_line() -> None:
    name = command_name([EVIL, "a\nb"])
    assert not _raw_in(name) and "\n" not in name and name.startswith("\\x1b]0;PWN")


def test_a_line_escapes_its_parts_but_keeps_its_own_colours() -> None:
    line = Line(EVIL).append(EVIL, style="red")
    assert not _raw_in(line.plain)
    coloured = Lines([line]).render(colour=True)
    assert "\x1b[31m" in coloured and not _raw_in(_SGR.sub("", coloured))


def test_emit_prints_words_never_markup(capsys: pytest.CaptureFixture[str]) -> None:
    emit({"name": EVIL}, False, lambda d: f"job {d['name']} [bold]held[/] :smile:")
    out = capsys.readouterr().out
    assert not _raw_in(out)
    assert "[red]x" in out and "[bold]held[/]" in out and ":smile:" in out
    emit({"name": EVIL}, True, lambda d: "")  # --json: exact (JSON escapes it)
    assert json.loads(capsys.readouterr().out) == {"name": EVIL}


def test_errors_and_warnings_quoting_a_value_are_escaped(
        capsys: pytest.CaptureFixture[str]) -> None:
    fail(f"no job named {EVIL!s}")
    warn(f"odd {EVIL}\nsecond line")
    err = capsys.readouterr().err
    assert not _raw_in(err) and "[red]x" in err and "\nsecond line" in err


def test_the_rich_console_escapes_what_a_renderer_forgot() -> None:
    from rich.table import Table
    from rich.text import Text

    from rota.cli.user_text import make_console

    console = make_console(stderr=False)
    t = Table("a")
    t.add_row(EVIL)  # a plain str cell, not through fmt.add_row
    with console.capture() as got:
        console.print(t, Text(EVIL, style="bold"), f"{EVIL} [bold]x[/]")
    out = got.get()
    assert not _raw_in(out) and "[red]x" in out and "[bold]x[/]" in out


# -- every read command, against a daemon ----------------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, Path,
                                                                        dict[str, int]]]:
    """A daemon holding two ended jobs full of EVIL: one reports metrics, a checkpoint and
    a fail reason from a folder named with it and saves an output file named with it; the
    other's command (so its name) starts with it."""
    root = tmp_path_factory.mktemp("hostile")
    d = DaemonProcess(root / "home").start()
    cwd = root / f"dir{EVIL}"
    (cwd / "out").mkdir(parents=True)
    ckpt = cwd / f"ck{EVIL}"
    ckpt.write_text("x")
    script = (f"import pathlib, sys, rota.job as j; j.report(step=1, **{{{'m' + EVIL!r}: 1.0}});"
              f"j.checkpoint_saved({str(ckpt)!r}, step=1);"
              f"pathlib.Path('out', {'f' + EVIL!r}).write_text('y');"
              "pathlib.Path('out', 'g\\n  fake line').write_text('z');"
              f"j.fail_reason({'why' + EVIL!r}); sys.exit(3)")
    try:
        with d.client() as c:
            a, b = (j["id"] for j in c.submit([
                {"command": [sys.executable, "-c", script, EVIL], "cwd": str(cwd),
                 "env": {"E": EVIL}, "outputs": ["out"]},
                {"command": [EVIL, "arg"], "cwd": str(cwd)}]))
            wait_until(lambda: all(c.job(j)["state"] == "failed" for j in (a, b)),
                       what="both jobs fail")
            wait_until(lambda: c.artifacts(a)["state"] in ("saved", "failed"),
                       what="job a's outputs are read")
        yield d, cwd, {"a": a, "b": b}
    finally:
        d.stop()


def _reads(ids: dict[str, int]) -> list[list[str]]:
    a, b = str(ids["a"]), str(ids["b"])
    return [["queue", "--all"], ["queue", "--all", "--wide"], ["queue", "--state", "failed"],
            ["show", a], ["show", b], ["why", a], ["why", b], ["metrics", a],
            ["checkpoints", a], ["artifacts", a], ["card", a], ["gpus"], ["status"],
            ["report", "--by", "user"], ["report", "--csv"], ["show", EVIL]]


def test_no_read_command_prints_a_users_control_characters(
        hostile: tuple[DaemonProcess, Path, dict[str, int]]) -> None:
    from typer.testing import CliRunner

    from rota.cli.main import app

    d, _, ids = hostile
    runner = CliRunner()
    seen = []
    for args in _reads(ids):
        r = runner.invoke(app, args, env={"ROTA_HOME": str(d.home)}, catch_exceptions=False)
        out = r.stdout + r.stderr
        assert not _raw_in(out), (args, out)
        seen.append(out)
    shown = "\n".join(seen)
    # what the job said is there, escaped: nothing was dropped
    for word in ("m\\x1b]0;PWN", "why\\x1b]0;PWN", "f\\x1b]0;PWN", "E=\\x1b]0;PWN",
                 "dir\\x1b]0;PWN", "\\u202e", "g\\x0a  fake line"):
        assert word in shown, word
    # --json stays exact
    r = runner.invoke(app, ["show", str(ids["a"]), "--json"], env={"ROTA_HOME": str(d.home)})
    assert json.loads(r.stdout)["spec"]["env"]["E"] == EVIL


def test_on_a_colour_terminal_only_the_clis_own_colour_codes_are_written(
        hostile: tuple[DaemonProcess, Path, dict[str, int]]) -> None:
    d, _, ids = hostile
    env = {**d.env, "FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "100"}
    for args in (["queue", "--all"], ["show", str(ids["b"])], ["metrics", str(ids["a"])]):
        r = subprocess.run([sys.executable, "-m", "rota", *args], env=env, text=True,
                           capture_output=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        assert "\x1b[" in r.stdout, args  # coloured
        assert not _raw_in(_SGR.sub("", r.stdout + r.stderr)), (args, r.stdout)


def test_a_job_named_from_its_command_carries_no_control_character_in_answers(
        hostile: tuple[DaemonProcess, Path, dict[str, int]]) -> None:
    d, _, ids = hostile
    with d.client() as c:
        job = c.job(ids["b"])
    assert job["name"] == command_name([EVIL, "arg"]) and not _raw_in(job["name"])
    assert job["command"] == [EVIL, "arg"]  # what runs is exactly what was submitted
