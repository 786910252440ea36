"""Custom metric patterns: a job's own regular expressions for numbers in its output,
checked when the job is submitted and run by RE2, the linear-time engine job output is read
with (a pattern cannot make reading a line take longer than the line is long).

Its own module, beside ``rota.core`` and ``rota.ml``: a spec checks its patterns
(``rota.core.spec``) and the output parser runs them (``rota.ml.parse``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import re2

from rota.errors import InvalidSpec

#: a custom pattern's longest text, and the memory RE2 may use to run one (past it RE2
#: refuses the pattern as too large)
MAX_PATTERN = 1000
_RE2_MEMORY = 2 << 20


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the reason is in the exception (RE2 would print it too)
    options.max_mem = _RE2_MEMORY
    return options


_OPTIONS = _re2_options()


def compile_pattern(pattern: object, field: str = "metric_patterns") -> re2._Regexp:
    """A custom metric pattern, compiled by RE2; InvalidSpec at ``field`` saying why not."""
    if not isinstance(pattern, str):
        raise InvalidSpec(f"metric pattern {pattern!r} is not a string", field=field)
    if len(pattern) > MAX_PATTERN:
        raise InvalidSpec(f"metric pattern of {len(pattern)} characters; at most {MAX_PATTERN}",
                          field=field)
    try:  # Python's syntax first: the one people write, and its rules for group names
        checked = re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as e:
        raise InvalidSpec(f"metric pattern {pattern!r} is not a valid regular expression: {e}",
                          field=field) from None
    if not checked.groupindex:
        raise InvalidSpec(f"metric pattern {pattern!r} has no named group; name what it "
                          "captures, e.g. 'top1 (?P<top1>[0-9.]+)'", field=field)
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) \
            else str(e)
        raise InvalidSpec(f"metric pattern {pattern!r} cannot run in RE2, the linear-time "
                          f"engine job output is read with: {why} (backreferences and "
                          "lookarounds are not supported)", field=field) from None


def validate_patterns(patterns: Sequence[str]) -> list[str]:
    """Check a job's custom metric patterns; return them unchanged or raise InvalidSpec
    naming the first bad one's place (``metric_patterns[2]``)."""
    if isinstance(patterns, str):  # a str is a Sequence[str] of its characters
        raise InvalidSpec("metric_patterns must be a list of patterns, not one string",
                          field="metric_patterns")
    for n, p in enumerate(patterns):
        compile_pattern(p, f"metric_patterns[{n}]")
    return list(patterns)
