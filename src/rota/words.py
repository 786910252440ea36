"""Shell-style splitting of an argument string, in linear time.

:func:`split_words` gives what ``shlex.split`` gives (POSIX rules, no comments): ``shlex``
builds each word a character at a time (``token += c``), which takes time quadratic in a
word's length: one 300,000-character word in the watched jobs file held the daemon 4.2 s.
Here each run of plain characters, quoted text or escape is one regular-expression match.
"""

from __future__ import annotations

import re

# One piece of a word, or the whitespace between words (shlex's whitespace: " \t\r\n").
_PIECE = re.compile(r"""
    (?P<plain>[^ \t\r\n'"\\]+)
  | '(?P<single>[^']*)'
  | "(?P<double>[^"\\]*(?:\\.[^"\\]*)*)"
  | \\(?P<escaped>.)
  | (?P<space>[ \t\r\n]+)
""", re.VERBOSE | re.DOTALL)
# Inside double quotes a backslash escapes only a double quote or a backslash.
_DOUBLE_ESCAPE = re.compile(r'\\(["\\])')
# An unclosed double quote whose text ends in a lone backslash (shlex names the backslash).
_DOUBLE_TAIL_ESCAPE = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*\\', re.DOTALL)


def split_words(text: str) -> list[str]:
    """``text`` split like a POSIX shell would (quotes, backslashes), never run by one.

    Raises ValueError with shlex's words for an unclosed quote or a trailing backslash.
    """
    words: list[str] = []
    parts: list[str] = []
    in_word = False  # a quoted empty string ("") is a word too
    pos, end = 0, len(text)
    while pos < end:
        m = _PIECE.match(text, pos)
        if m is None:
            escape = text[pos] == "\\" or (
                text[pos] == '"' and _DOUBLE_TAIL_ESCAPE.fullmatch(text, pos + 1) is not None)
            raise ValueError("No escaped character" if escape else "No closing quotation")
        kind = m.lastgroup
        if kind == "space":
            if in_word:
                words.append("".join(parts))
                parts, in_word = [], False
        elif kind == "double":
            parts.append(_DOUBLE_ESCAPE.sub(r"\1", m.group("double")))
            in_word = True
        else:
            parts.append(m.group(kind or "plain"))
            in_word = True
        pos = m.end()
    if in_word:
        words.append("".join(parts))
    return words
