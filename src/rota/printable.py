"""Text that came from a user, made safe to print on another person's terminal.

A job's name, command, tags, a waiting reason, a path or a metric name is anyone's text:
an escape sequence in it (``ESC ] 0 ; TITLE BEL`` sets a window title, ``ESC [ 2 J``
clears the screen, OSC 52 writes the clipboard) would act on every terminal that prints
it. ``printable`` shows each control character as its Python escape (``\\x1b``) instead:
C0 and C1 controls, DEL, and the Unicode line and paragraph separators and bidirectional
overrides that reorder what a reader sees (DESIGN.md invariant 12).
"""

from __future__ import annotations

import re

# C0, DEL, C1; U+2028/2029; bidi embeddings, overrides, isolates
_CODES = (*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F),
          *range(0x2066, 0x206A))


def _class_of(codes: tuple[int, ...]) -> re.Pattern[str]:
    """One character class (a plain class is several times faster than a lookahead)."""
    return re.compile("[" + "".join(re.escape(chr(c)) for c in codes) + "]")


CONTROL = _CONTROL = _class_of(_CODES)
#: the pattern for each ``keep`` asked for (a handful: the callers' constants)
_BUT: dict[str, re.Pattern[str]] = {"": _CONTROL}


def _shown(m: re.Match[str]) -> str:
    c = m.group()
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` on one line, every control character escaped (a newline too), but for the
    characters ``keep`` names (``"\\n\\t"``: several lines of a command's own prose)."""
    if not keep:  # the common case, first
        return _CONTROL.sub(_shown, text) if _CONTROL.search(text) else text
    pattern = _BUT.get(keep)
    if pattern is None:
        if not all(_CONTROL.fullmatch(c) for c in keep):
            raise ValueError(f"keep {keep!r}: only control characters can be kept")
        pattern = _BUT[keep] = _class_of(tuple(c for c in _CODES if chr(c) not in keep))
    return pattern.sub(_shown, text) if pattern.search(text) else text


def printable_lines(text: str) -> str:
    """``text`` as lines (newlines and tabs kept), every other control character escaped:
    a log's output. A lone carriage return (a progress bar redrawn) is kept as one."""
    return printable(text, keep="\t\n\r")
