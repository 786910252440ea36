"""Lines of text with simple styles (bold, dim, a colour), printed without Rich.

Importing Rich's console costs more than a whole `rota queue` should (40-80 ms on a 2-core
machine), so the hot commands draw their tables as :class:`Lines`: plain text on a pipe or
a dumb terminal, SGR colour codes on a terminal (``NO_COLOR`` turns them off,
``FORCE_COLOR`` on, as for Rich), and a Rich ``Text`` wherever Rich prints them
(``__rich__``), as `rota demo` and the tests do.
"""

from __future__ import annotations

import os

from rota.printable import CONTROL, printable

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import IO

if TYPE_CHECKING:
    from rich.console import Group
    from rich.text import Text

#: the styles the tables use, as SGR parameters
_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
        "magenta": "35", "cyan": "36"}
_DUMB = ("dumb", "unknown")
_CONTROL = CONTROL.search


class Line:
    """One line: a style for all of it and styled parts. Its parts may be a user's text:
    their control characters are shown escaped (rota.cli.user_text), so the only ones a
    line prints are its own colour codes."""

    __slots__ = ("parts", "style")

    def __init__(self, text: str = "", style: str = "") -> None:
        self.style = style
        self.parts: list[tuple[str, str]] = [(text, "")] if text else []

    def append(self, text: str, style: str = "") -> Line:
        self.parts.append((text, style))
        return self

    @property
    def plain(self) -> str:
        text = "".join(text for text, _ in self.parts)
        return printable(text) if _CONTROL(text) else text

    def shown_parts(self) -> list[tuple[str, str]]:
        """The parts as printed: escaped (one search for the whole line: a table has
        thousands of parts, nearly all of them clean)."""
        if _CONTROL("".join(text for text, _ in self.parts)):
            return [(printable(text), style) for text, style in self.parts]
        return self.parts

    def ansi(self) -> str:
        out = []
        for text, style in self.shown_parts():
            codes = ";".join(_SGR[w] for w in f"{self.style} {style}".split() if w in _SGR)
            out.append(f"\x1b[{codes}m{text}\x1b[0m" if codes and text else text)
        return "".join(out)

    def __rich__(self) -> Text:
        from rich.text import Text

        made = Text(style=self.style)
        for text, style in self.shown_parts():
            made.append(text, style=style)
        return made


class Lines(list[Line]):
    """Lines printed one under the other."""

    def render(self, colour: bool) -> str:
        return "\n".join(line.ansi() if colour else line.plain for line in self)

    def __rich__(self) -> Group:
        from rich.console import Group

        return Group(*(line.__rich__() for line in self))


def colour_for(stream: IO[str]) -> bool:
    """Whether text written to ``stream`` should carry colour codes."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    try:
        return stream.isatty() and os.environ.get("TERM", "") not in _DUMB
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


def terminal_width() -> int:
    """The terminal's width as Rich reads it: ``COLUMNS`` when set, else the first of
    stdin, stdout, stderr that is a terminal, else 80 (80 on a dumb terminal too)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if os.environ.get("TERM", "") in _DUMB:
        return 80
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd).columns
        except (AttributeError, ValueError, OSError):
            continue
        return width or 80
    return 80
