"""Lines drawn without Rich (rota.cli.styled): plain on a pipe, SGR colours on a terminal,
the same text through Rich, and the terminal's width read as Rich reads it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from rota.cli.styled import Line, Lines, colour_for, terminal_width


def table() -> Lines:
    head = Line(style="bold").append("id  ").append("state")
    row = Line().append(" 7  ").append("running", style="green")
    return Lines([head, row, Line("  waits for a GPU", style="dim")])


def test_plain_and_coloured_text_and_the_same_through_rich() -> None:
    lines = table()
    assert lines.render(colour=False) == "id  state\n 7  running\n  waits for a GPU"
    coloured = lines.render(colour=True)
    assert "\x1b[1mid  \x1b[0m\x1b[1mstate\x1b[0m" in coloured
    assert " 7  \x1b[32mrunning\x1b[0m" in coloured and "\x1b[2m  waits" in coloured
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(lines)
    assert out.getvalue() == lines.render(colour=False) + "\n"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_that_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    assert colour_for(Tty()) and not colour_for(io.StringIO())
    monkeypatch.setenv("TERM", "dumb")
    assert not colour_for(Tty())
    monkeypatch.delenv("TERM")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_for(Tty())
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert colour_for(io.StringIO())


def test_the_width_is_columns_else_the_terminal_else_80(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "132")
    assert terminal_width() == 132
    monkeypatch.delenv("COLUMNS")
    monkeypatch.delenv("TERM", raising=False)
    monkeypatch.setattr("os.get_terminal_size", lambda fd: (_ for _ in ()).throw(OSError()))
    assert terminal_width() == 80
