"""A ``.json`` jobs file, read as JSON (PyYAML would accept a trailing comma and read
``1e5`` as a string): one spec object, a list of them, or ``{"jobs": [...]}``.

The file's syntax is checked whole first (an error names its line and column); then each
job is decoded on its own, so a job with a key given twice or a number Python will not
convert is an error on its line and the other jobs still count.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rota.jobsfile_items import JobsFileError, JobsFileItem, spec_item
from rota.yaml_bounds import INT_DIGITS_MAX

_WS = re.compile(r"[ \t\n\r]*")
_SHAPE = 'expected a job spec object, a list of them, or {"jobs": [...]}'


class _ItemError(ValueError):
    """What is wrong inside one job; ``at`` is where in the text, when known."""

    def __init__(self, message: str, at: str, *, last: bool = False) -> None:
        super().__init__(message)
        self.at, self.last = at, last

    def where(self, text: str, start: int, end: int) -> int:
        return (text.rfind if self.last else text.find)(self.at, start, end)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _ItemError(f"key {k!r} appears twice", json.dumps(k), last=True)
        out[k] = v
    return out


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > INT_DIGITS_MAX:
        raise _ItemError(f"a number of {digits:,} digits; Python reads at most "
                         f"{INT_DIGITS_MAX:,} (quote it to make it a string)", text)
    return int(text)


_STRICT = json.JSONDecoder(object_pairs_hook=_unique, parse_int=_int)
#: syntax only: numbers stay text, objects stay pairs (nothing can fail but the syntax)
_LOOSE = json.JSONDecoder(object_pairs_hook=lambda pairs: pairs, parse_int=str)


def read_json(text: str) -> tuple[list[JobsFileItem], list[JobsFileError]]:
    try:
        _LOOSE.decode(text)
    except json.JSONDecodeError as e:
        if not text.strip():
            return [], []
        return [], [JobsFileError(e.lineno, f"JSON: {_worded(e, text)} (column {e.colno})")]
    errors: list[JobsFileError] = []
    spans = _job_spans(text, errors)
    items: list[JobsFileItem] = []
    lines = _Lines(text)
    for number, (start, end) in enumerate(spans, start=1):
        line = lines.at(start)
        try:
            value = _STRICT.decode(text[start:end])
        except _ItemError as e:
            where = e.where(text, start, end)
            errors.append(JobsFileError(lines.at(where) if where >= 0 else line,
                                        f"job {number}: {e}"))
            continue
        read = spec_item(line, value, number)
        if isinstance(read, JobsFileItem):
            items.append(read)
        else:
            errors.append(read)
    return items, errors


def _worded(e: json.JSONDecodeError, text: str) -> str:
    if text[e.pos:e.pos + 1] in ("]", "}") and text[:e.pos].rstrip().endswith(","):
        return f"a comma before {text[e.pos]!r}: JSON allows no trailing comma"
    return e.msg


class _Lines:
    """Line numbers of positions met in increasing order, in one pass over the text."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def at(self, pos: int) -> int:
        if pos < self.pos:  # rare (an error's place inside a job): count from the start
            return self.text.count("\n", 0, pos) + 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _job_spans(text: str, errors: list[JobsFileError]) -> list[tuple[int, int]]:
    """Where each job's value starts and ends in ``text`` (already known to be JSON)."""
    start = _skip(text, 0)
    if text.startswith("[", start):
        return _elements(text, start)
    if not text.startswith("{", start):
        if text.startswith("null", start):
            return []
        errors.append(JobsFileError(text.count("\n", 0, start) + 1, _SHAPE))
        return []
    members = _members(text, start)
    if "jobs" not in members:
        return [(start, _LOOSE.raw_decode(text, start)[1])]
    for key, (k_start, _, _) in members.items():
        if key != "jobs":
            errors.append(JobsFileError(text.count("\n", 0, k_start) + 1,
                                        f"unknown top-level key(s) {[key]} next to 'jobs'"))
    _, v_start, _ = members["jobs"]
    if text.startswith("[", v_start):
        return _elements(text, v_start)
    if not text.startswith("null", v_start):
        errors.append(JobsFileError(text.count("\n", 0, v_start) + 1,
                                    "'jobs' must be a list of specs"))
    return []


def _skip(text: str, pos: int) -> int:
    """The first position from ``pos`` that is not JSON whitespace."""
    m = _WS.match(text, pos)
    return m.end() if m else pos


def _elements(text: str, pos: int) -> list[tuple[int, int]]:
    """The spans of the values of the array at ``pos``."""
    spans = []
    pos = _skip(text, pos + 1)
    while text[pos] != "]":
        _, end = _LOOSE.raw_decode(text, pos)
        spans.append((pos, end))
        pos = _skip(text, end)
        if text[pos] == ",":
            pos = _skip(text, pos + 1)
    return spans


def _members(text: str, pos: int) -> dict[str, tuple[int, int, int]]:
    """The object at ``pos``: each key's start, and its value's start and end."""
    out: dict[str, tuple[int, int, int]] = {}
    pos = _skip(text, pos + 1)
    while text[pos] != "}":
        key, k_end = _LOOSE.raw_decode(text, pos)
        v_start = _skip(text, _skip(text, k_end) + 1)  # past the colon
        _, v_end = _LOOSE.raw_decode(text, v_start)
        out.setdefault(key, (pos, v_start, v_end))
        pos = _skip(text, v_end)
        if text[pos] == ",":
            pos = _skip(text, pos + 1)
    return out
