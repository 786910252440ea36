"""A job's name and tags as a terminal shows them.

``rota queue`` and the other views of jobs print what people typed: a given name or
tag with a character that makes a terminal act (an escape that clears the screen, a bidi
override) could fake rows there, so the spec refuses one at submit; a job given no name
is named by its command's start, escaped, since a command may hold any character
(DESIGN.md invariant 12).
"""

from __future__ import annotations

import re

from rota.printable import printable

#: characters that make a terminal act (C0 and C1 controls, DEL: ESC starts sequences that
#: clear the screen or move the cursor) or reorder what follows (bidi overrides): a name or
#: a tag with one could fake rows in `rota queue`
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _no_control(what: str, text: str) -> None:
    m = _CONTROL.search(text)
    if m is not None:
        raise ValueError(f"{what} has a control character (U+{ord(m.group()):04X} at "
                         f"position {m.start()}); it could rewrite the terminal that shows it")


def command_name(command: list[str]) -> str:
    """A job's name when it was given none: its command's start. A given name with a
    control character is refused, but a command may hold any (yesterday's submits keep
    working), so here they are escaped: the name shows what the command holds and
    rewrites no terminal that lists it (DESIGN.md invariant 12)."""
    return printable(" ".join(command))[:60]
