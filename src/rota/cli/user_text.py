"""The one rule for what the CLI prints: a user's text reaches a terminal as text only
(DESIGN.md invariant 12).

A job's name, command, tags, reasons, paths, metric names, an error quoting a value: any
of them may be another person's, and may hold ``ESC ] 0 ; TITLE BEL``, ``ESC [ 2 J`` or
Rich markup (``[red]``). So:

- nothing is read as markup or emoji codes: the CLI's consoles have both off, and styles
  come from ``Text``/``Line`` styles, never from words;
- every control character is escaped (:mod:`rota.printable`): a table cell or a field on
  one line (``cell``), prose and errors keep their newlines and tabs (``prose``);
- behind both, every segment the CLI's consoles write is escaped again (a render hook), so
  a field a renderer forgot is escaped too (only its column may come out wider).

``--json`` stays exact: JSON escapes control characters itself.
"""

from __future__ import annotations

from rota.printable import printable

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderResult

#: what prose keeps: its own line breaks and tabs (a carriage return, which can overwrite
#: what a line said, is escaped)
PROSE_KEEPS = "\n\t"


def cell(value: object) -> str:
    """A value shown on one line (a table cell, a name in a heading)."""
    return printable(str(value))


def prose(text: str) -> str:
    """Lines of text (a command's message, an error): newlines and tabs kept."""
    return printable(text, keep=PROSE_KEEPS)


class _Escaped:
    """A renderable whose every text segment is shown with control characters escaped;
    the console's own control segments (cursor moves, clearing) pass as they are."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment

        for seg in console.render(self.inner, options):
            if seg.control:
                yield seg
            else:
                shown = prose(seg.text)
                yield seg if shown is seg.text else Segment(shown, seg.style)


def make_console(*, stderr: bool) -> Console:
    """A Rich console that prints words as words: no markup, no emoji codes, no
    highlighting, every control character in what it renders escaped."""
    from rich.console import Console, RenderHook

    class Escaping(RenderHook):
        def process_renderables(self, renderables: list[ConsoleRenderable],
                                ) -> list[ConsoleRenderable]:
            return [_Escaped(r) for r in renderables]

    made = Console(stderr=stderr, markup=False, emoji=False, highlight=False)
    made.push_render_hook(Escaping())
    return made

